"""The Spec-o3 agent loop: full view → (reason, zoom)* → verdict, as a generator of step records.

`run_episode` drives an `Engine` through the exact protocol of `speco3.agent.protocol`: one system + user turn with
the full-spectrum image, then up to ``max_turns`` assistant turns. A turn with a parsable ``<tool_call>`` runs the
first call (only the first) and appends the tool turn directly after the sampled ``<|im_end|>``; a turn without
one ends the episode and its answer is parsed. Nothing escapes: engine failures, a full context, cancellation and
unusable spectra become outcomes of the final `VerdictStep`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from speco3.agent.protocol import (
    IM_END,
    first_turn_parts,
    parse_answer,
    parse_tool_calls,
    split_reasoning,
    tool_turn_parts,
)
from speco3.agent.steps import AssistantStep, Outcome, PromptStep, Step, ToolStep, VerdictStep, ViewSpec
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn, run_tool
from speco3.engine.base import Engine, Part
from speco3.errors import ContextFullError
from speco3.imaging import prepare_image
from speco3.spectra.model import Spectrum
from speco3.spectra.view import View

logger = logging.getLogger(__name__)

MAX_TURNS = 8


def _safe_callback(on_token: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """Wrap a consumer's token callback so that its own errors never look like engine errors."""
    if on_token is None:
        return None

    def emit(piece: str) -> None:
        try:
            on_token(piece)
        except Exception:  # the consumer's bug; keep generating
            logger.exception("on_token callback failed")

    return emit


def run_episode(
    engine: Engine,
    spectrum: Spectrum,
    task: Task | str,
    render: RenderFn,
    *,
    cancel: threading.Event | None = None,
    on_token: Callable[[str], None] | None = None,
    max_turns: int = MAX_TURNS,
    image_max_tokens: int | None = None,
    max_tokens_per_turn: int | None = None,
) -> Iterator[Step]:
    """Run one inspection episode; yield `PromptStep`, then `AssistantStep`/`ToolStep` records, then one `VerdictStep`.

    Parameters
    ----------
    engine : Engine
        Loaded lazily here (``load`` is idempotent); ``reset`` starts the conversation.
    spectrum : Spectrum
    task : Task or str
        The task (or a bare task text).
    render : callable
        ``View -> PNG bytes`` (the training-faithful renderer; tests pass a small Pillow one).
    cancel : threading.Event, optional
        Set it to stop between tokens; the episode ends with ``Outcome.CANCELLED``.
    on_token : callable, optional
        Receives every generated text piece as it is sampled.
    max_turns : int
        Assistant-turn budget (8 in training).
    image_max_tokens : int, optional
        Cap on image tokens per image (None: the processor default). Defaults to the engine setting.
    max_tokens_per_turn : int, optional
        Generation cap per assistant turn. Defaults to the engine setting.
    """
    t_start = time.perf_counter()
    task_id, task_text = (task.id, task.text) if isinstance(task, Task) else ("custom", str(task))
    settings = getattr(engine, "settings", None)
    if image_max_tokens is None and settings is not None:
        image_max_tokens = settings.image_max_tokens
    if max_tokens_per_turn is None and settings is not None:
        max_tokens_per_turn = settings.max_tokens_per_turn
    emit = _safe_callback(on_token)
    conversation: list[Part] = []
    totals = {"turns": 0, "tokens": 0, "prompt": 0, "image": 0, "zooms": 0}

    def finish(outcome: Outcome, detail: str = "", answer=None, content: str = "") -> VerdictStep:
        if detail:
            log = logger.info if outcome in (Outcome.CANCELLED, Outcome.FORMAT_ERROR) else logger.warning
            log("episode on %s ended: %s (%s)", spectrum.name, outcome.value, detail)
        return VerdictStep(
            turn=totals["turns"],
            seconds=time.perf_counter() - t_start,
            outcome=outcome,
            verdict=outcome.verdict,
            answer=content or (answer.answer if answer else ""),
            method=answer.method if answer else "none",
            strict=answer.strict if answer else False,
            detail=detail,
            turns=totals["turns"],
            tokens_generated=totals["tokens"],
            prompt_tokens=totals["prompt"],
            image_tokens=totals["image"],
            zooms=totals["zooms"],
            extra={"conversation": conversation},
        )

    def cancelled() -> bool:
        return cancel is not None and cancel.is_set()

    # -- the full view -------------------------------------------------------------------------------
    t0 = time.perf_counter()
    full = View(spectrum, None, frame="rest")
    if full.data_range() is None:
        yield finish(Outcome.INPUT_ERROR, f"{spectrum.name}: no finite data points to show")
        return
    try:
        image = prepare_image(render(full), max_tokens=image_max_tokens)
    except Exception as exc:
        logger.exception("full view of %s could not be rendered", spectrum.name)
        yield finish(Outcome.INPUT_ERROR, f"full view could not be rendered: {exc}")
        return
    yield PromptStep(turn=0, seconds=time.perf_counter() - t0, task_id=task_id, task_text=task_text,
                     view=full, view_spec=ViewSpec.of(full), image=image)
    if cancelled():
        yield finish(Outcome.CANCELLED, "cancelled before the first turn")
        return

    def feed(parts: list[Part]) -> None:
        engine.extend(parts)
        conversation.extend(parts)

    try:
        engine.load()
        engine.reset()
        feed(first_turn_parts(image, task_text))
    except ContextFullError as exc:
        yield finish(Outcome.CONTEXT_FULL, str(exc))
        return
    except Exception as exc:
        logger.exception("engine failed to start the episode")
        yield finish(Outcome.ENGINE_ERROR, f"{type(exc).__name__}: {exc}")
        return

    # -- assistant turns -----------------------------------------------------------------------------
    for turn in range(1, max_turns + 1):
        if cancelled():
            yield finish(Outcome.CANCELLED, f"cancelled before turn {turn}")
            return
        t0 = time.perf_counter()
        try:
            res = engine.generate(max_tokens=max_tokens_per_turn, on_token=emit, cancel=cancel)
        except ContextFullError as exc:
            yield finish(Outcome.CONTEXT_FULL, str(exc))
            return
        except Exception as exc:
            logger.exception("generation failed in turn %d", turn)
            yield finish(Outcome.ENGINE_ERROR, f"{type(exc).__name__}: {exc}")
            return
        totals["turns"] = turn
        totals["tokens"] += res.n_tokens
        totals["prompt"] += res.prompt_tokens
        totals["image"] += res.image_tokens
        conversation.append(res.text + (IM_END if res.stop_reason == "stop" else ""))
        calls = parse_tool_calls(res.text) if res.stop_reason in ("stop", "length") else []
        reasoning, content = split_reasoning(res.text)
        call = calls[0] if calls else None
        yield AssistantStep(
            turn=turn, seconds=time.perf_counter() - t0, text=res.text, reasoning=reasoning, content=content,
            tool_name=call.name if call else None, tool_arguments=call.arguments if call else None,
            n_tokens=res.n_tokens, prompt_tokens=res.prompt_tokens, image_tokens=res.image_tokens,
            stop_reason=res.stop_reason, tokens_per_s=res.tokens_per_s,
        )
        if res.stop_reason == "cancelled":
            yield finish(Outcome.CANCELLED, f"cancelled during turn {turn}")
            return
        if res.stop_reason == "context_full":
            yield finish(Outcome.CONTEXT_FULL, f"context window full during turn {turn}")
            return
        if call is None:
            answer = parse_answer(res.text)
            if answer.verdict is not None:
                yield finish(Outcome(answer.verdict), answer=answer, content=content)
            elif res.stop_reason == "length":
                yield finish(Outcome.FORMAT_ERROR, f"turn {turn} reached {max_tokens_per_turn} tokens", answer,
                             content)
            else:
                yield finish(Outcome.FORMAT_ERROR, f"turn {turn} has neither a parsable tool call nor an answer",
                             answer, content)
            return
        if turn >= max_turns:
            yield finish(Outcome.BUDGET_EXHAUSTED, f"still calling the tool after {max_turns} turns")
            return
        result = run_tool(call, spectrum, render, image_max_tokens=image_max_tokens)
        totals["zooms"] += int(result.ok)
        yield ToolStep(
            turn=turn, seconds=result.seconds, label=result.label, wavelength_range=result.wavelength_range,
            ok=result.ok, error=result.error, response_text=result.text, view=result.view,
            view_spec=ViewSpec.of(result.view) if result.view is not None else None, image=result.image,
        )
        try:
            if res.stop_reason == "length":  # close the truncated message before the tool turn
                feed([IM_END])
            feed(tool_turn_parts(result.image, result.text))
        except ContextFullError as exc:
            yield finish(Outcome.CONTEXT_FULL, str(exc))
            return
        except Exception as exc:
            logger.exception("engine failed to take the tool turn")
            yield finish(Outcome.ENGINE_ERROR, f"{type(exc).__name__}: {exc}")
            return
    yield finish(Outcome.BUDGET_EXHAUSTED, f"no verdict after {max_turns} turns")  # max_turns < 1


def run_to_verdict(*args, **kwargs) -> tuple[list[Step], VerdictStep]:
    """Run `run_episode` to the end; return all steps and the final `VerdictStep`."""
    steps = list(run_episode(*args, **kwargs))
    final = steps[-1]
    assert isinstance(final, VerdictStep)
    return steps, final

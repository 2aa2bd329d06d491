"""The Spec-o3 agent loop: full view → (reason, zoom)* → verdict, as a generator of step records.

`run_episode` drives an `Engine` through the exact protocol of `speco3.agent.protocol`: one system + user turn with
the full-spectrum image, then up to ``max_turns`` assistant turns. A turn with a parsable ``<tool_call>`` runs the
first call (only the first) and appends the tool turn directly after the sampled ``<|im_end|>``; a turn without
one ends the episode and its answer is parsed. Engine, transport and input failures (`speco3.errors.OUTCOME_ERRORS`),
a full context, cancellation and unusable spectra become outcomes of the final `VerdictStep`; any other exception is
a bug and propagates.

The episode never calls the engine itself: it yields requests (`speco3.agent.driver`) that a driver serves, so
the same episode code runs alone (`run_episode`) or beside others on parallel sequences (`speco3.agent.rollouts.run_group`, batches).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from speco3.agent.confidence import answer_token_p_yes
from speco3.agent.driver import Extend, Generate, Open, Request, drive
from speco3.agent.protocol import (
    IM_END,
    MAX_TURNS,
    ParsedAnswer,
    ParsedCall,
    first_turn_messages,
    markup,
    parse_answer,
    parse_tool_calls,
    split_reasoning,
    tool_turn_messages,
)
from speco3.agent.steps import AssistantStep, Outcome, PromptStep, Step, ToolStep, VerdictStep, ViewSpec
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn, run_tool
from speco3.engine.base import Engine, GenerationResult, Part, Sampling
from speco3.engine.parallel import SerialSlots
from speco3.errors import OUTCOME_ERRORS, ContextFullError
from speco3.imaging import PreparedImage, effective_max_tokens, prepare_image
from speco3.spectra.model import Spectrum
from speco3.spectra.view import View

logger = logging.getLogger(__name__)
#: What a full view the renderer cannot draw raises besides our own errors (NaN ranges, empty arrays): an input error.
RENDER_ERRORS: tuple[type[BaseException], ...] = (*OUTCOME_ERRORS, ValueError, ArithmeticError)
EpisodeGen = Generator["Step | Request", Any, Any]


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


@dataclass(frozen=True)
class EpisodeOptions:
    """How episodes run, passed as one value down the rollout path (`speco3.vetting.rollout_runs.run_traced` →
    `run_into` → `speco3.agent.rollouts.run_group` → `iter_rollouts` → `episode_steps` → `Episode`).

    ``cancel``: set it to stop between tokens (the episode ends ``cancelled``); ``on_token``: every generated text
    piece as it is sampled (with K rollouts, `iter_rollouts` streams each rollout's through its own sink instead);
    ``max_turns``: the assistant-turn budget (8 in training); ``image_max_tokens``: the cap on image tokens per
    image (None: the engine's setting, else `speco3.imaging.DEFAULT_MAX_TOKENS`); ``max_tokens_per_turn``: the
    generation cap per assistant turn (None: the engine's setting). How each rollout samples is not an option of
    the path: each rollout has its own (`RolloutPlan.samplings`).
    """

    cancel: threading.Event | None = field(default=None, compare=False)
    on_token: Callable[[str], None] | None = field(default=None, compare=False)
    max_turns: int = MAX_TURNS
    image_max_tokens: int | None = None
    max_tokens_per_turn: int | None = None

    def for_engine(self, engine: Engine) -> EpisodeOptions:
        """These options with the engine's settings where they leave a cap to it, and a token callback whose own
        errors never look like engine errors."""
        return replace(
            self, on_token=_safe_callback(self.on_token),
            image_max_tokens=effective_max_tokens(engine.settings.image_max_tokens if self.image_max_tokens is None
                                                  else self.image_max_tokens),
            max_tokens_per_turn=(engine.settings.max_tokens_per_turn if self.max_tokens_per_turn is None
                                 else self.max_tokens_per_turn))

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


@dataclass
class Episode:
    """The state of one episode: the conversation as fed to the engine, the running totals, the budget
    (``options``, as `EpisodeOptions.for_engine` resolved them).

    `run` yields the step records; each method below is one part of the protocol and returns the `VerdictStep`
    that ends the episode when something stops it (or None to go on).
    """

    engine: Engine
    spectrum: Spectrum
    render: RenderFn
    options: EpisodeOptions = EpisodeOptions()
    sampling: Sampling | None = None  # None: the engine's settings
    conversation: list[Part] = field(default_factory=list)
    turns: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    image_tokens: int = 0
    zooms: int = 0
    t_start: float = field(default_factory=time.perf_counter)

    # -- the episode -----------------------------------------------------------------------------------------
    def run(self, task_id: str, task_text: str) -> EpisodeGen:
        """The episode as a generator of steps and engine requests (serve it with `speco3.agent.driver.drive`)."""
        first = self.full_view(task_id, task_text)
        yield first
        if isinstance(first, VerdictStep):
            return
        if self.cancelled():
            yield self.finish(Outcome.CANCELLED, "cancelled before the first turn")
            return
        assert first.image is not None, "the first turn's prompt step carries the full view"  # _prompt makes it
        _, failed = yield from self.engine_call(self.start(first.image, task_text), "engine failed to start the episode")
        if failed is not None:
            yield failed
            return
        for turn in range(1, self.options.max_turns + 1):
            if (yield from self.turn(turn)):
                return
        yield self.finish(Outcome.BUDGET_EXHAUSTED, f"no verdict after {self.options.max_turns} turns")  # max_turns < 1

    def full_view(self, task_id: str, task_text: str) -> PromptStep | VerdictStep:
        """The first step: the whole spectrum rendered for the first user turn."""
        t0 = time.perf_counter()
        if self.spectrum.is_empty:  # a flat line of masked zeros is no evidence; the model must not judge it
            return self.finish(Outcome.INPUT_ERROR, f"{self.spectrum.name}: every pixel is masked or not finite "
                               f"({self.spectrum.n_pixels} pixels, none usable)")
        full = View(self.spectrum, None, frame="rest")
        if full.data_range() is None:
            return self.finish(Outcome.INPUT_ERROR, f"{self.spectrum.name}: no finite data points to show")
        try:
            image = prepare_image(self.render(full), max_tokens=self.options.image_max_tokens)
        except RENDER_ERRORS as exc:  # data the renderer cannot draw
            logger.exception("full view of %s could not be rendered", self.spectrum.name)
            return self.finish(Outcome.INPUT_ERROR, f"full view could not be rendered: {exc}")
        return PromptStep(turn=0, seconds=time.perf_counter() - t0, task_id=task_id, task_text=task_text,
                          view=full, view_spec=ViewSpec.of(full), image=image)

    def start(self, image: PreparedImage, task_text: str) -> Open:
        """The request that starts the conversation (loading the model if needed) with the system and first user
        turns (as markup for a local engine, as messages for a chat server)."""
        messages = first_turn_messages(image, task_text)
        return Open(self.sampling, markup(messages), messages)

    def turn(self, turn: int) -> EpisodeGen:
        """One assistant turn: generate; then the verdict, or the tool call and its tool turn. True when the episode
        ended (its `VerdictStep` was yielded)."""
        if self.cancelled():
            yield self.finish(Outcome.CANCELLED, f"cancelled before turn {turn}")
            return True
        t0 = time.perf_counter()
        res, failed = yield from self.engine_call(self.generate(), f"generation failed in turn {turn}")
        if res is None:
            assert failed is not None  # engine_call returns (None, the failure's verdict)
            yield failed
            return True
        step, call = self.record(turn, res, t0)
        yield step
        end = self.end_of_turn(turn, res, call, step.content)
        if end is not None:
            yield end
            return True
        assert call is not None
        return (yield from self.zoom(turn, call, res))

    # -- parts of a turn -------------------------------------------------------------------------------------
    def generate(self) -> Generate:
        o = self.options
        return Generate(max_tokens=o.max_tokens_per_turn, on_token=o.on_token, cancel=o.cancel)

    def record(self, turn: int, res: GenerationResult, t0: float) -> tuple[AssistantStep, ParsedCall | None]:
        """Count the turn, keep its tokens verbatim in the conversation, and parse its first tool call."""
        self.turns = turn
        self.tokens += res.n_tokens
        self.prompt_tokens += res.prompt_tokens
        self.image_tokens += res.image_tokens
        self.conversation.append(res.text + (IM_END if res.stop_reason == "stop" else ""))
        calls = parse_tool_calls(res.text) if res.stop_reason in ("stop", "length") else []
        reasoning, content = split_reasoning(res.text)
        call = calls[0] if calls else None
        step = AssistantStep(
            turn=turn, seconds=time.perf_counter() - t0, text=res.text, reasoning=reasoning, content=content,
            tool_name=call.name if call else None, tool_arguments=call.arguments if call else None,
            n_tokens=res.n_tokens, prompt_tokens=res.prompt_tokens, image_tokens=res.image_tokens,
            stop_reason=res.stop_reason, tokens_per_s=res.tokens_per_s,
        )
        return step, call

    def end_of_turn(self, turn: int, res: GenerationResult, call: ParsedCall | None, content: str
                    ) -> VerdictStep | None:
        """The verdict when this turn ends the episode (stopped, answered, unparsable, out of budget)."""
        if res.stop_reason == "cancelled":
            return self.finish(Outcome.CANCELLED, f"cancelled during turn {turn}")
        if res.stop_reason == "context_full":
            return self.finish(Outcome.CONTEXT_FULL, f"context window full during turn {turn}")
        if call is None:
            answer = parse_answer(res.text)
            if answer.verdict is not None:
                final = self.finish(Outcome(answer.verdict), answer=answer, content=content)
                final.p_yes_token = answer_token_p_yes(res.logprobs, answer.verdict)
                return final
            if res.stop_reason == "length":
                return self.finish(Outcome.FORMAT_ERROR, f"turn {turn} reached {self.options.max_tokens_per_turn} tokens",
                                   answer, content)
            return self.finish(Outcome.FORMAT_ERROR, f"turn {turn} has neither a parsable tool call nor an answer",
                               answer, content)
        if turn >= self.options.max_turns:
            return self.finish(Outcome.BUDGET_EXHAUSTED, f"still calling the tool after {self.options.max_turns} turns")
        return None

    def zoom(self, turn: int, call: ParsedCall, res: GenerationResult) -> EpisodeGen:
        """Run the (first) tool call and feed its tool turn right after the sampled message."""
        result = run_tool(call, self.spectrum, self.render, image_max_tokens=self.options.image_max_tokens)
        self.zooms += int(result.ok)
        yield ToolStep(
            turn=turn, seconds=result.seconds, label=result.label, wavelength_range=result.wavelength_range,
            ok=result.ok, error=result.error, response_text=result.text, view=result.view,
            view_spec=ViewSpec.of(result.view) if result.view is not None else None, image=result.image,
        )

        # a truncated message is closed before the tool turn (a chat server's template closes it itself)
        messages = tool_turn_messages(result.image, result.text)
        close: list[str | PreparedImage] = [IM_END] if res.stop_reason == "length" else []
        tool_turn = Extend(close + markup(messages), messages)
        _, failed = yield from self.engine_call(tool_turn, "engine failed to take the tool turn")
        if failed is not None:
            yield failed
        return failed is not None

    # -- helpers ---------------------------------------------------------------------------------------------
    def cancelled(self) -> bool:
        return self.options.cancelled()

    def engine_call(self, request: Request, failure: str) -> Generator[Request, Any, tuple[Any, VerdictStep | None]]:
        """Ask the driver for engine work (``yield from``): ``(its result, None)``, or ``(None, the final verdict)``
        when the context is full or the engine fails with one of `OUTCOME_ERRORS` (``failure`` is logged with the
        traceback); any other exception propagates."""
        try:
            result = yield request
        except ContextFullError as exc:
            return None, self.finish(Outcome.CONTEXT_FULL, str(exc))
        except OUTCOME_ERRORS as exc:  # engine, transport, input: an outcome; anything else is a bug and propagates
            logger.error("%s: %s: %s", failure, type(exc).__name__, exc, exc_info=exc)
            return None, self.finish(Outcome.ENGINE_ERROR, f"{type(exc).__name__}: {exc}")
        if isinstance(request, (Open, Extend)):
            self.conversation.extend(request.parts)
        return result, None

    def finish(self, outcome: Outcome, detail: str = "", answer: ParsedAnswer | None = None, content: str = ""
               ) -> VerdictStep:
        """The final record of the episode."""
        who = self.spectrum.name
        if self.sampling is not None:  # a rollout: its seed tells it from the others (and reproduces it)
            who += f" [seed {self.sampling.seed}, temperature {self.sampling.temperature:g}]"
        if detail:
            log = logger.info if outcome in (Outcome.CANCELLED, Outcome.FORMAT_ERROR) else logger.warning
            log("episode on %s ended: %s (%s)", who, outcome.value, detail)
        logger.info("episode on %s: %s after %d turns, %d zooms, %d tokens generated, %d prompt and %d image tokens "
                    "evaluated (not counting a prefix shared with another rollout), %.1f s", who, outcome.value,
                    self.turns, self.zooms, self.tokens, self.prompt_tokens, self.image_tokens,
                    time.perf_counter() - self.t_start)
        return VerdictStep(
            turn=self.turns, seconds=time.perf_counter() - self.t_start, outcome=outcome, verdict=outcome.verdict,
            answer=content or (answer.answer if answer else ""), method=answer.method if answer else "none",
            strict=answer.strict if answer else False, detail=detail, turns=self.turns,
            tokens_generated=self.tokens, prompt_tokens=self.prompt_tokens, image_tokens=self.image_tokens,
            zooms=self.zooms, extra={"conversation": self.conversation},
        )


def episode_steps(
    engine: Engine,
    spectrum: Spectrum,
    task: Task | str,
    render: RenderFn,
    options: EpisodeOptions = EpisodeOptions(),
    *,
    sampling: Sampling | None = None,
) -> EpisodeGen:
    """The episode of `run_episode` as a generator of steps and requests, for `speco3.agent.driver.drive`."""
    task_id, task_text = (task.id, task.text) if isinstance(task, Task) else ("custom", str(task))
    return Episode(engine, spectrum, render, options.for_engine(engine), sampling).run(task_id, task_text)


def run_episode(
    engine: Engine,
    spectrum: Spectrum,
    task: Task | str,
    render: RenderFn,
    options: EpisodeOptions = EpisodeOptions(),
    *,
    sampling: Sampling | None = None,
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
    options : EpisodeOptions
        Cancel, token stream, turn budget and caps.
    sampling : Sampling, optional
        How this episode samples (one rollout's temperature, top-p, top-k and seed). Defaults to the engine setting.
    """
    for _, step in drive([episode_steps(engine, spectrum, task, render, options, sampling=sampling)],
                         SerialSlots(engine)):
        yield step


def run_to_verdict(engine: Engine, spectrum: Spectrum, task: Task | str, render: RenderFn,
                   options: EpisodeOptions = EpisodeOptions()) -> tuple[list[Step], VerdictStep]:
    """Run `run_episode` to the end; return all steps and the final `VerdictStep`."""
    steps = list(run_episode(engine, spectrum, task, render, options))
    final = steps[-1]
    assert isinstance(final, VerdictStep)
    return steps, final

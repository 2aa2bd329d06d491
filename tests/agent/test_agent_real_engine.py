"""The agent loop on the real llama.cpp engine with the tiny random Qwen2.5-VL (its words are noise; the path is real)."""

from __future__ import annotations

import logging
import threading

import pytest

from speco3.agent import MAX_TURNS, EpisodeOptions, Outcome, Trace, get_task, run_episode
from speco3.agent.steps import AssistantStep, PromptStep, ToolStep, VerdictStep

pytestmark = pytest.mark.llama

try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1); a broken library raises
    HAVE_LLAMA = False


@pytest.fixture(scope="module")
def tiny_engine(tiny_gguf):
    if not HAVE_LLAMA:
        pytest.skip("llama-cpp-python (with mtmd) is not installed")
    from speco3.engine.base import EngineSettings
    from speco3.engine.llama import LlamaMtmdEngine

    text, mmproj = tiny_gguf("Q8_0")
    settings = EngineSettings(n_ctx=4096, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False, image_max_tokens=120,
                              max_tokens_per_turn=96)
    engine = LlamaMtmdEngine(text, mmproj, settings, warmup=False)
    engine.load()
    yield engine
    engine.close()


def _run(engine, spectrum, render, **kw):
    pieces: list[str] = []
    trace = Trace()
    steps = list(trace.follow(run_episode(engine, spectrum, get_task("cv"), render, EpisodeOptions(on_token=pieces.append, **kw))))
    return steps, pieces, trace


# How an episode of the tiny random model can end without anything going wrong: its words are noise, so a verdict,
# a malformed answer or a tool call in every turn are all possible; an engine error, a full context (n_ctx 4096
# holds 8 turns of 96 tokens and 8 images of at most 120 tokens), bad input or a cancel are not.
CLEAN_ENDS = {Outcome.YES, Outcome.NO, Outcome.FORMAT_ERROR, Outcome.BUDGET_EXHAUSTED}


def _assert_clean_end(steps, final) -> None:
    """The outcome is a clean one and agrees with the turns that led to it."""
    assert isinstance(final, VerdictStep)
    assert final.outcome in CLEAN_ENDS, f"{final.outcome.value}: {final.detail}"
    turns = [s for s in steps if isinstance(s, AssistantStep)]
    assert turns, final.detail
    assert all(s.stop_reason in ("stop", "length") for s in turns), [s.stop_reason for s in turns]
    tools = [s for s in steps if isinstance(s, ToolStep)]
    assert final.turns == len(turns) and len(tools) == sum(s.tool_name is not None for s in turns[:-1])
    if final.outcome is Outcome.BUDGET_EXHAUSTED:
        assert len(turns) == MAX_TURNS and all(s.tool_name for s in turns)
    else:
        assert turns[-1].tool_name is None  # the last turn answered (or failed to) instead of calling the tool
        if final.outcome is Outcome.FORMAT_ERROR:
            assert final.verdict is None and final.detail.startswith(f"turn {len(turns)} ")
        else:
            assert final.verdict == final.outcome.value and final.method != "none"


def test_episode_streams_and_ends_cleanly(tiny_engine, spectrum, render, tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="speco3"):
        steps, pieces, trace = _run(tiny_engine, spectrum, render)
    assert isinstance(steps[0], PromptStep) and steps[0].image.n_tokens <= 120
    final = steps[-1]
    _assert_clean_end(steps, final)
    assert not [r.getMessage() for r in caplog.records], "no engine error was logged"
    turns = [s for s in steps if isinstance(s, AssistantStep)]
    assert turns and "".join(pieces) == "".join(s.text for s in turns)
    assert turns[0].prompt_tokens > 300 and turns[0].image_tokens == steps[0].image.n_tokens
    assert 0 < turns[0].n_tokens <= 96 and final.tokens_generated == sum(s.n_tokens for s in turns)
    trace.save(tmp_path / "t")
    assert Trace.load(tmp_path / "t").outcome is final.outcome


def test_greedy_episode_is_reproducible(tiny_engine, spectrum, render):
    first, _, _ = _run(tiny_engine, spectrum, render)
    second, _, _ = _run(tiny_engine, spectrum, render)
    texts = [[s.text for s in run if isinstance(s, AssistantStep)] for run in (first, second)]
    assert texts[0] == texts[1] and first[-1].outcome is second[-1].outcome


def test_cancel_on_the_real_engine(tiny_engine, spectrum, render):
    cancel = threading.Event()
    seen: list[str] = []

    def on_token(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 3:
            cancel.set()

    steps = list(run_episode(tiny_engine, spectrum, get_task("cv"), render, EpisodeOptions(cancel=cancel, on_token=on_token)))
    assert steps[-1].outcome is Outcome.CANCELLED and steps[1].stop_reason == "cancelled"
    assert 3 <= len(seen) <= 4

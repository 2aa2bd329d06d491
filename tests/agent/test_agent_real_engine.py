"""The agent loop on the real llama.cpp engine with the tiny random Qwen2.5-VL (its words are noise; the path is real)."""

from __future__ import annotations

import threading

import pytest

from speco3.agent import Outcome, Trace, get_task, run_episode
from speco3.agent.steps import AssistantStep, PromptStep, VerdictStep

pytestmark = pytest.mark.llama

try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except Exception:  # ImportError, or OSError when the shared library does not load
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
    steps = list(trace.follow(run_episode(engine, spectrum, get_task("cv"), render, on_token=pieces.append, **kw)))
    return steps, pieces, trace


def test_episode_streams_and_ends_cleanly(tiny_engine, spectrum, render, tmp_path):
    steps, pieces, trace = _run(tiny_engine, spectrum, render)
    assert isinstance(steps[0], PromptStep) and steps[0].image.n_tokens <= 120
    final = steps[-1]
    assert isinstance(final, VerdictStep) and final.outcome in set(Outcome) - {Outcome.CANCELLED}
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

    steps = list(run_episode(tiny_engine, spectrum, get_task("cv"), render, cancel=cancel, on_token=on_token))
    assert steps[-1].outcome is Outcome.CANCELLED and steps[1].stop_reason == "cancelled"
    assert 3 <= len(seen) <= 4

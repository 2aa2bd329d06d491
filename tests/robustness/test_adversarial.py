"""Adversarial model outputs through `ScriptedEngine` and the real agent loop, on a real LAMOST spectrum.

Every generated episode (``SPECO3_ADV_EPISODES``, default 540 = 30 per category) must end within the 8-turn
budget with exactly one recorded outcome, no exception may escape `run_episode`, and the trace must be saved and
load back with the model's text verbatim (lone surrogates, NULs and 100k-character outputs included). Each
category also has an expected behaviour, so a loop that ignores the protocol fails here. A smaller set runs
through the real Qt renderer (`speco3.render`), and the findings of this suite have regression tests below.
"""

from __future__ import annotations

import collections
import json
import os
import random

import pytest

from speco3.agent import MAX_TURNS, Trace, get_task, parse_tool_calls, run_episode
from speco3.agent.protocol import ParsedCall
from speco3.agent.steps import AssistantStep, Outcome, PromptStep, ToolStep, VerdictStep
from speco3.agent.tool import run_tool
from speco3.engine.base import EngineSettings
from speco3.engine.scripted import ScriptedEngine
from speco3_testkit import adversarial

N_EPISODES = int(os.environ.get("SPECO3_ADV_EPISODES", str(30 * len(adversarial.CATEGORIES))))
SEED = int(os.environ.get("SPECO3_ADV_SEED", "0"))


def run_one(outputs, spectrum, render, folder, *, unlimited: bool):
    """Run one episode and save/load its trace; return (steps, loaded trace)."""
    settings = EngineSettings(max_tokens_per_turn=10**6, n_ctx=1 << 20) if unlimited else EngineSettings()
    engine = ScriptedEngine(outputs, settings=settings)
    task = get_task("cv")
    trace = Trace(task_id=task.id, task_text=task.text, prompt_version=task.prompt_version)
    steps = list(trace.follow(run_episode(engine, spectrum, task, render)))
    trace.save(folder)
    return steps, engine, Trace.load(folder)


def check_episode(category, outputs, steps, engine, loaded) -> list[str]:
    """Invariants every episode must satisfy; returns the violations."""
    bad = []
    verdicts = [s for s in steps if isinstance(s, VerdictStep)]
    if len(verdicts) != 1 or steps[-1] is not verdicts[0]:
        bad.append("not exactly one final VerdictStep")
    if not isinstance(steps[0], PromptStep):
        bad.append("first step is not the prompt")
    final = steps[-1]
    assistant = [s for s in steps if isinstance(s, AssistantStep)]
    tools = [s for s in steps if isinstance(s, ToolStep)]
    if not 1 <= len(assistant) <= MAX_TURNS or final.turns != len(assistant):
        bad.append(f"{len(assistant)} assistant turns, final says {final.turns}")
    if len(engine.conversations[-1]) and len([p for p in engine.conversation if isinstance(p, str)]) == 0:
        bad.append("empty conversation")
    # Only the first call of a turn runs: at most one tool step per assistant turn, right after it.
    for a in assistant:
        ran = [t for t in tools if t.turn == a.turn]
        if len(ran) > 1 or (ran and a.tool_name is None):
            bad.append(f"turn {a.turn}: {len(ran)} tool steps for tool_name={a.tool_name!r}")
    if final.zooms != sum(t.ok for t in tools):
        bad.append("zoom count differs from successful tool steps")
    for a, out in zip(assistant, outputs, strict=False):
        if a.stop_reason == "stop" and a.text != out:
            bad.append(f"turn {a.turn}: generated text differs from the script")
    if final.outcome.has_verdict != (final.verdict is not None):
        bad.append("verdict and outcome disagree")
    # The trace loads back with the same steps and the verbatim text.
    if [s.kind for s in loaded.steps] != [s.kind for s in steps]:
        bad.append("loaded trace has other steps")
    elif loaded.outcome is not final.outcome:
        bad.append("loaded outcome differs")
    else:
        for a, b in zip(steps, loaded.steps, strict=True):
            if isinstance(a, AssistantStep) and a.text != b.text:
                bad.append(f"turn {a.turn}: text not verbatim after save/load")
            if isinstance(a, ToolStep) and (a.response_text != b.response_text or a.ok != b.ok):
                bad.append(f"turn {a.turn}: tool step differs after save/load")
    return bad


def _tools(steps):
    return [s for s in steps if isinstance(s, ToolStep)]


def _first_range_ok(steps):
    tools = _tools(steps)
    return bool(tools) and tools[0].ok


# What each category must do (on a real LAMOST LRS spectrum, 3700-9100 Å, z ~ 0).
EXPECT = {
    "malformed_json": lambda st, f: not _first_range_ok(st),
    "unknown_tool": lambda st, f: _tools(st) and _tools(st)[0].error == "bad_arguments" and f.outcome.has_verdict,
    "extra_arguments": lambda st, f: _first_range_ok(st) and f.outcome.has_verdict,
    "missing_arguments": lambda st, f: _tools(st)[0].error == "invalid_range" and f.outcome.has_verdict,
    "reversed_range": lambda st, f: _tools(st)[0].error == "invalid_range" and f.outcome.has_verdict,
    "nan_range": lambda st, f: _tools(st)[0].error == "invalid_range" and f.outcome.has_verdict,
    "huge_range": lambda st, f: f.outcome.has_verdict and len(_tools(st)) == 1,
    "string_range": lambda st, f: _tools(st)[0].error == "invalid_range" and f.outcome.has_verdict,
    "wrong_arity": lambda st, f: _tools(st)[0].error == "invalid_range" and f.outcome.has_verdict,
    "several_calls": lambda st, f: len(_tools(st)) == 1 and _tools(st)[0].ok and f.outcome.has_verdict,
    "endless_calls": lambda st, f: f.outcome is Outcome.BUDGET_EXHAUSTED and f.turns == MAX_TURNS
    and len(_tools(st)) == MAX_TURNS - 1,
    "no_answer": lambda st, f: f.outcome is Outcome.FORMAT_ERROR and f.turns == 1,
    "answer_and_call": lambda st, f: len(_tools(st)) == 1 and f.outcome.has_verdict,
    "very_long": lambda st, f: f.outcome is Outcome.FORMAT_ERROR and f.turns == 1,
    "odd_unicode": lambda st, f: _first_range_ok(st) and f.outcome.has_verdict,
    "bad_boxed": lambda st, f: not f.strict and f.turns == 1,
    "nested_tags": lambda st, f: not _tools(st),
    "valid_then_answer": lambda st, f: _first_range_ok(st) and f.outcome.has_verdict and f.method == "answer_boxed" and f.zooms == 1,
    "deep_nesting": lambda st, f: not _first_range_ok(st) and f.turns <= 2,
}


@pytest.fixture(scope="module")
def episodes(real_spectrum, pillow_render, tmp_path_factory):
    root = tmp_path_factory.mktemp("adv")
    results = []
    for i, (category, outputs) in enumerate(adversarial.generate(N_EPISODES, seed=SEED)):
        try:
            steps, engine, loaded = run_one(outputs, real_spectrum, pillow_render, root / f"{i:04d}", unlimited=i % 2)
        except Exception as exc:  # noqa: BLE001 - reported by the tests below
            results.append((category, outputs, None, None, None, f"{type(exc).__name__}: {exc}"[:300]))
            continue
        results.append((category, outputs, steps, engine, loaded, None))
    return results


def test_expectations_cover_every_category():
    assert set(EXPECT) == set(adversarial.CATEGORIES)
    assert N_EPISODES >= 500 or "SPECO3_ADV_EPISODES" in os.environ


def test_no_exception_escapes_and_every_trace_is_saved(episodes):
    escaped = [(c, err) for c, _, _, _, _, err in episodes if err]
    assert not escaped, escaped[:5]
    assert len(episodes) == N_EPISODES


def test_every_episode_ends_within_budget_with_one_outcome(episodes):
    problems = []
    outcomes = collections.Counter()
    for category, outputs, steps, engine, loaded, _ in episodes:
        outcomes[steps[-1].outcome.value] += 1
        for why in check_episode(category, outputs, steps, engine, loaded):
            problems.append(f"{category}: {why}")
    assert not problems, problems[:10]
    # The loop produced every kind of ending the categories aim at.
    assert {"YES", "NO", "format_error", "budget_exhausted"} <= set(outcomes), outcomes


def test_each_category_behaves_as_the_protocol_says(episodes):
    wrong = collections.Counter()
    for category, _outputs, steps, _, _, _ in episodes:
        if not EXPECT[category](steps, steps[-1]):
            wrong[(category, steps[-1].outcome.value, len(_tools(steps)))] += 1
    assert not wrong, wrong


def test_odd_text_round_trips_exactly(episodes):
    """Lone surrogates, NULs, control characters and 100k-character outputs survive save/load verbatim."""
    seen = collections.Counter()
    for _, _, steps, _, loaded, _ in episodes:
        for a, b in zip(steps, loaded.steps, strict=True):
            if isinstance(a, AssistantStep):
                assert a.text == b.text
                seen["surrogate"] += "\ud800" in a.text
                seen["nul"] += "\x00" in a.text
                seen["100k"] += len(a.text) >= 50_000
    assert seen["surrogate"] and seen["nul"] and seen["100k"], seen


@pytest.mark.gui
def test_real_renderer_episodes(real_spectrum, tmp_path):
    """One episode per category through the real (pyqtgraph, offscreen) renderer."""
    from speco3.render import render_view

    def render(view):
        return render_view(view).png

    rng_outcomes = {}
    for i, category in enumerate(adversarial.CATEGORIES):
        outputs = adversarial.episode(category, random.Random(100 + i))
        steps, engine, loaded = run_one(outputs, real_spectrum, render, tmp_path / category, unlimited=True)
        assert not check_episode(category, outputs, steps, engine, loaded), category
        assert EXPECT[category](steps, steps[-1]), (category, steps[-1].outcome)
        rng_outcomes[category] = steps[-1].outcome.value
        if category == "valid_then_answer":
            assert loaded.images()[1][1].width == steps[2].image.width  # the zoom PNG is in the trace folder
    assert rng_outcomes["endless_calls"] == "budget_exhausted"


# -- regression tests for what this suite found ---------------------------------------------------------------
def test_integer_beyond_float_range_is_an_invalid_range(real_spectrum, pillow_render):
    """``[0, 10**400]`` is valid JSON; ``math.isfinite`` raised OverflowError out of the loop."""
    call = ParsedCall("spectral_visualization_tool", {"wavelength_range": [0, 10**400]}, "")
    res = run_tool(call, real_spectrum, pillow_render)
    assert not res.ok and res.error == "invalid_range" and res.text.startswith("Error: The specified")


def test_deeply_nested_tool_call_is_unparsable_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    text = '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": ' + deep + "}}\n</tool_call>"
    assert parse_tool_calls(text) == []
    call = ParsedCall("spectral_visualization_tool", '{"wavelength_range": ' + deep + "}", "")
    res = run_tool(call, None, None)  # rejected before the spectrum is touched
    assert res.error == "bad_arguments" and "nested" in res.text


def test_trace_with_lone_surrogate_and_deep_arguments_saves(tmp_path, real_spectrum, pillow_render):
    depth = 900  # parsable JSON, deeper than the trace keeps
    call = '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": ' + "[" * depth + "]" * depth + "}}"
    outputs = ["<think>\ud800\x00</think><tool_call>\n" + call + "\n</tool_call>", "<answer>\\boxed{NO}</answer>"]
    steps, _, loaded = run_one(outputs, real_spectrum, pillow_render, tmp_path / "t", unlimited=True)
    assert loaded.steps[1].text == outputs[0]
    assert "nested deeper" in json.dumps(loaded.steps[1].tool_arguments)
    assert (tmp_path / "t" / "prompt.txt").read_text(encoding="utf-8").count("\\ud800") == 1


def test_vetting_store_keeps_lone_surrogates(tmp_path, real_spectrum, pillow_render):
    """A model answer (or a non-UTF-8 file name) with lone surrogates is stored, and found again by key."""
    from speco3.vetting import VettingStore
    from speco3.vetting.schedulers import vet_batch
    from speco3.vetting.screening import VetItem

    engine = ScriptedEngine(["<think>x</think>\ud800<answer>\\boxed{YES}</answer> \udce9t\u00e9"])
    key = "/archive/caf\udce9.fits#0"  # os.fsdecode(b"/archive/caf\xe9.fits") + "#0"
    items = [VetItem(key=key, load=lambda: real_spectrum, name="caf\udce9.fits")]
    with VettingStore(tmp_path / "s.sqlite") as store:
        res = vet_batch(items, store, engine, get_task("cv"), pillow_render, trace_root=tmp_path / "tr")
        assert res.done == 1 and res.outcomes == {"YES": 1}
        v = store.latest_model_verdict(key, "cv")
        assert v is not None and v.verdict == "YES" and "\\udce9" in v.answer
        again = vet_batch(items, store, engine, get_task("cv"), pillow_render, trace_root=tmp_path / "tr")
        assert again.skipped == 1 and again.done == 0  # resume finds the key
        assert len(store.model_verdicts("cv", latest=False)) == 1
    assert 0 < res.seconds < 60  # timed, and no hang (a scripted engine: well under a second unloaded)

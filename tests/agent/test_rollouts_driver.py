"""`run_group` through the driver: adversarial rollouts beside good ones (scripted engine, alone and on several
slots at once), and on the real tiny engine the parallel path gives each rollout what the sequential path gives."""

from __future__ import annotations

import json
import threading

import pytest

from speco3.agent import Outcome, get_task
from speco3.agent.driver import drive
from speco3.agent.loop import EpisodeOptions, episode_steps
from speco3.agent.rollouts import RolloutPlan, run_group
from speco3.agent.steps import AssistantStep, ToolStep, VerdictStep
from speco3.engine.base import EngineSettings
from speco3.engine.parallel import SerialSlots
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import EngineError

CALL = ("<think>Look closer.</think>\n<tool_call>\n" + json.dumps(
    {"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [6400, 6700]}}) + "\n</tool_call>")
YES = "<think>Hα in emission.</think>\n<answer>\\boxed{YES}</answer>"
MALFORMED_CALL = '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [64\n'
NO_ANSWER = "<think>I am not sure what this is" + " and" * 20


def adversarial_outputs(engine: ScriptedEngine):
    """Rollout seed 0: zoom then YES; 1: a malformed tool call; 2: no answer at all; 3: the engine fails."""

    def output(conversation) -> str:
        seed = engine.sampling.seed
        turn = sum(1 for p in conversation if isinstance(p, str) and p.startswith(("<think>", "<tool_call>")))
        if seed == 3:
            raise EngineError("scripted failure in rollout 3")
        return {0: [CALL, YES], 1: [MALFORMED_CALL], 2: [NO_ANSWER]}[seed][min(turn, 1 if seed == 0 else 0)]

    return output


def check_adversarial(results) -> None:
    outcomes = [steps[-1].outcome for steps in results]
    assert outcomes == [Outcome.YES, Outcome.FORMAT_ERROR, Outcome.FORMAT_ERROR, Outcome.ENGINE_ERROR]
    good = results[0]
    assert [type(s).__name__ for s in good] == ["PromptStep", "AssistantStep", "ToolStep", "AssistantStep",
                                                "VerdictStep"]
    assert good[2].ok and good[-1].zooms == 1
    assert "rollout 3" in results[3][-1].detail
    assert all(isinstance(steps[-1], VerdictStep) for steps in results)


def test_adversarial_rollouts_do_not_break_the_others(spectrum, render):
    engine = ScriptedEngine()
    engine.outputs = adversarial_outputs(engine)
    seen: list[int] = []
    results = run_group(engine, spectrum, get_task("cv"), render, RolloutPlan(k=4, seed=0),
                        on_step=lambda i, step: seen.append(i)).steps
    check_adversarial(results)
    assert seen == sorted(seen), "one slot: the rollouts run one after the other"
    assert [s.seed for s in engine.samplings] == [0, 1, 2, 3] and {s.temperature for s in engine.samplings} == {1.0}


class ScriptedSlots:
    """Several scripted engines as slots, all generating in the same `step` (to drive episodes at once)."""

    def __init__(self, n: int, make):
        self.engines = [make() for _ in range(n)]
        self.serial = [SerialSlots(e) for e in self.engines]
        self.capacity, self.live, self.steps = n, set(), 0

    def open(self, sampling):
        slot = min(set(range(self.capacity)) - self.live)
        self.live.add(slot)
        return self.serial[slot].open(sampling) + slot

    def extend(self, slot, parts, messages=None):
        self.serial[slot].extend(0, parts)

    def begin(self, slot, **kw):
        self.serial[slot].begin(0, **kw)

    def step(self):
        self.steps += 1
        return [(slot, res) for slot in sorted(self.live) for _, res in self.serial[slot].step()]

    def release(self, slot):
        self.live.discard(slot)


def test_driver_runs_adversarial_episodes_side_by_side(spectrum, render):
    def make():
        engine = ScriptedEngine()
        engine.outputs = adversarial_outputs(engine)
        return engine

    slots = ScriptedSlots(4, make)
    plan = RolloutPlan(k=4)
    episodes = [episode_steps(slots.engines[0], spectrum, get_task("cv"), render, sampling=s) for s in plan.samplings()]
    order: list[int] = []
    results: list[list] = [[] for _ in range(4)]
    for i, step in drive(episodes, slots, width=4):
        order.append(i)
        results[i].append(step)
    check_adversarial(results)
    assert order != sorted(order), "the episodes interleave"
    assert slots.steps == 2  # every first turn in one step, the good rollout's second turn in the next
    assert not slots.live


def test_driver_refills_slots_as_episodes_end(spectrum, render):
    slots = ScriptedSlots(2, lambda: ScriptedEngine([YES]))
    episodes = [episode_steps(slots.engines[0], spectrum, "t", render) for _ in range(5)]
    finals = [step for _, step in drive(episodes, slots, width=2) if isinstance(step, VerdictStep)]
    assert [f.outcome for f in finals] == [Outcome.YES] * 5 and slots.steps == 3 and not slots.live


def test_abandoned_drive_releases_its_slots(spectrum, render):
    slots = ScriptedSlots(2, lambda: ScriptedEngine([CALL, YES]))
    episodes = [episode_steps(slots.engines[0], spectrum, "t", render) for _ in range(2)]
    gen = drive(episodes, slots, width=2)
    for _, step in gen:
        if isinstance(step, AssistantStep):
            break
    assert slots.live
    gen.close()
    assert not slots.live


# -- the real tiny engine ----------------------------------------------------------------------------------------
try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1)
    HAVE_LLAMA = False


def _tiny(tiny_gguf, n_seq: int):
    if not HAVE_LLAMA:
        pytest.skip("llama-cpp-python (with mtmd) is not installed")
    from speco3.engine import open_engine

    text, mmproj = tiny_gguf("F32")
    settings = EngineSettings(n_ctx=8192, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False, image_max_tokens=120,
                              max_tokens_per_turn=40, flash_attn=False, kv_type="f32", n_seq=n_seq, top_logprobs=3)
    return open_engine((text, mmproj), settings, threaded=n_seq > 1, warmup=False)


@pytest.mark.llama
def test_parallel_rollouts_equal_sequential_rollouts_on_the_real_engine(tiny_gguf, spectrum, render):
    plan = RolloutPlan(k=4, seed=7)
    options = EpisodeOptions(max_turns=3)
    parallel = _tiny(tiny_gguf, 4)  # on an EngineWorker thread, as the app runs it
    try:
        order: list[int] = []
        par = run_group(parallel, spectrum, get_task("cv"), render, plan, options,
                        on_step=lambda i, s: order.append(i)).steps
        stats = parallel.stats()
    finally:
        parallel.close()
    sequential = _tiny(tiny_gguf, 1)
    try:
        seq = run_group(sequential, spectrum, get_task("cv"), render, plan, options).steps
    finally:
        sequential.close()
    assert stats.extra["parallel"]["prefix_copies"] >= 3 and order != sorted(order)
    for a, b in zip(par, seq, strict=True):
        assert [type(s) for s in a] == [type(s) for s in b]
        assert [s.text for s in a if isinstance(s, AssistantStep)] == [s.text for s in b if isinstance(s, AssistantStep)]
        assert [s.wavelength_range for s in a if isinstance(s, ToolStep)] == [
            s.wavelength_range for s in b if isinstance(s, ToolStep)]
        assert a[-1].outcome == b[-1].outcome and a[-1].outcome not in (Outcome.ENGINE_ERROR, Outcome.CONTEXT_FULL)
    assert len({tuple(s.text for s in r if isinstance(s, AssistantStep)) for r in par}) > 1


@pytest.mark.llama
def test_cancel_stops_every_parallel_rollout(tiny_gguf, spectrum, render):
    engine = _tiny(tiny_gguf, 4)
    cancel = threading.Event()
    try:
        def stop_after_first_turn(i, step):
            if isinstance(step, AssistantStep):
                cancel.set()

        results = run_group(engine, spectrum, get_task("cv"), render, RolloutPlan(k=3),
                            EpisodeOptions(cancel=cancel, max_turns=3), on_step=stop_after_first_turn).steps
        outcomes = [r[-1].outcome for r in results]
        # the rollout whose turn ended first may have ended the episode with it; the others stop cancelled
        assert outcomes.count(Outcome.CANCELLED) >= 2, outcomes
        assert not {Outcome.ENGINE_ERROR, Outcome.CONTEXT_FULL} & set(outcomes)
        assert engine.call(lambda: engine.engine.kv_cells) == engine.call(
            lambda: sum(1 if isinstance(it, int) else it.n_tokens for it in engine.engine.cached()))
    finally:
        engine.close()

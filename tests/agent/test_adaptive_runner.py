"""Adaptive rollouts through `run_group`: rounds of the stopping rule on the scripted engine (stops, seeds, the record
of k_used / k_max / stop_reason), and on the real tiny engine: extended rounds share the evaluated prefix, and an
early stop frees its sequences."""

from __future__ import annotations

import pytest

from speco3.agent import get_task
from speco3.agent.adaptive import (
    STOP_AGREED,
    STOP_BUDGET,
    STOP_CANCELLED,
    STOP_CERTAIN,
    STOP_FIXED,
    AdaptiveRule,
)
from speco3.agent.loop import EpisodeOptions
from speco3.agent.rollouts import RolloutPlan, run_group
from speco3.agent.steps import AssistantStep, ToolStep
from speco3.engine.base import EngineSettings
from speco3.engine.scripted import ScriptedEngine

YES = "<think>broad Balmer emission</think><answer>\\boxed{YES}</answer>"
NO = "<think>nothing there</think><answer>\\boxed{NO}</answer>"
SURE = {"YES": [["YES", 0.97], ["NO", 0.03]], "NO": [["NO", 0.97], ["YES", 0.03]]}


def scripted(scripts, alternatives=SURE):
    return ScriptedEngine(scripts=scripts, select="seed", alternatives=alternatives,
                          settings=EngineSettings(top_logprobs=4))


def test_a_clear_spectrum_stops_after_the_first_round(spectrum, render):
    engine = scripted([[YES]])
    seen: list[int] = []
    group = run_group(engine, spectrum, get_task("cv"), render, RolloutPlan.auto(seed=5),
                      on_step=lambda i, s: seen.append(i))
    assert (group.k_used, group.k_max, group.stop_reason) == (2, 8, STOP_AGREED)
    assert [s.seed for s in engine.samplings] == [5, 6] and sorted(set(seen)) == [0, 1]
    assert all(s.temperature == 1.0 for s in engine.samplings)  # the training temperature, as for K > 1


def test_a_split_spectrum_adds_rounds_until_certain(spectrum, render):
    engine = scripted([[YES], [NO]])  # seeds alternate YES, NO
    group = run_group(engine, spectrum, get_task("cv"), render, RolloutPlan.auto())
    # 1:1, 2:2 (a change still possible), 3:3 of 6: no two rollouts can make it 6:2 — certain to abstain
    assert (group.k_used, group.stop_reason) == (6, STOP_CERTAIN)
    assert [s.seed for s in engine.samplings] == list(range(6))
    assert [g[-1].outcome.value for g in group.steps] == ["YES", "NO"] * 3


def test_hesitant_tokens_run_the_whole_budget(spectrum, render):
    engine = scripted([[YES], [YES], [YES], [NO]], alternatives={"YES": [["YES", 0.6], ["NO", 0.4]],
                                                                  "NO": [["NO", 0.6], ["YES", 0.4]]})
    group = run_group(engine, spectrum, get_task("cv"), render, RolloutPlan.auto(AdaptiveRule(k_max=6, step=1)))
    # 2:0 not sure, 3:0 and 3:1 unsettled, 4:1 of 5 could still end 4:2 (abstained): the budget of 6 runs
    assert (group.stop_reason, group.k_used) == (STOP_BUDGET, 6)
    assert len(run_group(scripted([[YES]]), spectrum, "t", render, RolloutPlan.auto()).steps) == 2


def test_a_lone_first_round_then_pairs(spectrum, render):
    """k_min 1: a sure lone rollout stops at one (one round); a hesitant one gets a second, then pairs follow."""
    sure = {"YES": [["YES", 0.995], ["NO", 0.005]], "NO": [["NO", 0.995], ["YES", 0.005]]}
    group = run_group(scripted([[YES]], sure), spectrum, "t", render, RolloutPlan.auto(AdaptiveRule(k_min=1)))
    assert (group.k_used, group.rounds, group.stop_reason) == (1, 1, STOP_AGREED)
    engine = scripted([[YES]])  # 0.97: enough for two (0.9), not for one (0.99)
    group = run_group(engine, spectrum, "t", render, RolloutPlan.auto(AdaptiveRule(k_min=1)))
    assert (group.k_used, group.rounds, group.stop_reason) == (2, 2, STOP_AGREED)
    group = run_group(scripted([[YES], [NO]]), spectrum, "t", render, RolloutPlan.auto(AdaptiveRule(k_min=1)))
    assert (group.k_used, group.rounds, group.stop_reason) == (6, 4, STOP_CERTAIN)  # 1, 2, 4, 6
    # the failure mode of the lone stop: a split spectrum whose first rollout is sure of itself stops there
    group = run_group(scripted([[YES], [NO]], sure), spectrum, "t", render, RolloutPlan.auto(AdaptiveRule(k_min=1)))
    assert (group.k_used, group.stop_reason) == (1, STOP_AGREED)
    assert run_group(scripted([[YES], [NO]]), spectrum, "t", render, RolloutPlan.auto()).rounds == 3  # 2, 4, 6
    assert run_group(scripted([[YES]]), spectrum, "t", render, RolloutPlan(k=3)).rounds == 1


def test_fixed_plans_say_fixed(spectrum, render):
    group = run_group(scripted([[YES]]), spectrum, "t", render, RolloutPlan(k=3))
    assert (group.k_used, group.k_max, group.stop_reason) == (3, 3, STOP_FIXED)


def test_cancel_stops_the_rounds(spectrum, render):
    import threading

    cancel = threading.Event()
    cancel.set()
    group = run_group(scripted([[YES]]), spectrum, "t", render, RolloutPlan.auto(), EpisodeOptions(cancel=cancel))
    assert group.stop_reason == STOP_CANCELLED and group.k_used == 2


def test_plan_checks():
    with pytest.raises(ValueError, match="budget"):
        RolloutPlan(k=4, adaptive=AdaptiveRule())
    with pytest.raises(ValueError, match="temperature"):
        RolloutPlan.auto(AdaptiveRule(k_min=1, k_max=1), temperature=0.0).samplings()
    assert RolloutPlan.auto(AdaptiveRule(k_max=5)).k == 5


# -- the real tiny engine ----------------------------------------------------------------------------------------
def _tiny(tiny_gguf, n_seq: int):
    pytest.importorskip("llama_cpp.mtmd_cpp", reason="llama-cpp-python (with mtmd) is not installed")
    from speco3.engine import open_engine

    text, mmproj = tiny_gguf("F32")
    settings = EngineSettings(n_ctx=8192, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False, image_max_tokens=120,
                              max_tokens_per_turn=40, flash_attn=False, kv_type="f32", n_seq=n_seq, top_logprobs=3)
    return open_engine((text, mmproj), settings, threaded=n_seq > 1, warmup=False)


def _texts(steps):
    return [[s.text for s in r if isinstance(s, AssistantStep)] for r in steps]


@pytest.mark.llama
def test_extended_rounds_share_the_prefix_on_the_real_engine(tiny_gguf, spectrum, render):
    # max_change 0: only a certain decision or two sure agreeing answers stop early, which random weights do not give
    plan = RolloutPlan.auto(AdaptiveRule(k_min=2, k_max=4, step=2, max_change=0.0), seed=3)
    engine = _tiny(tiny_gguf, 4)
    try:
        group = run_group(engine, spectrum, get_task("cv"), render, plan, EpisodeOptions(max_turns=3))
        adaptive = engine.stats()
    finally:
        engine.close()
    fixed_engine = _tiny(tiny_gguf, 4)
    try:
        fixed = run_group(fixed_engine, spectrum, get_task("cv"), render, RolloutPlan(k=4, seed=3), EpisodeOptions(max_turns=3)).steps
        reference = fixed_engine.stats()
    finally:
        fixed_engine.close()
    assert group.k_used == 4 and group.stop_reason == STOP_BUDGET, [g[-1].outcome for g in group.steps]
    assert _texts(group.steps) == _texts(fixed)  # rollout i of auto is rollout i of the fixed group
    tool_images = sum(1 for r in group.steps for s in r if isinstance(s, ToolStep) and s.image is not None)
    # the full view went into the KV cache once for the two rounds; every other image is a rollout's own zoom
    assert adaptive.images_encoded == 1 + tool_images == reference.images_encoded
    assert adaptive.extra["parallel"]["prefix_copies"] >= 2
    # the system prompt and task text were evaluated once too (a round may re-evaluate a prompt's last token for its
    # logits): the same text as the fixed group, which evaluates the prefix once
    assert abs(adaptive.text_tokens_evaluated - reference.text_tokens_evaluated) <= 2, (
        adaptive.text_tokens_evaluated, reference.text_tokens_evaluated)


@pytest.mark.llama
def test_an_early_stop_frees_its_sequences_on_the_real_engine(tiny_gguf, spectrum, render):
    plan = RolloutPlan.auto(AdaptiveRule(k_min=2, k_max=8, max_change=1.0), seed=0)  # stops after the first round
    engine = _tiny(tiny_gguf, 4)
    try:
        group = run_group(engine, spectrum, get_task("cv"), render, plan, EpisodeOptions(max_turns=3))
        ctx = engine.engine._context
        # the group's pool is closed: the sequences are back, only the engine's own sequence 0 is left
        assert engine.call(lambda: (ctx.sequences_claimed, list(ctx.sequences))) == (False, [0])
        # no cell is held but sequence 0's (its cache, as after a single run)
        assert engine.call(lambda: ctx.cells.used) == engine.call(
            lambda: sum(1 if isinstance(it, int) else it.n_tokens for it in ctx.sequences[0].kv))
        assert engine.stats().extra["parallel"]["prefix_copies"] >= 1
    finally:
        engine.close()
    assert group.k_used == 2 < group.k_max == 8, [g[-1].outcome for g in group.steps]

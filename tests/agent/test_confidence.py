"""Confidence of K rollouts: the arithmetic by hand, the verdict-token probability, and scripted rollouts end to end
(including adversarial rollouts that must not spoil the others)."""

from __future__ import annotations

import logging
import math

import pytest

from speco3.agent.confidence import Thresholds, aggregate, answer_token_p_yes
from speco3.agent.rollouts import RolloutPlan, run_group
from speco3.agent.steps import Outcome, VerdictStep
from speco3.engine.base import EngineSettings, TokenLogprob
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import EngineError

YES = "<think>broad Balmer emission</think><answer>\\boxed{YES}</answer>"
NO = "<think>nothing there</think><answer>\\boxed{NO}</answer>"
ZOOM = '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [6500, 6600]}}\n</tool_call>'
BROKEN_CALL = '<tool_call>{"name": "spectral_visualization_tool", "arguments": </tool_call>'


def finals(*outcomes: str, p_token=None) -> list[VerdictStep]:
    p_token = p_token or [None] * len(outcomes)
    return [VerdictStep(turn=1, outcome=Outcome(o), verdict=Outcome(o).verdict, p_yes_token=p)
            for o, p in zip(outcomes, p_token, strict=True)]


# -- the arithmetic, by hand -------------------------------------------------------------------------------------
def test_unanimous_yes():
    c = aggregate(finals("YES", "YES", "YES", "YES"))
    assert (c.k, c.yes, c.no, c.p_yes, c.agreement, c.verdict, c.abstained) == (4, 4, 0, 1.0, 1.0, "YES", False)
    assert c.uncertainty == 0.0 and c.p_yes_token is None


def test_three_to_one_keeps_the_verdict_at_the_default_threshold():
    c = aggregate(finals("NO", "YES", "NO", "NO"))
    assert c.p_yes == 0.25 and c.agreement == 0.75 and c.verdict == "NO" and not c.abstained
    assert c.uncertainty == pytest.approx(0.5)


def test_two_to_one_abstains_by_default_but_not_with_a_lower_threshold():
    c = aggregate(finals("YES", "NO", "YES"))
    assert c.p_yes == pytest.approx(2 / 3) and c.agreement == pytest.approx(2 / 3) and c.verdict == "YES"
    assert c.abstained
    assert not aggregate(finals("YES", "NO", "YES"), Thresholds(min_agreement=0.6)).abstained


def test_tie_has_no_verdict_and_abstains():
    c = aggregate(finals("YES", "NO"))
    assert c.p_yes == 0.5 and c.verdict is None and c.abstained and c.uncertainty == 1.0


def test_failures_leave_the_share_but_count():
    c = aggregate(finals("YES", "format_error", "YES", "budget_exhausted"))
    assert c.p_yes == 1.0 and c.agreement == 1.0 and c.answered == 2 and c.format_failures == 1
    assert c.outcomes == ("YES", "format_error", "YES", "budget_exhausted")
    assert not c.abstained  # 2 of 4 answered: exactly the default min_answered
    c = aggregate(finals("YES", "format_error", "format_error", "engine_error"))
    assert c.p_yes == 1.0 and c.abstained and c.format_failures == 2  # 1 of 4 answered


def test_no_answer_at_all():
    c = aggregate(finals("format_error", "format_error"))
    assert c.p_yes is None and c.agreement is None and c.verdict is None and c.abstained and c.uncertainty is None


def test_greedy_k1_is_the_single_verdict():
    c = aggregate(finals("NO"))
    assert (c.k, c.p_yes, c.agreement, c.verdict, c.abstained) == (1, 0.0, 1.0, "NO", False)
    assert aggregate(finals("format_error")).abstained


def test_mean_token_probability_over_the_answered_only():
    c = aggregate(finals("YES", "NO", "format_error", "YES", p_token=[0.9, 0.2, 0.7, None]))
    assert c.p_yes_token == pytest.approx((0.9 + 0.2) / 2)  # the format error's number and the missing one left out


def test_thresholds_are_checked():
    with pytest.raises(ValueError, match="min_agreement"):
        Thresholds(min_agreement=1.5)
    with pytest.raises(ValueError):
        aggregate([])


# -- the verdict token --------------------------------------------------------------------------------------------
def lp(token, p, *top):
    return TokenLogprob(token, math.log(p), tuple((t, math.log(q)) for t, q in top))


def test_token_probability_renormalised_over_yes_and_no():
    toks = [lp("<answer>", 1), lp("\\", 1), lp("boxed", 1), lp("{", 1),
            lp("YES", 0.6, ("YES", 0.6), ("NO", 0.2), ("Yes", 0.1), ("MAYBE", 0.05)), lp("}", 1), lp("</answer>", 1)]
    assert answer_token_p_yes(toks, "YES") == pytest.approx(0.7 / 0.9)
    assert answer_token_p_yes(toks, "NO") is None  # disagrees with the parsed verdict


def test_token_probability_of_a_split_word_and_merged_brace():
    toks = [lp("\\boxed", 1), lp("{N", 0.3, ("{N", 0.3), ("{Y", 0.6)), lp("O", 1), lp("}", 1)]
    assert answer_token_p_yes(toks) == pytest.approx(0.6 / 0.9)


def test_token_probability_absent():
    assert answer_token_p_yes([]) is None
    assert answer_token_p_yes([lp("YES", 0.9)]) is None  # a bare word: no box, no <answer>
    toks = [lp("\\boxed{", 1), lp("maybe", 0.5), lp("}", 1)]
    assert answer_token_p_yes(toks) is None
    assert answer_token_p_yes([lp("\\boxed{", 1), lp("YES", 0.7), lp("}", 1)]) is None  # no alternatives recorded


# -- scripted rollouts ----------------------------------------------------------------------------------------------
def scripted(scripts, **kw):
    settings = EngineSettings(top_logprobs=5)
    return ScriptedEngine(scripts=scripts, select="seed", settings=settings, **kw)


def test_rollouts_with_adversarial_outputs_keep_the_others(spectrum, render):
    engine = scripted([[ZOOM, YES], ["no tags at all"], [BROKEN_CALL], [YES], [ZOOM, ZOOM, NO]],
                      alternatives={"YES": [["YES", 0.8], ["NO", 0.2]], "NO": [["NO", 0.6], ["YES", 0.4]]})
    runs = run_group(engine, spectrum, "is it?", render, RolloutPlan(k=5, temperature=0.7, seed=0)).steps
    outcomes = [r[-1].outcome.value for r in runs]
    assert outcomes == ["YES", "format_error", "format_error", "YES", "NO"]
    assert [s.seed for s in engine.samplings] == [0, 1, 2, 3, 4]
    c = aggregate([r[-1] for r in runs])
    assert c.p_yes == pytest.approx(2 / 3) and c.format_failures == 2 and c.abstained
    assert c.p_yes_token == pytest.approx((0.8 + 0.8 + 0.4) / 3)
    assert [r[-1].zooms for r in runs] == [1, 0, 0, 0, 2]


def test_an_engine_failure_in_one_rollout_leaves_the_others(spectrum, render, caplog):
    engine = scripted([[YES], [ZOOM, EngineError("device lost")], [NO], ["<tool_call>[[[[</tool_call>"], [YES]])
    with caplog.at_level(logging.INFO, logger="speco3.agent"):
        runs = run_group(engine, spectrum, "is it?", render, RolloutPlan(k=5, temperature=1.0)).steps
    # the log tells the rollouts apart by their seed (which also reproduces one)
    failed = [r.getMessage() for r in caplog.records if "device lost" in r.getMessage() and "ended" in r.getMessage()]
    assert failed and "[seed 1, temperature 1]" in failed[0]
    assert sum("[seed 4, temperature 1]: YES after" in r.getMessage() for r in caplog.records) == 1
    assert [r[-1].outcome.value for r in runs] == ["YES", "engine_error", "NO", "format_error", "YES"]
    c = aggregate([r[-1] for r in runs])
    assert (c.yes, c.no, c.format_failures, c.verdict, c.abstained) == (2, 1, 1, "YES", True)


def test_no_logprobs_recorded_without_the_setting(spectrum, render):
    engine = ScriptedEngine(scripts=[[YES]], select="seed", alternatives={"YES": [["YES", 0.8], ["NO", 0.2]]})
    runs = run_group(engine, spectrum, "is it?", render, RolloutPlan(k=2, temperature=1.0)).steps
    assert all(r[-1].p_yes_token is None for r in runs)
    assert aggregate([r[-1] for r in runs]).p_yes_token is None


def test_abstain_reason_names_what_happened():
    from speco3.agent.confidence import Confidence, abstain_reason

    assert abstain_reason(3, 0, 0) == "no rollout of 3 answered"
    assert abstain_reason(3, 0, 0, ["format_error", "budget_exhausted", "format_error"]) == (
        "no rollout of 3 answered (2 format_error, 1 budget_exhausted)")
    assert abstain_reason(1, 0, 0) == "the run gave no answer"
    assert abstain_reason(4, 2, 2) == "a tie, 2 YES / 2 NO"
    assert abstain_reason(3, 2, 1) == "split evidence, 2 YES / 1 NO"
    assert abstain_reason(4, 1, 0) == "too few answers: 1 of 4 rollouts answered (1 YES / 0 NO)"
    assert abstain_reason(4, 0, 1) == "too few answers: 1 of 4 rollouts answered (0 YES / 1 NO)"
    assert abstain_reason(5, 2, 1) == "split evidence, 2 YES / 1 NO, 2 of 5 without an answer"
    none = Confidence(3, ("format_error",) * 3, 0, 0, None, None, None, None, 3, True)
    assert none.abstain_reason == "no rollout of 3 answered (3 format_error)"
    sure = Confidence(2, ("YES", "YES"), 2, 0, 1.0, None, 1.0, "YES", 0, False)
    assert sure.abstain_reason == ""


def test_one_outcome_vocabulary_names_what_a_run_came_to():
    """A run's outcome: its verdict, one run's own ending (K=1: not an abstention), or for a group ``tie``,
    ``no_answer``, ``abstained`` with the reason; failures that a resumed batch retries keep their names."""
    from speco3.agent.confidence import aggregate_outcomes

    def head(*outcomes):
        conf = aggregate_outcomes(outcomes)
        return conf.outcome, conf.headline

    assert head("YES") == ("YES", "YES")
    assert head("format_error") == ("format_error", "format_error")  # K=1: a run that gave no answer
    assert head("YES", "YES", "YES") == ("YES", "YES")
    assert head("format_error", "YES") == ("YES", "YES")  # half answered, all agree: trusted
    assert head("YES", "NO") == ("tie", "tie: 1 YES / 1 NO")  # once headed "format_error" or by rollout 1
    assert head("format_error", "YES", "NO", "format_error") == ("tie", "tie: 1 YES / 1 NO, 2 of 4 without an answer")
    assert head("format_error", "budget_exhausted") == (
        "no_answer", "no_answer: no rollout of 2 answered (1 format_error, 1 budget_exhausted)")
    assert head("YES", "YES", "NO") == ("abstained", "abstained: split evidence, 2 YES / 1 NO")
    assert head("YES", "format_error", "format_error") == (
        "abstained", "abstained: too few answers: 1 of 3 rollouts answered (1 YES / 0 NO)")
    assert head("engine_error", "engine_error") == ("engine_error", "engine_error: no rollout of 2 answered "
                                                    "(2 engine_error)")
    assert head("YES", "NO", "cancelled")[0] == "cancelled"  # unfinished: not a tie
    assert head("YES", "YES", "YES", "cancelled")[0] == "YES"  # a trusted verdict stands

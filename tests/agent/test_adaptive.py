"""The adaptive stopping rule (`speco3.agent.adaptive`): its arithmetic by hand, its edge cases (ties, format
failures, no answers, the budget) and its stops. Pure arithmetic, no engine (the runner: test_adaptive_runner.py)."""

from __future__ import annotations

import math

import pytest

from speco3.agent.adaptive import (
    ABSTAIN,
    DEFAULT_MIN_TOKEN_ALONE,
    STOP_AGREED,
    STOP_BUDGET,
    STOP_CERTAIN,
    STOP_FIXED,
    STOP_REASONS,
    STOP_SETTLED,
    STOP_WORDS,
    AdaptiveRule,
    _log_dm,
    agreed,
    change_probability,
    decision,
    describe_use,
    next_round,
    token_support,
)
from speco3.agent.confidence import Thresholds, aggregate_outcomes

F = "format_error"


# -- the decision of a group, by the confidence module's rule ----------------------------------------------------------
def test_decision_follows_the_abstention_rule():
    assert decision(6, 2, 0) == "YES"  # 0.75: kept
    assert decision(2, 6, 0) == "NO"
    assert decision(5, 3, 0) == ABSTAIN  # 0.625 < 0.75
    assert decision(4, 4, 0) == ABSTAIN  # a tie
    assert decision(4, 0, 4) == "YES"  # 4 of 8 answered: exactly min_answered
    assert decision(3, 0, 5) == ABSTAIN  # too few answers
    assert decision(0, 0, 8) == ABSTAIN  # no answer
    assert decision(2, 1, 0, Thresholds(min_agreement=0.6)) == "YES"
    assert decision(2, 1, 0) == ABSTAIN


# -- the predictive chance of a change ---------------------------------------------------------------------------------
def test_predictive_distribution_sums_to_one():
    alpha = (2.5, 0.5, 1.5)
    for r in (1, 3, 6):
        total = sum(math.exp(_log_dm((a, b, r - a - b), alpha)) for a in range(r + 1) for b in range(r - a + 1))
        assert total == pytest.approx(1.0)
    # one draw: each category in proportion to its weight
    assert math.exp(_log_dm((0, 1, 0), alpha)) == pytest.approx(0.5 / 4.5)


def test_change_probability_by_hand_one_more():
    # 1 YES, one more rollout of a budget of 2: only a NO (a tie) changes the decision; P(NO) = 0.5 / (1 + 1.5)
    p, can = change_probability(1, 0, 0, 1, prior=0.5)
    assert can and p == pytest.approx(0.2)


def test_change_probability_by_hand_two_more():
    # 2 YES of a budget of 4, prior 1 (Dirichlet (3, 1, 1)): 2 NO (a tie) or 1 NO + 1 failure (2:1, 0.67) change it;
    # 1 NO + 1 YES (3:1), failures alone (2 of 4 answered) do not. P(NN) = 1·2/(5·6), P(NF) = 2·1·1/(5·6).
    p, can = change_probability(2, 0, 0, 2, prior=1.0)
    assert can and p == pytest.approx(4 / 30)


def test_change_probability_needs_the_full_budget_rule():
    # the same counts with a lower agreement threshold: 2 YES / 1 NO is kept, only the tie changes it
    p, _ = change_probability(2, 0, 0, 2, prior=1.0, thresholds=Thresholds(min_agreement=0.6))
    assert p == pytest.approx(2 / 30)


def test_certain_when_nothing_left_can_change_it():
    assert change_probability(6, 0, 0, 2) == (0.0, False)  # 6:2 at worst keeps YES
    assert change_probability(0, 6, 0, 2) == (0.0, False)
    assert change_probability(3, 3, 0, 2) == (0.0, False)  # 5:3 at best: still abstained
    assert change_probability(0, 0, 5, 3) == (0.0, False)  # at most 3 of 8 can answer
    assert change_probability(2, 0, 0, 0) == (0.0, False)  # nothing left
    p, can = change_probability(0, 0, 4, 4)  # 4 more answers could make 4 of 8, unanimous
    assert can and 0 < p < 1
    p, can = change_probability(5, 0, 0, 3)  # 5:3 would abstain
    assert can and 0 < p < 0.05


def test_change_probability_refuses_nonsense():
    with pytest.raises(ValueError):
        change_probability(-1, 0, 0, 2)
    with pytest.raises(ValueError):
        change_probability(1, 0, 0, -1)
    with pytest.raises(ValueError):
        change_probability(0, 0, 0, 4)


# -- the verdict-token signal -----------------------------------------------------------------------------------------
def test_token_support_turns_towards_the_verdict():
    assert token_support(aggregate_outcomes(["NO", "NO"], [0.1, 0.3])) == pytest.approx(0.8)
    assert token_support(aggregate_outcomes(["YES", "YES"], [0.9, 0.7])) == pytest.approx(0.8)
    assert token_support(aggregate_outcomes(["YES", "NO"], [0.9, 0.1])) is None  # a tie: no verdict
    assert token_support(aggregate_outcomes(["YES", "YES"], None)) is None


def test_agreed_needs_every_rollout_sure_of_one_verdict():
    assert agreed(["YES", "YES"], [0.95, 0.9], 0.9)
    assert agreed(["NO", "NO"], [0.05, 0.1], 0.9)
    assert not agreed(["YES", "YES"], [0.95, 0.89], 0.9)
    assert not agreed(["NO", "NO"], [0.05, 0.5], 0.9)
    assert not agreed(["YES", "YES"], [0.99, None], 0.9)  # no token probability: never counts as sure
    assert not agreed(["YES", "NO"], [0.99, 0.01], 0.9)
    assert not agreed(["YES", F], [0.99, None], 0.9)
    assert not agreed([F, F], [None, None], 0.9)
    assert not agreed([], [], 0.9)


# -- the stops ----------------------------------------------------------------------------------------------------------
def test_below_k_min_asks_for_the_first_round():
    r = next_round([])
    assert (r.k, r.stop, r.add) == (0, False, 2)
    assert next_round(["YES"], [0.99], AdaptiveRule(k_min=3)).add == 2


def test_two_sure_agreeing_rollouts_stop():
    r = next_round(["YES", "YES"], [0.97, 0.99])
    assert (r.stop_reason, r.k, r.add) == (STOP_AGREED, 2, 0) and r.stop
    assert 0 < r.p_change < 1


def test_two_agreeing_rollouts_without_token_probabilities_go_on():
    r = next_round(["YES", "YES"])
    assert (r.stop_reason, r.add) == ("", 2) and not r.stop
    assert r.p_change == pytest.approx(change_probability(2, 0, 0, 6)[0])
    assert next_round(["YES", "YES"], [0.97, 0.6]).add == 2  # one hesitant token


def test_four_agreeing_rollouts_settle_on_the_vote_alone():
    r = next_round(["NO"] * 4)
    assert r.stop_reason == STOP_SETTLED and r.p_change <= 0.05
    assert next_round(["NO"] * 3).add == 2  # 3:0 is not yet settled (chance of a change about 0.08)
    assert next_round(["NO"] * 4, [0.3] * 4).add == 2  # settled by the vote, contradicted by hesitant tokens
    assert next_round(["NO"] * 4, [0.05] * 4).stop_reason == STOP_AGREED  # all sure: agreed


def test_a_tie_goes_on_then_is_certain():
    assert next_round(["YES", "NO"], [0.99, 0.01]).add == 2
    assert next_round(["YES", "NO", "NO", "YES"], [0.99, 0.01, 0.01, 0.99]).add == 2
    r = next_round(["YES", "NO", "NO", "YES", "YES", "NO"])
    assert (r.stop_reason, r.p_change) == (STOP_CERTAIN, 0.0)


def test_a_settled_abstention_needs_no_token_check():
    rule = AdaptiveRule(max_change=0.2)
    r = next_round(["YES", "NO", "NO", "YES"], [0.5, 0.5, 0.5, 0.5], rule)  # chance of a change about 0.19
    assert r.stop_reason == STOP_SETTLED
    assert next_round(["YES", "NO", "NO", "YES"], None, AdaptiveRule(max_change=0.1)).add == 2


def test_format_failures_count_against_the_group():
    assert next_round(["YES", F], [0.99, None]).add == 2  # not agreed: a rollout without an answer
    r = next_round([F] * 5 + ["YES"], [None] * 5 + [0.99])  # at most 3 of 8 answered: certain to abstain
    assert r.stop_reason == STOP_CERTAIN
    r = next_round(["YES"] * 6, [0.6] * 6)  # 6:0 is certain, hesitant tokens or not
    assert r.stop_reason == STOP_CERTAIN


def test_no_answers_at_all():
    r = next_round([F, F])
    assert not r.stop and r.add == 2 and 0.05 < r.p_change < 0.2  # an answer needs 4 of the 6 left, unanimous
    assert next_round([F] * 5).stop_reason == STOP_CERTAIN


def test_the_budget():
    outs = ["YES", "NO"] * 4
    assert next_round(outs).stop_reason == STOP_BUDGET
    with pytest.raises(ValueError, match="budget"):
        next_round(outs + ["YES"])
    rule = AdaptiveRule(k_min=2, k_max=5, step=4)
    assert next_round(["YES", "NO"], None, rule).add == 3  # never beyond k_max
    assert next_round(["YES", "YES", "NO", "YES"], None, AdaptiveRule(k_max=5)).add == 1
    assert next_round(["YES"], [0.99], AdaptiveRule(k_min=1, k_max=1)).stop_reason == STOP_BUDGET


def test_thresholds_reach_the_rule():
    # at min_agreement 0.6, 4:1 of 5 is certain at a budget of 6 (4:2 still keeps YES); at 0.75 it is not
    th = Thresholds(min_agreement=0.6)
    rule = AdaptiveRule(k_max=6)
    outs = ["YES", "YES", "NO", "YES", "YES"]
    assert next_round(outs, None, rule, th).stop_reason == STOP_CERTAIN
    assert next_round(outs, None, rule).stop_reason == ""


def test_rule_is_checked():
    for bad in (dict(k_min=0), dict(k_max=0), dict(step=0), dict(k_min=3, k_max=2), dict(max_change=1.5),
                dict(min_token=-0.1), dict(prior=0), dict(prior=float("inf")), dict(k_min=True), dict(k_max=2.5)):
        with pytest.raises(ValueError):
            AdaptiveRule(**bad)
    assert AdaptiveRule(k_min=1, k_max=1).k_max == 1


def test_rule_and_round_are_values():
    import dataclasses

    rule = AdaptiveRule()
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.k_max = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        next_round([]).add = 0  # type: ignore[misc]
    assert AdaptiveRule() == rule and hash(AdaptiveRule()) == hash(rule)


def test_every_round_says_what_to_add():
    r = next_round(["YES"])
    assert (r.stop_reason, r.add, r.p_change) == ("", 1, 1.0)  # below k_min: not judged yet
    assert (next_round(["YES", "NO"] * 4).add, next_round(["YES", "NO"] * 4).p_change) == (0, 0.0)  # budget
    r = next_round(["YES"] * 6)
    assert (r.stop_reason, r.add, r.p_change) == (STOP_CERTAIN, 0, 0.0)
    r = next_round(["NO"] * 4)
    assert (r.stop_reason, r.add) == (STOP_SETTLED, 0)
    assert next_round(["YES"] * 2, [0.95, 0.97]).add == 0  # agreed


def test_the_boundaries_of_the_thresholds_count_as_reached():
    p = change_probability(4, 0, 0, 4)[0]
    assert next_round(["YES"] * 4, None, AdaptiveRule(max_change=p)).stop_reason == STOP_SETTLED
    assert next_round(["YES"] * 4, None, AdaptiveRule(max_change=p * 0.999)).add == 2
    # 4 YES whose mean token probability is exactly min_token (one of them below it: not agreed) settle
    assert next_round(["YES"] * 4, [0.8, 1.0, 0.9, 0.9]).stop_reason == STOP_SETTLED
    assert next_round(["YES"] * 4, [0.8, 1.0, 0.9, 0.9], AdaptiveRule(min_token=0.91)).add == 2
    assert agreed(["YES"], [0.9], 0.9) and agreed(["NO"], [0.1], 0.9)  # a single rollout
    AdaptiveRule(max_change=0.0, min_token=1.0)
    AdaptiveRule(max_change=1.0, min_token=0.0)


# -- a first round of one rollout (k_min 1) ---------------------------------------------------------------------------
def test_a_lone_rollout_needs_the_stricter_bar():
    rule = AdaptiveRule(k_min=1)
    assert rule.min_token_alone == DEFAULT_MIN_TOKEN_ALONE == 0.99
    r = next_round(["YES"], [0.995], rule)
    assert (r.stop_reason, r.k, r.add) == (STOP_AGREED, 1, 0) and 0 < r.p_change < 1
    assert next_round(["YES"], [0.99], rule).stop_reason == STOP_AGREED  # the bar itself counts as reached
    assert next_round(["NO"], [0.005], rule).stop_reason == STOP_AGREED  # 0.995 towards NO
    # sure enough for a pair (0.9), not for a lone verdict: a second rollout, never two more
    for outcomes, tokens in ((["YES"], [0.985]), (["NO"], [0.02]), (["YES"], [None]), ([F], [None]), (["YES"], None)):
        r = next_round(outcomes, tokens, rule)
        assert (r.stop_reason, r.add) == ("", 1), (outcomes, tokens)
    assert next_round(["YES"], [0.95], AdaptiveRule(k_min=1, min_token_alone=0.95)).stop_reason == STOP_AGREED
    assert next_round(["YES"], [0.95], AdaptiveRule(k_min=1, min_token_alone=0.951)).add == 1


def test_after_a_lone_rollout_the_pairs_use_the_group_bar_and_step():
    rule = AdaptiveRule(k_min=1)
    assert next_round(["YES", "YES"], [0.95, 0.92], rule).stop_reason == STOP_AGREED  # 0.9 for two
    assert next_round(["YES", "YES"], [0.95, 0.85], rule).add == 2  # then 4, 6, 8
    assert next_round(["YES", "NO", "YES"], [0.99, 0.01, 0.99], rule).add == 2  # only a group of one gets one more
    assert next_round(["YES"], [0.5], AdaptiveRule(k_min=1, k_max=2)).add == 1
    assert next_round(["YES"], [0.5], AdaptiveRule(k_min=1, step=1)).add == 1
    # the lone bar never applies to a group: with k_min 2 two rollouts at 0.95 agree whatever the lone bar
    assert next_round(["NO", "NO"], [0.05, 0.05], AdaptiveRule(min_token_alone=1.0)).stop_reason == STOP_AGREED


def test_the_lone_bar_is_checked():
    for bad in (-0.01, 1.01, "0.9", None):
        with pytest.raises(ValueError):
            AdaptiveRule(min_token_alone=bad)
    AdaptiveRule(min_token_alone=0.0)
    AdaptiveRule(min_token_alone=1.0)


def test_the_use_of_the_budget_in_words():
    assert describe_use(4, 4, STOP_FIXED) == "K=4"
    assert describe_use(3, None, None) == "K=3"  # a row stored before the stop reason was
    assert describe_use(2, 8, STOP_AGREED) == f"2 of up to 8 rollouts ({STOP_WORDS[STOP_AGREED]})"
    assert describe_use(6, None, STOP_CERTAIN) == f"6 of up to ? rollouts ({STOP_WORDS[STOP_CERTAIN]})"
    assert describe_use(8, 8, "odd") == "8 of up to 8 rollouts (odd)"  # a reason this version does not know
    assert set(STOP_WORDS) == set(STOP_REASONS)

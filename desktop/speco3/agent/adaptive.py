"""Adaptive rollouts (``--rollouts auto``): a sequential stopping rule that spends rollouts only where the answer is
not settled.

The decision a group of rollouts leads to is what `speco3.agent.confidence.aggregate_outcomes` makes of it: YES,
NO, or an abstention (`Thresholds`; a tie or no answer abstains, and an abstention counts as one decision whatever
majority it keeps, as the vetter's queue treats it). The reference is the decision of the full group of ``k_max``
rollouts (8 by default: the GRPO group size). `AdaptiveRule` starts with ``k_min`` rollouts (2) and, after each
round, asks how likely the rollouts still to come could change the decision the group has reached so far:

- Each future rollout ends YES, NO or without an answer (format failure, budget exhausted, …). The three chances
  are unknown; with a symmetric Dirichlet prior of weight ``prior`` (½ each: Jeffreys') and the counts seen so far
  (``y`` YES, ``n`` NO, ``f`` without an answer), the ``r = k_max − k`` rollouts still in the budget have the
  Dirichlet-multinomial predictive distribution. `change_probability` sums it over every outcome ``(dy, dn, df)``
  of those ``r`` rollouts whose full-group decision (on ``y+dy``, ``n+dn``, ``f+df`` of ``k_max``) differs from the decision of
  the ``k`` rollouts now.
- **certain**: no outcome of the remaining budget can change the decision (the sum has no term at all: exact
  curtailment; e.g. 6 YES of 6 at ``k_max`` 8, or 3 YES / 3 NO of 6, which no two rollouts can lift to 6–2). Checked
  first; such a stop gives exactly the decision of ``k_max`` rollouts with the same seeds.
- **agreed**: every rollout so far answered, all with the same verdict, and each put at least ``min_token``
  (`DEFAULT_MIN_TOKEN`) on that verdict at its verdict token (`VerdictStep.p_yes_token`). A rollout's verdict token
  is itself sampled (at temperature 1), so its probability is the chance that this rollout, on its own reasoning,
  writes that answer. ``k_min`` unanimous rollouts that are each at least 90 % sure are taken for a clear spectrum:
  an assumption about the model (that doubt shows in hesitant verdict tokens), not a bound; this is the stop that
  lets a clear spectrum cost ``k_min`` rollouts, and ``benchmarks/bench_adaptive.py`` measures what it costs when the
  assumption fails. It needs recorded log-probabilities (a rollout without one never counts as sure).
- **settled**: the chance of a change is at most ``max_change`` (`DEFAULT_MAX_CHANGE`), and, when the decision is a
  verdict, the verdict-token probabilities do not contradict it: their mean on the verdict (`token_support`) is at
  least ``min_token``, or no rollout recorded one (the vote stands alone). An abstention needs no token check.
- **budget**: ``k_max`` rollouts ran.

Otherwise ``step`` more rollouts are added (never beyond ``k_max``). With ``k_min`` 1 (not the default: a first
round of one rollout, measured in ``benchmarks/bench_adaptive.py``), a lone rollout stops as *agreed* only at the
stricter bar ``min_token_alone`` (`DEFAULT_MIN_TOKEN_ALONE`), and otherwise gets one more, so the group goes 1, 2,
4, 6, 8: one rollout's sure token is the whole evidence then, and a spectrum whose rollouts disagree while each is
sure of itself stops at one. `next_round` returns that decision; the runner
(`speco3.agent.rollouts.iter_rollouts`) extends the group on the same engine sequences and shared prefix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from speco3.agent.confidence import Confidence, Thresholds, aggregate_outcomes

#: Defaults of `AdaptiveRule` (explained in the manual, docs/howto/confidence.md, "Adaptive rollouts").
DEFAULT_K_MIN = 2
DEFAULT_K_MAX = 8
DEFAULT_STEP = 2
DEFAULT_MAX_CHANGE = 0.05
DEFAULT_MIN_TOKEN = 0.9
DEFAULT_MIN_TOKEN_ALONE = 0.99  # a lone rollout (k_min 1; bench_adaptive.py, docs/contributing/benchmarks.md)
DEFAULT_PRIOR = 0.5

STOP_CERTAIN = "certain"
STOP_AGREED = "agreed"
STOP_SETTLED = "settled"
STOP_BUDGET = "budget"
STOP_FIXED = "fixed"  # a fixed-K plan: all K ran by design
STOP_CANCELLED = "cancelled"
STOP_REASONS = (STOP_CERTAIN, STOP_AGREED, STOP_SETTLED, STOP_BUDGET, STOP_FIXED, STOP_CANCELLED)

#: Each stop reason in words (the app's tooltips and verdict line; `describe_use`).
STOP_WORDS = {
    STOP_CERTAIN: "stopped: no remaining rollout could change the decision",
    STOP_AGREED: "stopped: unanimous, each rollout sure at its answer token",
    STOP_SETTLED: "stopped: a change by the remaining rollouts was unlikely",
    STOP_BUDGET: "the whole budget ran: the answer was not settled",
    STOP_FIXED: "a fixed number of rollouts",
    STOP_CANCELLED: "cancelled before the rule decided",
}

ABSTAIN = "abstain"
Decision = str  # "YES", "NO" or ABSTAIN: what the vetter acts on


@dataclass(frozen=True)
class AdaptiveRule:
    """When to stop adding rollouts (see module doc)."""

    k_min: int = DEFAULT_K_MIN
    k_max: int = DEFAULT_K_MAX
    step: int = DEFAULT_STEP
    max_change: float = DEFAULT_MAX_CHANGE
    min_token: float = DEFAULT_MIN_TOKEN
    prior: float = DEFAULT_PRIOR
    min_token_alone: float = DEFAULT_MIN_TOKEN_ALONE  # the agreed bar for a group of one (k_min 1)

    def __post_init__(self):
        for name in ("k_min", "k_max", "step"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if self.k_min > self.k_max:
            raise ValueError(f"k_min ({self.k_min}) must not exceed k_max ({self.k_max})")
        for name in ("max_change", "min_token", "min_token_alone"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be a number from 0 to 1, got {value!r}")
        if not (isinstance(self.prior, int | float) and self.prior > 0 and math.isfinite(self.prior)):
            raise ValueError(f"prior must be a positive number, got {self.prior!r}")


@dataclass(frozen=True)
class Round:
    """What the rule says after ``k`` rollouts: stop (with its reason) or add ``add`` more."""

    k: int
    stop_reason: str  # "" while going on
    add: int
    p_change: float  # predictive chance that the remaining budget changes the decision (0 when certain)

    @property
    def stop(self) -> bool:
        return bool(self.stop_reason)


def describe_use(k_used: int, k_max: int | None, stop_reason: str | None) -> str:
    """How many rollouts a run used and why no more ran, in words: ``K=4`` for a fixed K (or a row stored before
    the stop reason was), ``2 of up to 8 rollouts (stopped: unanimous, …)`` for ``--rollouts auto``."""
    if not stop_reason or stop_reason == STOP_FIXED:
        return f"K={k_used}"
    words = STOP_WORDS.get(stop_reason, stop_reason)
    return f"{k_used} of up to {k_max if k_max is not None else '?'} rollouts ({words})"


def decision(yes: int, no: int, other: int, thresholds: Thresholds | None = None) -> Decision:
    """What ``yes`` YES, ``no`` NO and ``other`` rollouts without an answer decide: ``"YES"``, ``"NO"`` or
    ``"abstain"``, by the abstention rule of `speco3.agent.confidence.aggregate_outcomes` (the one home of that
    rule; an abstention is one decision whatever majority it keeps)."""
    return of_confidence(aggregate_outcomes(["YES"] * yes + ["NO"] * no + ["format_error"] * other, None, thresholds))


def of_confidence(conf: Confidence) -> Decision:
    """The decision of a fold: its verdict, or ``"abstain"``."""
    return ABSTAIN if conf.abstained or conf.verdict is None else conf.verdict


def _log_dm(counts: tuple[int, int, int], alpha: tuple[float, float, float]) -> float:
    """log of the Dirichlet-multinomial probability of ``counts`` (an ordered outcome count, with its multinomial
    coefficient) under the Dirichlet ``alpha``."""
    r, a = sum(counts), sum(alpha)
    out = math.lgamma(r + 1) + math.lgamma(a) - math.lgamma(r + a)
    for c, al in zip(counts, alpha, strict=True):
        out += math.lgamma(c + al) - math.lgamma(al) - math.lgamma(c + 1)
    return out


@lru_cache(maxsize=4096)
def _change(yes: int, no: int, other: int, remaining: int, prior: float, min_agreement: float,
            min_answered: float) -> tuple[float, bool]:
    th = Thresholds(min_agreement, min_answered)
    now = decision(yes, no, other, th)
    alpha = (prior + yes, prior + no, prior + other)
    p, any_change = 0.0, False
    for dy in range(remaining + 1):
        for dn in range(remaining - dy + 1):
            df = remaining - dy - dn
            if decision(yes + dy, no + dn, other + df, th) != now:
                any_change = True
                p += math.exp(_log_dm((dy, dn, df), alpha))
    return min(1.0, p), any_change


def change_probability(yes: int, no: int, other: int, remaining: int, prior: float = DEFAULT_PRIOR,
                       thresholds: Thresholds | None = None) -> tuple[float, bool]:
    """(predictive chance that ``remaining`` more rollouts change the decision of these counts, whether any outcome
    of them can change it at all); see module doc."""
    if min(yes, no, other, remaining) < 0:
        raise ValueError("counts must not be negative")
    if yes + no + other == 0:
        raise ValueError("no rollouts to judge")
    th = thresholds or Thresholds()
    if remaining == 0:
        return 0.0, False
    return _change(yes, no, other, remaining, float(prior), th.min_agreement, th.min_answered)


def token_support(conf: Confidence) -> float | None:
    """The answered rollouts' mean probability on the fold's verdict at the verdict token (`Confidence.p_yes_token`
    turned towards the verdict); None without a verdict or when no rollout recorded one."""
    if conf.verdict is None or conf.p_yes_token is None:
        return None
    return conf.p_yes_token if conf.verdict == "YES" else 1.0 - conf.p_yes_token


def agreed(outcomes: Sequence[str], p_tokens: Sequence[float | None], min_token: float) -> bool:
    """Every rollout answered, all with the same verdict, and every one recorded a verdict-token probability of at
    least ``min_token`` on that verdict."""
    if not outcomes or outcomes[0] not in ("YES", "NO") or any(o != outcomes[0] for o in outcomes):
        return False
    toward = [None if p is None else (p if outcomes[0] == "YES" else 1.0 - p) for p in p_tokens]
    return all(p is not None and p >= min_token for p in toward)


def next_round(outcomes: Sequence[str], p_tokens: Sequence[float | None] | None = None,
               rule: AdaptiveRule | None = None, thresholds: Thresholds | None = None) -> Round:
    """The rule's answer after the rollouts ``outcomes`` (each an `Outcome` value, in rollout order) with their
    verdict-token probabilities: stop (``certain``, ``agreed``, ``settled``, ``budget``) or add rollouts."""
    rule = rule or AdaptiveRule()
    th = thresholds or Thresholds()
    k = len(outcomes)
    p_tokens = list(p_tokens) if p_tokens is not None else [None] * k
    if k > rule.k_max:
        raise ValueError(f"{k} rollouts exceed the budget of {rule.k_max}")
    if k < rule.k_min:
        return Round(k, "", rule.k_min - k, 1.0)
    conf = aggregate_outcomes(outcomes, p_tokens, th)
    if k == rule.k_max:
        return Round(k, STOP_BUDGET, 0, 0.0)
    other = k - conf.yes - conf.no
    p, can_change = change_probability(conf.yes, conf.no, other, rule.k_max - k, rule.prior, th)
    if not can_change:
        return Round(k, STOP_CERTAIN, 0, 0.0)
    if agreed(outcomes, p_tokens, rule.min_token_alone if k == 1 else rule.min_token):
        return Round(k, STOP_AGREED, 0, p)
    support = token_support(conf)
    if p <= rule.max_change and (of_confidence(conf) == ABSTAIN or support is None or support >= rule.min_token):
        return Round(k, STOP_SETTLED, 0, p)
    return Round(k, "", min(1 if k == 1 else rule.step, rule.k_max - k), p)  # a lone rollout gets a second first


__all__ = ["ABSTAIN", "DEFAULT_K_MAX", "DEFAULT_K_MIN", "DEFAULT_MAX_CHANGE", "DEFAULT_MIN_TOKEN",
           "DEFAULT_MIN_TOKEN_ALONE", "DEFAULT_PRIOR",
           "DEFAULT_STEP", "STOP_AGREED", "STOP_BUDGET", "STOP_CANCELLED", "STOP_CERTAIN", "STOP_FIXED",
           "STOP_REASONS", "STOP_SETTLED", "STOP_WORDS", "AdaptiveRule", "Decision", "Round", "agreed",
           "change_probability", "decision", "describe_use", "next_round", "of_confidence", "token_support"]

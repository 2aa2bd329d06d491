"""How sure the model is about one spectrum: K rollouts folded into ``p_yes``, agreement and an abstention.

Two YES probabilities are kept side by side, because they measure different things:

``p_yes`` (the vote share)
    The share of YES among the rollouts that ended with an answer (YES or NO). Rollouts without one (format error,
    budget exhausted, context full, engine error, …) are counted in ``format_failures`` / ``outcomes`` and left
    out of the share. None when no rollout answered.

``p_yes_token`` (mean probability on the YES answer token)
    For each answered rollout whose engine recorded log-probabilities (`GenerationResult.logprobs`), the model's
    probability of YES at the position where it wrote its verdict, renormalised over the two answers:
    ``P(YES) / (P(YES) + P(NO))``, both read from that position's token and its recorded alternatives
    (`answer_token_p_yes`). The mean over the rollouts that have one; None when none has.

How the verdict position is found (`answer_token_p_yes`): the turn's tokens are joined; after the last
``\\boxed{`` the first non-blank token must be the answer word (its text, braces and spaces aside, is YES or NO
in any case, or the first piece of one — ``Y``/``YE`` for YES, ``N`` for NO — when a tokenizer splits the word;
Qwen2.5 writes ``YES`` and ``NO`` as single tokens). Without a box, the first whole YES/NO token after the last
``<answer>`` (the reward's text fallback). The alternatives recorded at that position are summed by the same rule
(``YES``, ``Yes``, `` yes`` … all count for YES; the chosen token once). When no such token is found (an answer
read by the bare-word fallback, a word absent or split beyond recognition, a token that disagrees with the parsed
verdict, a position recorded without its alternatives) or the engine recorded nothing, the rollout has no token probability: the vote share is then the only
signal, never a made-up number.

Abstention (`Thresholds`): the model abstains on a spectrum when the evidence is split — fewer than
``min_agreement`` of the answered rollouts back the majority verdict (a tie always abstains) — or when too few
rollouts answered at all (``min_answered``), or none did. Why the defaults are what they are: the manual's How-to →
Confidence, rollouts and triage (docs/howto/confidence.md). K=1 at temperature 0 is the paper's greedy evaluation: one answer has agreement 1 and never
abstains unless it has no answer.

What a run came to (`run_outcome`, the one vocabulary of the store's ``outcome``, the exports' ``model_outcome``, the
CLI, the HTML report and the app): ``YES`` or ``NO`` when the fold gives a verdict it does not abstain on; for one
rollout (K=1) the run's own `Outcome` (``format_error``, ``budget_exhausted`` …: a run, not an abstention); for a
group (K > 1) without a verdict to act on, ``tie`` (as many YES as NO answers), ``no_answer`` (no rollout answered),
``abstained`` (a majority the rule does not trust: split evidence or too few answers), or ``cancelled`` /
``engine_error`` / ``input_error`` when a rollout was cancelled (retried by a resumed batch), the engine failed
(retried too) or the spectrum could not be shown.
`run_reason` says why in words and `describe_run` gives the headline, e.g. ``tie: 1 YES / 1 NO``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from speco3.agent.steps import Outcome, VerdictStep
from speco3.engine.base import TokenLogprob

#: Defaults of `Thresholds` (justified in the manual, docs/howto/confidence.md, "Confidence and abstention").
DEFAULT_MIN_AGREEMENT = 0.75
DEFAULT_MIN_ANSWERED = 0.5


@dataclass(frozen=True)
class Thresholds:
    """When to abstain: majority share of the answered rollouts below ``min_agreement``, or answered share of all
    rollouts below ``min_answered``."""

    min_agreement: float = DEFAULT_MIN_AGREEMENT
    min_answered: float = DEFAULT_MIN_ANSWERED

    def __post_init__(self):
        for name in ("min_agreement", "min_answered"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be a number from 0 to 1, got {value!r}")


@dataclass(frozen=True)
class Confidence:
    """The fold of K rollouts of one spectrum (see module doc)."""

    k: int
    outcomes: tuple[str, ...]  # each rollout's `Outcome` value, in rollout order
    yes: int
    no: int
    p_yes: float | None  # share of YES among the answered rollouts
    p_yes_token: float | None  # mean P(YES) at the verdict token over the answered rollouts that recorded it
    agreement: float | None  # share of the answered rollouts that gave the majority verdict
    verdict: str | None  # the majority verdict (None on a tie or without answers)
    format_failures: int  # rollouts that ended with a format error
    abstained: bool

    @property
    def answered(self) -> int:
        return self.yes + self.no

    @property
    def abstain_reason(self) -> str:
        """Why the model abstained, in words ("" when it did not)."""
        if not self.abstained:
            return ""
        return abstain_reason(self.k, self.yes, self.no, self.outcomes)

    @property
    def uncertainty(self) -> float | None:
        return uncertainty(self.p_yes)

    @property
    def outcome(self) -> str:
        """What the run came to (`run_outcome`)."""
        return run_outcome(self)

    @property
    def reason(self) -> str:
        """Why the run gives no verdict to act on, in words (`run_reason`; "" when it gives one)."""
        return run_reason(self)

    @property
    def headline(self) -> str:
        """The outcome with its reason (`describe_run`)."""
        return describe_run(self)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["outcomes"] = list(self.outcomes)
        d["answered"] = self.answered
        return d


def uncertainty(p_yes: float | None) -> float | None:
    """Closeness of ``p_yes`` to 0.5: 1 at 0.5, 0 at 0 or 1; None without answers (unknown: the triage order
    `speco3.vetting.triage` lists such spectra last)."""
    return None if p_yes is None else 1.0 - abs(2.0 * float(p_yes) - 1.0)


#: Outcomes of a group of rollouts (K > 1) that no single rollout has (`run_outcome`).
TIE = "tie"
NO_ANSWER = "no_answer"
ABSTAINED = "abstained"
RUN_OUTCOMES = (TIE, NO_ANSWER, ABSTAINED)


def run_outcome(conf: Confidence) -> str:
    """What a model run came to (module doc): its verdict, K=1's own outcome, or ``tie``, ``no_answer``,
    ``abstained``, ``cancelled``, ``engine_error`` for a group without a verdict to act on."""
    if conf.k == 1:
        return conf.outcomes[0]
    if conf.verdict is not None and not conf.abstained:
        return conf.verdict
    # unfinished (a resumed run retries it) or unshowable: named as such, not as the vote they left
    for failed in (Outcome.CANCELLED.value, Outcome.ENGINE_ERROR.value, Outcome.INPUT_ERROR.value):
        if failed in conf.outcomes:
            return failed
    if conf.answered == 0:
        return NO_ANSWER
    return TIE if conf.yes == conf.no else ABSTAINED


def run_reason(conf: Confidence) -> str:
    """Why a run gives no verdict to act on (`abstain_reason` of its vote; "" for a trusted verdict and for K=1,
    whose outcome says it)."""
    if conf.k == 1 or (conf.verdict is not None and not conf.abstained):
        return ""
    return abstain_reason(conf.k, conf.yes, conf.no, conf.outcomes)


def describe_run(conf: Confidence) -> str:
    """A run's outcome as every surface heads it: ``YES``, ``format_error`` (K=1), ``tie: 1 YES / 1 NO``,
    ``no_answer: no rollout of 4 answered (3 format_error, 1 budget_exhausted)``, ``abstained: split evidence,
    3 YES / 2 NO``."""
    return describe_outcome(run_outcome(conf), run_reason(conf))


def describe_outcome(outcome: str, reason: str = "") -> str:
    """``outcome: reason`` without saying a tie twice (`describe_run`; stored rows give both)."""
    if not reason:
        return outcome
    return f"{outcome}: {reason.removeprefix('a tie, ')}" if outcome == TIE else f"{outcome}: {reason}"


def abstain_reason(k: int, yes: int, no: int, outcomes: Sequence[str] = ()) -> str:
    """The reason of an abstention from the vote: no answer, a tie, too few answers (the answered rollouts agree
    but too many gave none), or split evidence. ``outcomes`` (each rollout's), when given, name what the rollouts
    without an answer ended with."""
    unanswered = [o for o in outcomes if o not in ("YES", "NO")]
    ended = ", ".join(f"{unanswered.count(o)} {o}" for o in dict.fromkeys(unanswered))
    if yes + no == 0:
        if k == 1:
            return "the run gave no answer" + (f" ({ended})" if ended else "")
        return f"no rollout of {k} answered" + (f" ({ended})" if ended else "")
    missing = k - yes - no
    if yes == no:
        return f"a tie, {yes} YES / {no} NO" + (f", {missing} of {k} without an answer" if missing else "")
    if missing and (yes == 0 or no == 0):
        return f"too few answers: {yes + no} of {k} rollouts answered ({yes} YES / {no} NO)"
    return f"split evidence, {yes} YES / {no} NO" + (f", {missing} of {k} without an answer" if missing else "")


def _word(text: str, *, prefixes: bool = True) -> str | None:
    """The answer word a token stands for: YES, NO or None. With ``prefixes``, the first piece of a split word
    counts too (``Y``, ``YE`` for YES; ``N`` for NO); braces and spaces around it are ignored."""
    t = text.strip().strip("{}").strip().upper()
    if not t:
        return None
    if t in ("YES", "NO"):
        return t
    if prefixes and "YES".startswith(t):
        return "YES"
    if prefixes and "NO".startswith(t):
        return "NO"
    return None


def _answer_position(logprobs: Sequence[TokenLogprob]) -> int | None:
    """Index of the token that carries the verdict word (see module doc), or None."""
    text = "".join(t.token for t in logprobs)
    ends, pos = [], 0
    for t in logprobs:
        pos += len(t.token)
        ends.append(pos)
    boxed = text.rfind("\\boxed{")
    if boxed >= 0:  # the first non-blank piece inside the box must be the word (or its first piece)
        anchor = boxed + len("\\boxed{")
        for i, t in enumerate(logprobs):
            inside = t.token[max(0, anchor - (ends[i] - len(t.token))):] if ends[i] > anchor else ""
            if inside.strip():
                return i if _word(inside) else None
        return None
    opened = text.rfind("<answer>")
    if opened >= 0:  # a whole YES/NO word inside <answer> (the reward's text fallback)
        anchor = opened + len("<answer>")
        for i, t in enumerate(logprobs):
            if ends[i] > anchor and _word(t.token, prefixes=False):
                return i
    return None


def answer_token_p_yes(logprobs: Sequence[TokenLogprob], verdict: str | None = None) -> float | None:
    """P(YES)/(P(YES)+P(NO)) at the verdict token of one answer turn (see module doc).

    None when nothing was recorded, no verdict token is found, or the token found says another word than
    ``verdict`` (the verdict the parser read, when given).
    """
    i = _answer_position(logprobs) if logprobs else None
    if i is None:
        return None
    tok = logprobs[i]
    chosen = _word(tok.token.split("{")[-1])
    if chosen is None or (verdict is not None and chosen != verdict) or not tok.top:
        return None  # without the alternatives the other answer's mass is unknown: no number rather than 1 or 0
    mass = {"YES": 0.0, "NO": 0.0}
    mass[chosen] += math.exp(tok.logprob)
    seen = {tok.token}
    for text, logprob in tok.top:
        word = _word(text)
        if word is not None and text not in seen:
            seen.add(text)
            mass[word] += math.exp(logprob)
    total = mass["YES"] + mass["NO"]
    return mass["YES"] / total if total > 0 else None


def aggregate_outcomes(outcomes: Sequence[str], p_tokens: Sequence[float | None] | None = None,
                       thresholds: Thresholds | None = None) -> Confidence:
    """Fold K rollouts given as their `Outcome` values (and, optionally, each one's ``p_yes_token``)."""
    if not outcomes:
        raise ValueError("no rollouts to aggregate")
    th = thresholds or Thresholds()
    outs = tuple(Outcome(o).value for o in outcomes)
    p_tokens = list(p_tokens) if p_tokens is not None else [None] * len(outs)
    yes, no = outs.count("YES"), outs.count("NO")
    answered = yes + no
    tokens = [p for o, p in zip(outs, p_tokens, strict=True) if o in ("YES", "NO") and p is not None]
    agreement = max(yes, no) / answered if answered else None
    verdict = "YES" if yes > no else "NO" if no > yes else None
    abstained = (
        agreement is None or verdict is None or agreement < th.min_agreement or answered / len(outs) < th.min_answered
    )
    return Confidence(
        k=len(outs), outcomes=outs, yes=yes, no=no, p_yes=yes / answered if answered else None,
        p_yes_token=sum(tokens) / len(tokens) if tokens else None, agreement=agreement, verdict=verdict,
        format_failures=outs.count(Outcome.FORMAT_ERROR.value), abstained=bool(abstained),
    )


def aggregate(finals: Sequence[VerdictStep], thresholds: Thresholds | None = None) -> Confidence:
    """Fold the final records of K rollouts (each a `VerdictStep`) into a `Confidence`."""
    return aggregate_outcomes([f.outcome.value for f in finals], [f.p_yes_token for f in finals], thresholds)


__all__ = ["ABSTAINED", "DEFAULT_MIN_AGREEMENT", "DEFAULT_MIN_ANSWERED", "NO_ANSWER", "RUN_OUTCOMES", "TIE",
           "Confidence", "Thresholds", "abstain_reason", "aggregate", "aggregate_outcomes", "answer_token_p_yes",
           "describe_outcome", "describe_run", "run_outcome", "run_reason"]

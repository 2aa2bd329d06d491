"""Certified stopping: may the observer stop vetting, and what does stopping lose?

The observer reads the screened spectra of a task likely-first (`speco3.vetting.triage`, order ``p_yes``), then
certifies stopping with a uniform random sample drawn without replacement from what is left (the *frame*): the exact
finite-population test of Callaghan & Müller-Hansen (2020, Systematic Reviews 9:273), made valid however often it is
evaluated. The guarantee holds whatever the model's scores are: they only decide how much work is saved.

Definitions (one task; a *candidate* is a spectrum the vetter decides YES):

- the *screened* population: the spectra with a model verdict for the task;
- the *frame*: the screened spectra without a decision when the first audit draw is made (before a draw: those
  without a decision now); everything else is the *head* (read before the draw, in whatever order);
- the *sample*: the draw is a seeded random permutation of the frame, stored with its seed
  (`VettingStore.create_audit_draw`); the sample is the longest prefix of the drawn sequence whose spectra all have a
  decision: only those decisions count as random labels. A decision on any other frame spectrum (read down the
  order after the draw, or picked by hand) is kept and counts as found, never as a sample label;
- ``found`` = YES decisions on screened spectra, made in any order (the head, the audit sample, down the order
  after the draw, or picked by hand): every candidate the vetter confirmed is known and counts as found, since
  the test only needs the candidates it knows of to be exactly those, and only bounds the ones it does not know
  (the unread of the frame); ``found_outside`` of them in the head. Only the *sample* (the random labels) is
  restricted to decisions on drawn spectra in draw order. A YES on a spectrum not screened for the task is outside
  the screened population: it is reported (``found_unscreened``) but not counted until the spectrum is screened
  (counting it without the unscreened unread spectra it came from would overstate the recall);
- the *unscreened*: the archive's spectra (the app's index, or those ``spec-o3 triage`` lists of the archive folder;
  without one, the spectra the store knows of) without a model verdict for the task. The guarantee covers screened spectra only, so while any is unscreened the verdict
  is ``continue`` (the line says to screen them first), whatever the test says about the screened ones;
- ``k`` = candidates in the sample: YES and UNSURE (an UNSURE counts as a candidate in the sample, which makes the
  test harder to pass, and is never counted as found).

The test. Let K be the (unknown) number of candidates in the frame (M spectra). The unread spectra then hold at most
``K - y`` candidates (``y = found - found_outside``, the YES decisions inside the frame) of at least
``found_outside + K``, so the recall of what was read is at least R unless K >= ``k_target`` =
``floor(((1 - R) found_outside + y) / R) + 1``. Under K, the sample's candidates are hypergeometric (M, K, n); the
data reject K when ``hypergeom.cdf(k, M, K, n) <= delta * w(k)`` (delta = 1 - confidence), and the rule says *stop*
when they reject ``k_target`` (then also every larger K: the cdf decreases in K).

Why the weights ``w(k) = 6 / (pi^2 (k + 1)^2)`` (they sum to 1): the sample grows one label at a time and the
observer may look after every label. ``k`` never decreases and, for a fixed k, the cdf decreases in n, so the
event "the test rejects the true K at some time while the sample holds k candidates" is contained in
``{k_(n_k) <= k}`` at the first n where level k could reject, of probability <= ``delta * w(k)``. Summed over k the
chance of ever stopping while recall < R is <= delta, however many looks and draw extensions there were. (The
unweighted test, evaluated after each label, is exact only for a sample size fixed in advance.)

What it costs. Before the sample, with no candidate in it, the rule needs the smallest n with
``hypergeom.pmf(0, M, k_target, n) <= delta * w(0)`` (`sample_needed`). Any test that certifies from a uniform sample
of fixed size n without candidates needs ``hypergeom.pmf(0, M, k_target, n) <= delta`` (`labels_lower_bound`, about
``M ln(1/delta) / k_target`` when n << M): otherwise a population at the boundary passes with probability > delta.
The rule's k = 0 figure is that bound at ``delta * w(0)``: ``ln(1/(0.61 delta)) / ln(1/delta)`` times it (1.17 at
95 %, 1.11 at 99 %), the price of looking after every label.

How "working down the likely-first order" is recorded: it is not, because the guarantee does not need it. The test
is valid for any head, read in any order, as long as the frame is fixed before the draw and the sample is uniform over
it: the store records the frame and its seeded order at the first draw (`audit_frame`, `audit_draws`), nothing about
the order decisions were made in. The order only decides how much is saved (a head read likely-first leaves few
candidates in the frame, so a small sample rules out ``k_target``); ``reviewed_in_order`` reports how far the fully
decided prefix of the ``p_yes`` order reaches, for the queue's line.

Mode 3 (`next_archive_threshold`): from a draw made before any decision (uniform over the whole screened archive),
the largest ``p_yes`` threshold whose miss rate is at most alpha, for an archive exchangeable with this one.

Every function here takes numbers or numpy arrays (the simulation `benchmarks/bench_triage.py` runs the same code on
thousands of populations at once); `assess` turns a store into a `Certificate`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from scipy.stats import binom, hypergeom

from speco3.errors import StoreError
from speco3.vetting.store import VettingStore
from speco3.vetting.triage import rank

#: The method as reports name it.
METHOD = ("hypergeometric test of 'recall < R' on a uniform sample without replacement from the unread frame "
          "(Callaghan & Müller-Hansen 2020), levels spent over the sample's candidates (valid at every label)")
#: Decisions that count as a candidate in the sample (UNSURE: the test is the harder to pass).
SAMPLE_CANDIDATE = ("YES", "UNSURE")


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    """``n`` and the noun in agreement, as the line and the command line write counts: 1 -> "1 candidate",
    2 -> "2 candidates", (1, "spectrum", "spectra") -> "1 spectrum"; thousands separated."""
    return f"{n:,} {singular if n == 1 else (plural_form or singular + 's')}"


def percent(share: float) -> str:
    """A share as the app and the command line write a target or a bound: 0.9 -> "90 %", 0.975 -> "97.5 %"."""
    text = f"{share * 100:.1f}".removesuffix(".0")
    return f"{text} %"


def check_target(recall: float, confidence: float) -> None:
    """Refuse a target outside (0, 1] recall or (0, 1) confidence (`ValueError` with the reason)."""
    if not (isinstance(recall, int | float) and math.isfinite(recall) and 0 < recall <= 1):
        raise ValueError(f"the recall target must be in (0, 1], got {recall!r}")
    if not (isinstance(confidence, int | float) and math.isfinite(confidence) and 0 < confidence < 1):
        raise ValueError(f"the confidence must be in (0, 1), got {confidence!r}")


def _ratio(recall: float) -> tuple[int, int]:
    """``recall`` as an exact fraction a/b (0.9 -> 9/10): k_target is integer arithmetic, never a rounded float."""
    f = Fraction(str(recall)).limit_denominator(10**6)
    return f.numerator, f.denominator


def k_target(found, found_outside, recall: float):
    """The smallest number of candidates in the frame for which the recall of what was read is below ``recall``:
    ``floor(((1 - R) found_outside + y) / R) + 1`` with ``y = found - found_outside`` (exact integers)."""
    a, b = _ratio(recall)
    found, outside = np.asarray(found, dtype=np.int64), np.asarray(found_outside, dtype=np.int64)
    out = ((b - a) * outside + b * (found - outside)) // a + 1
    return out if out.ndim else int(out)


def level(k, confidence: float):
    """The error spent at k candidates in the sample: ``(1 - confidence) * 6 / (pi^2 (k + 1)^2)``."""
    k = np.asarray(k, dtype=np.float64)
    out = (1.0 - confidence) * 6.0 / (math.pi ** 2 * (k + 1.0) ** 2)
    return out if out.ndim else float(out)


def p_value(k, n, frame, found, found_outside, recall: float):
    """``hypergeom.cdf(k, frame, k_target, n)``: how likely k or fewer candidates in n random spectra of the frame
    are if the recall were below ``recall``; 0 where the frame is too small to hold ``k_target`` candidates."""
    kt = np.asarray(k_target(found, found_outside, recall))
    frame = np.asarray(frame, dtype=np.int64)
    possible = kt <= frame
    p = hypergeom.cdf(np.asarray(k), frame, np.minimum(kt, frame), np.asarray(n))
    out = np.where(possible, p, 0.0)
    return out if out.ndim else float(out)


def passes(k, n, frame, found, found_outside, recall: float, confidence: float):
    """True where the sample (n labels, k candidates) certifies recall >= ``recall`` at ``confidence``."""
    out = np.asarray(p_value(k, n, frame, found, found_outside, recall)) <= np.asarray(level(k, confidence))
    return out if out.ndim else bool(out)


def _smallest_n(ok, lo, hi):
    """The smallest n in [lo, hi] with ``ok(n)`` true (``ok`` monotone in n, true at hi), elementwise."""
    lo, hi = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
    lo, hi = np.broadcast_arrays(lo, hi)
    lo, hi = lo.copy(), hi.copy()
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        good = ok(mid)
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid + 1)
    return hi


def sample_needed(frame, found, found_outside, recall: float, confidence: float, k=0):
    """The sample size at which a sample of the frame holding k candidates (none of them more YES than ``found``
    already counts) certifies the target: the smallest n with `passes`. At most the frame; 0 where no sample is
    needed (the frame cannot hold ``k_target`` candidates)."""
    frame = np.asarray(frame, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    out = _smallest_n(lambda n: np.asarray(passes(k, n, frame, found, found_outside, recall, confidence)),
                      np.minimum(k, frame), frame)
    return out if out.ndim else int(out)


def stop_label(frame: int, found_outside: int, hits: Sequence[int] | np.ndarray, recall: float,
               confidence: float) -> tuple[int, int]:
    """Where the rule stops on a sample of a frame of ``frame`` spectra (the head found ``found_outside`` candidates)
    whose c-th candidate is its label ``hits[c - 1]`` (1-based, increasing; every candidate of the sample counts as
    found, as a YES does): (labels, candidates in the sample) at the first label where `passes`; the whole frame when
    nothing earlier passes (the sample is then everything unread: (frame, len(hits))).

    Evaluated once per count of sample candidates, not once per label: while the sample holds c candidates (labels
    ``hits[c - 1]`` to ``hits[c] - 1``) k_target is fixed and the p-value falls with every label (the cdf decreases
    in n at fixed k and K), so the test passes in that stretch exactly when it passes at its last label, and first
    at the larger of `sample_needed` at c and the stretch's first label. Counts are tried in blocks that double
    (16, 32, ...): a sequence costs about twice the candidates it stops at, whatever its length (the simulation,
    `benchmarks/bench_triage.py`, runs it on 170,000-spectrum campaigns)."""
    kk = len(hits)
    t = np.concatenate([[0], np.asarray(hits, dtype=np.int64), [frame + 1]])
    c0, block = 0, 16
    while c0 <= kk:
        c = np.arange(c0, min(kk, c0 + block - 1) + 1)
        ok = np.flatnonzero(np.asarray(passes(c, t[c + 1] - 1, frame, found_outside + c, found_outside, recall,
                                              confidence)))
        if ok.size:
            ci = int(c[ok[0]])
            need = int(sample_needed(frame, found_outside + ci, found_outside, recall, confidence, ci))
            return min(max(need, int(t[ci])), frame), ci
        c0, block = c0 + len(c), block * 2
    return frame, kk


def labels_lower_bound(frame, found, found_outside, recall: float, confidence: float):
    """The fewest random labels any certificate from a uniform sample of fixed size needs even when the sample has no
    candidate: the smallest n with ``hypergeom.pmf(0, frame, k_target, n) <= 1 - confidence`` (0 where the frame
    cannot hold ``k_target``); about ``frame * ln(1 / (1 - confidence)) / k_target``."""
    kt = np.asarray(k_target(found, found_outside, recall))
    frame = np.asarray(frame, dtype=np.int64)
    delta = 1.0 - confidence
    out = _smallest_n(lambda n: hypergeom.pmf(0, frame, np.minimum(kt, frame), n) <= delta, 0, frame)
    out = np.where(kt > frame, 0, out)
    return out if out.ndim else int(out)


def candidates_upper_bound(k, n, frame, confidence: float, known: int | np.ndarray = 0):
    """The largest number of candidates K in the frame that the sample does not reject
    (``hypergeom.cdf(k, frame, K, n) > (1 - confidence) w(k)``): a confidence bound on K, valid at every label as
    the test is. At least ``known`` (candidates known to be in the frame)."""
    frame = np.asarray(frame, dtype=np.int64)
    lev = np.asarray(level(k, confidence))
    # the cdf decreases in K: the smallest rejected K, minus one; none rejected -> the frame
    rejected = _smallest_n(lambda kk: hypergeom.cdf(k, frame, kk, n) <= lev, np.minimum(k, frame), frame)
    none = hypergeom.cdf(k, frame, frame, n) > lev
    out = np.maximum(np.where(none, frame, rejected - 1), np.asarray(known))
    return out if out.ndim else int(out)


def missed_share_bound(k, n, frame, found, found_outside, confidence: float):
    """Upper confidence bound on the share of all candidates that are among the unread spectra of the frame."""
    y = np.asarray(found) - np.asarray(found_outside)
    kup = np.asarray(candidates_upper_bound(k, n, frame, confidence, known=y))
    total = np.asarray(found_outside) + kup
    out = np.where(total > 0, (kup - y) / np.maximum(total, 1), 0.0)
    return out if out.ndim else float(out)


def more_found_needed(k, n, frame, found, found_outside, recall: float, confidence: float,
                      room: int | None = None) -> int | None:
    """How many more candidates found in the frame outside the sample (reading on down the likely-first order) would
    let the present sample certify the target; None when no number would (the sample alone must grow). ``room``:
    the unread spectra of the frame outside the drawn sample, where such candidates could be found (default: all of
    the frame but the n labels; spectra drawn but not yet decided count as sample labels once decided, never as
    found outside the sample)."""
    if passes(k, n, frame, found, found_outside, recall, confidence):
        return 0
    room = frame - n if room is None else min(room, frame - n)
    if room <= 0 or not passes(k, n, frame, found + room, found_outside, recall, confidence):
        return None
    return int(_smallest_n(lambda d: np.asarray(passes(k, n, frame, found + d, found_outside, recall, confidence)),
                           0, room))


def next_archive_threshold(candidate_scores: Sequence[float | None], thresholds: Sequence[float], miss_rate: float,
                           confidence: float) -> tuple[float | None, int]:
    """Mode 3: the largest ``p_yes`` threshold for the next archive whose share of candidates below it (the miss rate
    of reading only ``p_yes >= t``) is at most ``miss_rate`` at ``confidence``, by Learn-then-Test with binomial
    p-values: from the lowest threshold up, H0 "miss rate > alpha" is rejected while
    ``binom.cdf(misses below t, candidates, alpha) <= 1 - confidence`` (fixed-sequence testing: the first
    non-rejection ends it, so the error is controlled over all thresholds at once). ``candidate_scores``: the
    ``p_yes`` of the candidates in a sample uniform over a whole screened archive (None: no score, below every
    threshold). Returns (threshold or None, how many more candidates the audit must find before even a sample
    without misses could certify one: ``ceil(ln(1 - C) / ln(1 - alpha))`` in all, 59 at 5 % and 95 %)."""
    if not 0 < miss_rate < 1:
        raise ValueError(f"the miss rate must be in (0, 1), got {miss_rate!r}")
    delta = 1.0 - confidence
    scores = [-math.inf if p is None else float(p) for p in candidate_scores]
    best = None
    for t in sorted(set(thresholds)):
        misses = sum(x < t for x in scores)
        if binom.cdf(misses, len(scores), miss_rate) > delta:
            break
        best = t
    needed = math.ceil(math.log(delta) / math.log(1.0 - miss_rate))
    return best, (0 if best is not None else max(0, needed - len(scores)))


# -- a store's task ---------------------------------------------------------------------------------------------
@dataclass
class Certificate:
    """The stopping test of one task as `spec-o3 triage --json` reports it (see module doc; JSON keys as named)."""

    task: str
    recall: float
    confidence: float
    verdict: str  # "stop" or "continue" (continue while any spectrum is unscreened)
    screened: int  # spectra with a model verdict for the task
    reviewed: int  # of them with a decision
    reviewed_in_order: int  # the longest fully decided prefix of the likely-first order
    found: int  # YES decisions on screened spectra, in any order
    remaining: int  # screened spectra without a decision
    frame: int  # the spectra the sample is drawn from (the draw's frame, or the undecided now)
    found_outside: int  # YES decisions outside the frame (the head)
    unframed: int  # unread spectra screened after the first draw: outside the frame, to be read before a stop
    sample_drawn: int  # spectra drawn so far
    labels_used: int  # sample labels the test counts (the decided prefix of the draw)
    positives_used: int  # candidates (YES or UNSURE) among them
    sample_positives: int  # candidates among all decided drawn spectra
    sample_needed: int  # more random labels to stop if none of them is a candidate (0: stop)
    labels_lower_bound: int  # the fewest random labels any fixed-size certificate would need now (see module doc)
    more_found_needed: int | None  # or: this many more candidates found reading on down the order
    skipped: int  # unread spectra that stopping leaves (0 while the verdict is continue)
    bound: float | None  # upper confidence bound on the share of candidates among the unread (None: no sample)
    p_value: float | None
    seed: int | None
    draws: list[dict[str, Any]] = field(default_factory=list)
    threshold: float | None = None  # mode 3 (`next_archive_threshold`; only with a miss rate asked for)
    miss_rate: float | None = None
    threshold_positives_needed: int | None = None  # more candidates the audit must find for a threshold
    threshold_note: str | None = None  # why there is no threshold when one was asked for
    method: str = METHOD
    unscreened: int = 0  # spectra of the archive (or known to the store) without a model verdict for the task
    archive: str | None = None  # the archive folder whose spectra were counted (spec-o3 triage; None: the store's)
    found_unscreened: int = 0  # YES decisions on them (not counted as found until screened)
    reviewed_audit: int = 0  # decided screened spectra that are sample labels (= labels_used)
    reviewed_other: int = 0  # decided screened spectra neither in the likely-first prefix nor sample labels
    covered: bool = False  # the screened spectra alone pass the test (the verdict waits for the unscreened)
    #: spectrum keys: the sample in draw order, and what stopping leaves unread
    drawn_keys: list[str] = field(default_factory=list, repr=False)
    skippable_keys: list[str] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("drawn_keys")
        out.pop("skippable_keys")
        return out

    def reviewed_text(self) -> str:
        """How the reviewed spectra were read: "reviewed 20 of 20 (2 likely first, 18 in the audit sample)"."""
        of = f"{self.screened:,}" if not self.unscreened else f"the {self.screened:,} screened"
        likely = self.reviewed - self.reviewed_audit - self.reviewed_other
        parts = [(likely, "likely first", "likely first"),
                 (self.reviewed_audit, "in the audit sample", "audit sample"),
                 (self.reviewed_other, "in another order", "out of the likely-first order")]
        shown = [(n, many, alone) for n, many, alone in parts if n]
        how = ("" if not shown else f" ({shown[0][2]})" if len(shown) == 1 else
               " (" + ", ".join(f"{n:,} {many}" for n, many, _alone in shown) + ")")
        found = f"{plural(self.found, 'candidate')} found"
        if self.found_unscreened:
            found += f" ({self.found_unscreened:,} more decided YES among the spectra not screened)"
        return f"reviewed {self.reviewed:,} of {of}{how}, {found}"

    def line(self) -> str:
        """The queue's one line (the manual: docs/howto/stopping.md): where the observer stands and what stopping
        now needs or loses, at which target."""
        pct, conf = percent(self.recall), percent(self.confidence)
        head = self.reviewed_text()
        if self.unscreened:
            return (f"{head}; {plural(self.unscreened, 'spectrum', 'spectra')} not screened yet — screen them "
                    "(pre-screen) before a stop covers the archive")
        if self.verdict == "stop":
            share = "no" if self.bound is not None and self.bound <= 0 else f"at most {percent(self.bound or 0)} of"
            return (f"{head}; stop: {share} candidates are among the {self.remaining:,} unread "
                    f"({conf} confidence; target ≥ {pct} recall)")
        if self.unframed:
            return (f"{head}; {plural(self.unframed, 'spectrum', 'spectra')} screened after the audit sample was "
                    f"drawn {'is' if self.unframed == 1 else 'are'} outside it: decide "
                    f"{'it' if self.unframed == 1 else 'them'} before stopping")
        if self.sample_drawn:
            more = (f"; or find {plural(self.more_found_needed, 'more candidate')} reading on down the likely-first "
                    "order (outside the audit sample)" if self.more_found_needed else "")
            return (f"{head}; audit sample: {self.labels_used:,} of {self.sample_drawn:,} decided, "
                    f"{plural(self.positives_used, 'candidate')}; to stop with ≥ {pct} recall at {conf} confidence "
                    f"decide {plural(self.sample_needed, 'more random spectrum', 'more random spectra')}{more}")
        return (f"{head}; to stop now with ≥ {pct} recall at {conf} confidence decide "
                f"{plural(self.sample_needed, 'random spectrum', 'random spectra')} of the {self.remaining:,} left")


def assess(store: VettingStore, task: str, recall: float, confidence: float,
           miss_rate: float | None = None, archive: int | Collection[str] | None = None) -> Certificate:
    """The stopping test of ``task`` in ``store`` at the target (see module doc); with ``miss_rate``, also the
    threshold for the next archive (`next_archive_threshold`) when the draw is uniform over the whole screened
    archive (made before any decision). ``archive``, for the count of the spectra not screened: how many spectra the
    archive holds (the app's index), or their store keys (``spec-o3 triage``: those without a verdict for the task
    count, whatever else the store holds); None: the spectra the store knows of (a verdict for any task, a
    decision, notes)."""
    check_target(recall, confidence)
    scores = store.verdict_scores(task)  # one query each: 170,000 screened spectra read in well under a second
    verdicts = {key: p_yes for key, p_yes, _token in scores}
    decided = store.decision_labels(task)
    order = [key for key, _p, _t in sorted(scores, key=lambda s: rank(s[1], s[2], "p_yes"))]
    in_order = next((i for i, key in enumerate(order) if key not in decided), len(order))
    frame_keys = store.audit_frame(task)
    draws = store.audit_draws(task)
    drawn = draws[-1]["drawn"] if draws else 0
    if not frame_keys:
        frame_keys = [key for key in order if key not in decided]
    frame_set = set(frame_keys)
    found = sum(decided.get(key) == "YES" for key in verdicts)
    found_unscreened = sum(label == "YES" and key not in verdicts for key, label in decided.items())
    if archive is None:
        unscreened = sum(key not in verdicts for key in store.spectrum_keys())
    elif isinstance(archive, int):
        unscreened = max(0, archive - len(verdicts))
    else:
        unscreened = sum(key not in verdicts for key in archive)
    found_outside = sum(decided.get(key) == "YES" for key in verdicts if key not in frame_set)
    sample = frame_keys[:drawn]
    used = next((i for i, key in enumerate(sample) if key not in decided), len(sample))
    k = sum(decided[key] in SAMPLE_CANDIDATE for key in sample[:used])
    m = len(frame_keys)
    unread = [key for key in order if key not in decided and key in frame_set]
    # screened after the first draw: outside the frame, so outside the guarantee; read them before stopping
    unframed = sum(key not in decided and key not in frame_set for key in order)
    certified = not unread or bool(passes(k, used, m, found, found_outside, recall, confidence))
    covered = certified and not unframed  # the screened spectra alone: stop, but for the unscreened
    stop = covered and not unscreened
    labels = set(sample[:used])
    head_prefix = set(order[:in_order])
    reviewed_other = sum(key in decided and key not in labels and key not in head_prefix for key in verdicts)
    drawn_set = set(sample)
    room = sum(key not in drawn_set for key in unread)  # where candidates outside the sample can still be found
    bound = (0.0 if not unread else
             missed_share_bound(k, used, m, found, found_outside, confidence) if used or certified else None)
    threshold, t_needed, t_note = None, None, None
    if miss_rate is not None:
        if not draws or draws[0]["head"]:
            t_note = ("no audit draw uniform over the whole screened archive (draw before deciding anything: "
                      "--draw with an empty head)")
        else:
            cands = [verdicts[key] for key in sample[:used] if decided[key] in SAMPLE_CANDIDATE]
            grid = [p for p in verdicts.values() if p is not None]
            threshold, t_needed = next_archive_threshold(cands, grid, miss_rate, confidence)
    return Certificate(
        threshold=threshold, miss_rate=miss_rate, threshold_positives_needed=t_needed, threshold_note=t_note,
        task=task, recall=recall, confidence=confidence, verdict="stop" if stop else "continue",
        screened=len(verdicts), reviewed=sum(key in decided for key in verdicts), reviewed_in_order=in_order,
        found=found, remaining=len(unread) + unframed, frame=m, found_outside=found_outside, unframed=unframed,
        sample_drawn=drawn,
        labels_used=used, positives_used=k,
        sample_positives=sum(decided.get(key) in SAMPLE_CANDIDATE for key in sample),
        sample_needed=0 if covered else max(0, sample_needed(m, found, found_outside, recall, confidence, k) - used),
        # capped: never more than the labels there are (those used and the unread of the frame)
        labels_lower_bound=min(int(labels_lower_bound(m, found, found_outside, recall, confidence)),
                               used + len(unread)) if m else 0,
        more_found_needed=None if covered or not used else more_found_needed(
            k, used, m, found, found_outside, recall, confidence, room=room),
        unscreened=unscreened, found_unscreened=found_unscreened, reviewed_audit=used, reviewed_other=reviewed_other,
        covered=covered,
        skipped=len(unread) if stop else 0, bound=None if bound is None else round(float(bound), 6),
        p_value=None if not m else float(p_value(k, used, m, found, found_outside, recall)),
        seed=draws[0]["seed"] if draws else None, draws=draws, drawn_keys=list(sample),
        skippable_keys=unread if stop else [])


#: The target before the user sets one (the app's Settings: "Stop vetting at recall", "confidence"); a draw keeps
#: the target it was made for.
DEFAULT_RECALL, DEFAULT_CONFIDENCE = 0.9, 0.95


def current(store: VettingStore, task: str, recall: float = DEFAULT_RECALL,
            confidence: float = DEFAULT_CONFIDENCE, archive: int | Collection[str] | None = None) -> Certificate | None:
    """The certificate of ``task`` at its latest draw's target, or at ``recall`` and ``confidence`` (the app's
    settings) when no draw has recorded one; None when the task has no screened spectrum (nothing to certify).
    ``archive``: as `assess`."""
    draws = store.audit_draws(task)
    recall = (draws[-1]["recall"] if draws else None) or recall
    confidence = (draws[-1]["confidence"] if draws else None) or confidence
    cert = assess(store, task, recall, confidence, archive=archive)
    return cert if cert.screened else None


def audit_rest(store: VettingStore, task: str, vetter: str = "", recall: float = DEFAULT_RECALL,
               confidence: float = DEFAULT_CONFIDENCE, archive: int | Collection[str] | None = None) -> Certificate | None:
    """"Audit the rest" (the app's queue): add to the audit sample as many random spectra as the test asks for
    (at the target of `current`), unless the spectra drawn before are not all decided yet, the screened spectra
    pass already, or some of the archive is not screened (the draw fixes the frame: spectra screened after it
    would be outside it, so screen first); returns the certificate after it (None: nothing screened). The audit
    sample is `Certificate.drawn_keys`, to be decided in that order. ``archive``: as `assess`."""
    cert = current(store, task, recall, confidence, archive)
    if cert is None or cert.covered or cert.unscreened or cert.labels_used < cert.sample_drawn:
        return cert
    draw(store, task, max(1, cert.sample_needed), recall=cert.recall, confidence=cert.confidence, vetter=vetter)
    return current(store, task, recall, confidence, archive)


class AuditMarks(NamedTuple):
    """Per spectrum of a task: its place in the audit draw (1-based) and whether a certified stop leaves it unread
    (None: no draw, or no target recorded with it)."""

    drawn: dict[str, int]
    skippable: set[str] | None


def audit_marks(store: VettingStore, task: str) -> AuditMarks:
    """The exports' ``audit_draw`` and ``skippable`` of ``task``: the certificate at the latest draw's target."""
    draws = store.audit_draws(task)
    if not draws:
        return AuditMarks({}, None)
    drawn = {key: i + 1 for i, key in enumerate(store.audit_frame(task)[:draws[-1]["drawn"]])}
    recall, confidence = draws[-1]["recall"], draws[-1]["confidence"]
    if recall is None or confidence is None:
        return AuditMarks(drawn, None)
    return AuditMarks(drawn, set(assess(store, task, recall, confidence).skippable_keys))


def draw(store: VettingStore, task: str, n: int, seed: int | None = None, *, recall: float | None = None,
         confidence: float | None = None, vetter: str = "") -> list[dict[str, Any]]:
    """Draw ``n`` more spectra for the audit of ``task``: the first draw fixes the frame (the screened spectra without
    a decision now) and its random order from ``seed`` (a fresh one when None) and stores both; a later draw extends
    the same sequence (its seed must be the stored one, or None). Returns the draws as stored."""
    if n <= 0:
        raise ValueError(f"draw at least one spectrum, got {n}")
    draws = store.audit_draws(task)
    if draws:
        if seed is not None and seed != draws[0]["seed"]:
            raise StoreError(f"task {task!r} has an audit draw with seed {draws[0]['seed']}: a draw is never "
                             f"redrawn (a further draw extends it; leave out --seed)")
        store.extend_audit_draw(task, n, recall=recall, confidence=confidence, vetter=vetter)
        return store.audit_draws(task)
    verdicts = {key for key, _p, _t in store.verdict_scores(task)}
    if not verdicts:
        raise StoreError(f"task {task!r} has no screened spectra in {store.path}")
    decided = set(store.decision_labels(task))
    frame = sorted(verdicts - decided)
    if not frame:
        raise StoreError(f"task {task!r}: every screened spectrum has a decision, nothing to draw from")
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1, dtype=np.uint32)[0])
    order = np.random.default_rng(seed).permutation(len(frame))
    store.create_audit_draw(task, [frame[i] for i in order], seed, n, head=len(verdicts & decided), recall=recall,
                            confidence=confidence, vetter=vetter)
    return store.audit_draws(task)


__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_RECALL", "METHOD", "SAMPLE_CANDIDATE", "AuditMarks", "Certificate", "assess",
           "audit_marks", "audit_rest", "current", "candidates_upper_bound", "check_target", "draw",
           "k_target", "labels_lower_bound", "level", "missed_share_bound", "more_found_needed", "next_archive_threshold",
           "p_value", "passes", "percent", "plural", "sample_needed", "stop_label"]

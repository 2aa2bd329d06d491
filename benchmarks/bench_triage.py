"""Benchmark: certified stopping (`speco3.vetting.stopping`, ``spec-o3 triage``) on simulated vetting campaigns with
known truth, against naive stopping rules and a sample chosen by score.

A population of N screened spectra holds round(prevalence·N) candidates. Each spectrum's model ran K=5 rollouts, each
YES with probability Φ(z), z ~ Normal(+s/2, 1) for a candidate and Normal(−s/2, 1) otherwise (``s``: the score
separation, good 4, medium 2.5, bad 1), so ``p_yes`` is one of 0, 0.2, …, 1 (many ties, as with real vote shares).
The observer reads in the likely-first order (``p_yes`` first, ties in random order) and decides every spectrum
truthfully. The rule under test:

- reading on down the order, the observer starts the audit once the candidates met in the last ``max(50, N/100)``
  labels, as a rate times the spectra left, fall to half of ``k_target`` (any policy will do: the guarantee does not
  depend on when the audit starts), or stops at once where the frame cannot hold ``k_target`` candidates;
- then decides a uniform random sample of the unread, one label at a time, and stops at the first label where the
  test passes (`speco3.vetting.stopping.stop_label`: `passes` once per count of sample candidates and
  `sample_needed` where it stops, the code the app runs), or when everything is read.

Per setting: ``coverage`` = share of trials whose realised recall met R when the rule stopped (reading everything
counts, with recall 1; must be ≥ C), ``coverage_when_certified`` (only the trials the certificate stopped before the
end), ``skip_share`` (spectra never read), ``labels`` (decisions spent), ``labels_lower_bound`` (the read head plus
the fewest random labels any fixed-size certificate needs at the frame the rule audited, `labels_lower_bound`, about
M·ln(1/δ)/k_target), ``sample_vs_lower_bound`` (the rule's random labels over that bound), ``oracle_labels`` (reading
down the order until recall R, knowing the truth: no certificate can do better in this order). Under ``naive``:
stopping after 50 NO decisions in a row, and trusting ``p_yes < 0.5`` (reading only ``p_yes ≥ 0.5``). Under
``score_chosen``: the same test on a "sample" of the lowest-``p_yes`` spectra instead of a random one.

Run: ``.venv/bin/python benchmarks/bench_triage.py`` (N 2,000, 20,000 and 170,000; 1,000 trials per setting: 20
minutes at ``nice`` on a loaded 2-core machine); ``--quick``: N 2,000 and 150 trials (every prevalence and
separation; under half a minute). ``by_n_prevalence`` in the JSON: per N and prevalence, the lowest coverage of the
rule, of the baselines and of the score-chosen sample, the skip shares and the labels against the lower bound.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import _kit  # noqa: F401 - puts the test kit on sys.path
import numpy as np
from scipy.stats import binom, norm

from speco3.vetting.stopping import k_target, labels_lower_bound, stop_label

#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("recall", "confidence", "trials", "settings", "worst", "seconds")

SEPARATIONS = {"good": 4.0, "medium": 2.5, "bad": 1.0}
PREVALENCES = (0.002, 0.01, 0.05, 0.1)
ROLLOUTS = 5
NAIVE_RUN = 50


def level_probs(shift: float) -> np.ndarray:
    """P(p_yes = j/5) for z ~ Normal(shift, 1), j = 0..5 (numerical integral over z)."""
    z = np.linspace(shift - 8, shift + 8, 4001)
    w = norm.pdf(z - shift)
    w /= w.sum()
    return np.array([(binom.pmf(j, ROLLOUTS, norm.cdf(z)) * w).sum() for j in range(ROLLOUTS + 1)])


def population(rng: np.random.Generator, n: int, pos: int, q_pos: np.ndarray, q_neg: np.ndarray):
    """(labels in the likely-first order, p_yes level in that order) of one simulated campaign: per ``p_yes`` level,
    highest first, its candidates and others in random order (ties broken at random)."""
    n_pos, n_neg = rng.multinomial(pos, q_pos), rng.multinomial(n - pos, q_neg)
    blocks, levels = [], []
    for lv in range(ROLLOUTS, -1, -1):
        block = np.zeros(n_pos[lv] + n_neg[lv], dtype=bool)
        block[:n_pos[lv]] = True
        rng.shuffle(block)
        blocks.append(block)
        levels.append(np.full(len(block), lv, dtype=np.int8))
    return np.concatenate(blocks), np.concatenate(levels)


def audit_start(found: np.ndarray, n: int, recall: float, confidence: float) -> tuple[int, bool]:
    """Where the policy starts the audit (head length), and whether the frame there cannot hold k_target (stop).

    The policy: read on down the order while the candidates met in the last ``max(50, N/100)`` labels, as a rate
    times the spectra left, exceed half of k_target (the frame then likely holds too many candidates for a random
    sample to rule out k_target cheaply); start the audit at the first label where they do not."""
    h = np.arange(n + 1)
    f = np.concatenate([[0], found])
    kt = np.asarray(k_target(f, f, recall))
    frame = n - h
    trivial = np.flatnonzero(kt > frame)
    window = max(NAIVE_RUN, n // 100)
    rate = np.zeros(n + 1)
    rate[window:] = (f[window:] - f[:-window]) / window
    late = np.flatnonzero((h >= window) & (rate * frame <= 0.5 * kt))
    start = int(late[0]) if late.size else n
    if trivial.size and trivial[0] <= start:
        return int(trivial[0]), True
    return start, False


def run_setting(rng, n: int, prevalence: float, sep: float, trials: int, recall: float, confidence: float) -> dict:
    pos = max(1, round(prevalence * n))
    q_pos, q_neg = level_probs(sep / 2), level_probs(-sep / 2)
    rec, labels, lb, oracle, certified, cert_ok = [], [], [], [], [], []
    ratio = []
    naive_run, naive_trust, chosen = ([], []), ([], []), []
    for _ in range(trials):
        lab, lev = population(rng, n, pos, q_pos, q_neg)
        found = np.cumsum(lab)
        h, trivial = audit_start(found, n, recall, confidence)
        f_out = int(found[h - 1]) if h else 0
        frame, left = n - h, pos - (int(found[h - 1]) if h else 0)
        oracle.append(int(np.searchsorted(found, math.ceil(recall * pos - 1e-9))) + 1)
        if trivial or frame == 0:
            used, c = 0, 0
        else:
            hits = np.sort(rng.choice(frame, size=left, replace=False)) + 1 if left else np.zeros(0, int)
            used, c = stop_label(frame, f_out, hits, recall, confidence)
            bound = int(labels_lower_bound(frame, f_out, f_out, recall, confidence))
            lb.append(h + bound)
            if bound:
                ratio.append(used / bound)
            # the same test on the lowest-p_yes spectra (the end of the order) instead of a random sample
            tail = np.flatnonzero(lab[h:][::-1]) + 1
            u2, c2 = stop_label(frame, f_out, tail, recall, confidence)
            chosen.append((f_out + c2) / pos >= recall - 1e-12 or u2 >= frame)
        r = 1.0 if used >= frame else (f_out + c) / pos
        rec.append(r >= recall - 1e-12)
        labels.append(h + used)
        stopped_early = used < frame
        certified.append(stopped_early)
        if stopped_early:
            cert_ok.append(r >= recall - 1e-12)
        # naive 1: stop after 50 NO in a row (down the order)
        idx = np.flatnonzero(lab)
        before = np.concatenate([[-1], idx])
        gaps = np.concatenate([idx, [n]]) - before - 1
        long = np.flatnonzero(gaps >= NAIVE_RUN)
        stop = int(before[long[0]]) + 1 + NAIVE_RUN if long.size else n
        naive_run[0].append((found[stop - 1] / pos) >= recall - 1e-12)
        naive_run[1].append(stop)
        # naive 2: trust p_yes < 0.5 (read p_yes >= 0.5 only)
        read = int(np.sum(lev >= 3))
        naive_trust[0].append((found[read - 1] if read else 0) / pos >= recall - 1e-12)
        naive_trust[1].append(read)
    out = {
        "n": n, "prevalence": prevalence, "separation": sep, "candidates": pos,
        "coverage": float(np.mean(rec)), "coverage_when_certified": float(np.mean(cert_ok)) if cert_ok else None,
        "certified_share": float(np.mean(certified)),
        "skip_share": float(1 - np.mean(labels) / n), "labels": float(np.mean(labels)),
        "labels_lower_bound": float(np.mean(lb)) if lb else None,
        "sample_vs_lower_bound": float(np.mean(ratio)) if ratio else None,
        "oracle_labels": float(np.mean(oracle)),
        "naive": {
            "no_run_50": {"coverage": float(np.mean(naive_run[0])), "labels": float(np.mean(naive_run[1])),
                          "skip_share": float(1 - np.mean(naive_run[1]) / n)},
            "trust_p_yes_below_half": {"coverage": float(np.mean(naive_trust[0])),
                                       "labels": float(np.mean(naive_trust[1])),
                                       "skip_share": float(1 - np.mean(naive_trust[1]) / n)},
        },
        "score_chosen": {"coverage": float(np.mean(chosen)) if chosen else None},
    }
    return out


def by_n_prevalence(settings: list[dict]) -> list[dict]:
    """Per N and prevalence, over the score separations: the lowest coverage (the rule's, and the baselines' and the
    score-chosen sample's), the range of skip shares, and the rule's labels against the lower bound."""
    out = []
    for n, prev in dict.fromkeys((s["n"], s["prevalence"]) for s in settings):
        group = [s for s in settings if (s["n"], s["prevalence"]) == (n, prev)]
        chosen = [s["score_chosen"]["coverage"] for s in group if s["score_chosen"]["coverage"] is not None]
        ratios = [s["sample_vs_lower_bound"] for s in group if s["sample_vs_lower_bound"]]
        out.append({
            "n": n, "prevalence": prev,
            "coverage_min": min(s["coverage"] for s in group),
            "skip_share": [min(s["skip_share"] for s in group), max(s["skip_share"] for s in group)],
            "labels": [s["labels"] for s in group],
            "labels_lower_bound": [s["labels_lower_bound"] for s in group],
            "sample_vs_lower_bound": [min(ratios), max(ratios)] if ratios else None,
            "naive_no_run_50_coverage_min": min(s["naive"]["no_run_50"]["coverage"] for s in group),
            "naive_trust_p_yes_below_half_coverage_min": min(s["naive"]["trust_p_yes_below_half"]["coverage"]
                                                             for s in group),
            "score_chosen_coverage_min": min(chosen) if chosen else None,
        })
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--quick", action="store_true", help="N 2,000 and 150 trials per setting (a few minutes)")
    p.add_argument("--json", action="store_true", help="print the JSON only (no table on stderr)")
    p.add_argument("--n", type=int, nargs="+", help="population sizes (default 2000 20000 170000)")
    p.add_argument("--trials", type=int, help="trials per setting (default 1000; --quick 150)")
    p.add_argument("--recall", type=float, default=0.9)
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sizes = args.n or ([2000] if args.quick else [2000, 20000, 170000])
    trials = args.trials or (150 if args.quick else 1000)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    settings = []
    for n in sizes:
        for prev in PREVALENCES:
            for name, sep in SEPARATIONS.items():
                s = run_setting(rng, n, prev, sep, trials, args.recall, args.confidence)
                s["separation_name"] = name
                settings.append(s)
                if not args.json:
                    nv = s["naive"]
                    print(f"N={n:>6} prev={prev:<5} {name:6} coverage {s['coverage']:.3f} skip {s['skip_share']:.3f} "
                          f"labels {s['labels']:9.1f} (lower bound {s['labels_lower_bound'] or 0:9.1f}, oracle "
                          f"{s['oracle_labels']:9.1f}) | 50-NO {nv['no_run_50']['coverage']:.3f} "
                          f"p<0.5 {nv['trust_p_yes_below_half']['coverage']:.3f} | score-chosen "
                          f"{s['score_chosen']['coverage'] if s['score_chosen']['coverage'] is not None else '-'}",
                          file=sys.stderr, flush=True)
    ratios = [s["sample_vs_lower_bound"] for s in settings if s["sample_vs_lower_bound"]]
    worst = {
        "coverage": min(s["coverage"] for s in settings),
        "coverage_when_certified": min((s["coverage_when_certified"] for s in settings
                                        if s["coverage_when_certified"] is not None), default=None),
        "naive_no_run_50": min(s["naive"]["no_run_50"]["coverage"] for s in settings),
        "naive_trust_p_yes_below_half": min(s["naive"]["trust_p_yes_below_half"]["coverage"] for s in settings),
        "score_chosen": min((s["score_chosen"]["coverage"] for s in settings
                             if s["score_chosen"]["coverage"] is not None), default=None),
        "sample_vs_lower_bound_median": float(np.median(ratios)) if ratios else None,
    }
    report = {"recall": args.recall, "confidence": args.confidence, "trials": trials, "sizes": sizes,
              "settings": settings, "worst": worst, "by_n_prevalence": by_n_prevalence(settings),
              "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

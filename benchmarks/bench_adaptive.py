"""Benchmark: adaptive rollouts (``--rollouts auto``) against a fixed group of 8 on synthetic populations.

Each synthetic spectrum is *clear* or *hard*. It has a true answer (YES or NO, half each) and a per-rollout
agreement ``a`` (``--clear-agreement``, ``--hard-agreement``): the chance that one sampled rollout gives the true
answer. How that chance shows in the verdict token is the second parameter: rollout i follows a reasoning path whose
probability on the true answer at the verdict token is ``t_i ~ Beta(kappa·a, kappa·(1−a))`` (mean ``a``), and it
writes the true answer with probability ``t_i``; ``kappa`` large (``--kappa``, 20) means doubt shows in hesitant
verdict tokens, ``kappa`` 2 means every path is sure of itself and the doubt is only across paths (the token
probability then says little). A rollout fails to answer with probability ``--failures`` (clear) or twice that
(hard). Every rollout's outcome and token probability are fixed by the spectrum's seed, so rollout i is the same
whether 2 or 8 run.

For every spectrum the real runner (`speco3.agent.rollouts.run_group`) runs ``RolloutPlan.auto()`` on a
`ScriptedEngine` that replays those outcomes, with the scripted log-probabilities, through the real agent loop
(the images are a fixed small picture: the scripted model does not look). The decision of the fixed group of 8 is
folded from the same 8 scripted outcomes (`aggregate_outcomes`; the first spectra are also run with the runner at
K=8 as a check). Reported per population: mean rollouts per spectrum, stop reasons, how often auto's decision
(YES / NO / abstain) differs from K=8's, how often its (majority verdict, abstained) pair differs, abstention and
wrong-verdict rates of both, and the mean cost.

Cost (in units of one greedy verdict, K=1): a model of the 7B CPU measurement in docs/design.md, not a wall time
of this run — ``cost(k, rounds) = 1 + 0.384·(k − 1) + 0.070·(rounds − 1)``. 0.384 per extra rollout is the fit
to the measured K=1 (163.4 s) and K=4 with four distinct windows (351.6 s, 2.15×) wall times: each extra rollout
pays its own zoom turn (encoder + prefill, compute-bound) and its share of the batched decode, the prefix is
paid once; a later round also waits for its own decode steps (2 turns × 16 tokens, about 11.4 s = 163.4 − 100 s
prefix − 52 s zoom turn: 0.070). ``rollouts_mean`` is the cruder count (each rollout a whole verdict).

Run: ``.venv/bin/python benchmarks/bench_adaptive.py`` (300 spectra per population); ``--quick``: 12.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path
from PIL import Image

from speco3.agent.adaptive import AdaptiveRule, of_confidence
from speco3.agent.confidence import aggregate, aggregate_outcomes
from speco3.agent.rollouts import RolloutPlan, run_group
from speco3.engine.base import EngineSettings, Sampling
from speco3.engine.scripted import ScriptedEngine
from speco3_testkit.spectra import make_spectrum

#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("cost_model", "populations", "lone", "tradeoff", "goal")

K_FIXED = 8
EXTRA_ROLLOUT = 0.384  # (351.6 / 163.4 − 1) / 3: one more rollout at 7B, in K=1 wall times
EXTRA_ROUND = 0.070  # 11.4 s of decode per round / 163.4 s
ANSWER = {"YES": "<think>the lines say so</think><answer>\\boxed{YES}</answer>",
          "NO": "<think>nothing there</think><answer>\\boxed{NO}</answer>"}
NO_ANSWER = "<think>I cannot tell what this is"


def cost(k: int, rounds: int) -> float:
    return 1.0 + EXTRA_ROLLOUT * (k - 1) + EXTRA_ROUND * (rounds - 1)


PlanCost = Callable[[int, int], float]


def measured_cost(check: list[dict]) -> PlanCost:
    """A plan's cost (k rollouts in ``rounds`` rounds, in K=1 wall times) from measured runs: ``check`` is
    `bench_parallel.py --auto --sections rollouts`'s ``cost_model_check`` (each run's k, rounds and wall_over_k1).
    A measured plan costs what it measured; any other plan the model's cost times the measured/model ratio,
    interpolated linearly in k between the measured plans (1 at k = 1) and held beyond the last."""
    exact = {(r["k"], r["rounds"]): r["wall_over_k1"] for r in check}
    ratio = sorted({1: 1.0, **{r["k"]: r["wall_over_k1"] / r["model"] for r in check
                               if r["rounds"] == max(1, r["k"] // 2)}}.items())  # the default rule's plans

    def plan_cost(k: int, rounds: int) -> float:
        if (k, rounds) in exact or k == 1 and rounds == 1:
            return exact.get((k, rounds), 1.0)
        ks, fs = [a for a, _ in ratio], [b for _, b in ratio]
        f = fs[-1] if k >= ks[-1] else next(fs[i] + (fs[i + 1] - fs[i]) * (k - ks[i]) / (ks[i + 1] - ks[i])
                                             for i in range(len(ks) - 1) if ks[i] <= k <= ks[i + 1])
        return cost(k, rounds) * f

    return plan_cost


@dataclass(frozen=True)
class Population:
    clear_share: float
    clear_agreement: float
    hard_agreement: float
    kappa: float
    failures: float
    logprobs: bool = True


def spectrum_rollouts(rng: random.Random, truth: str, a: float, kappa: float, fail: float):
    """(outcome, probability on the written answer) of rollouts 0..7 of one spectrum."""
    other = "NO" if truth == "YES" else "YES"
    out = []
    for _ in range(K_FIXED):
        t = min(1 - 1e-6, max(1e-6, rng.betavariate(kappa * a, kappa * (1 - a))))
        if rng.random() < fail:
            out.append(("format_error", None))
        elif rng.random() < t:
            out.append((truth, t))
        else:
            out.append((other, 1 - t))
    return out


def engine_for(rollouts, logprobs: bool) -> ScriptedEngine:
    scripts = [[ANSWER.get(o, NO_ANSWER)] for o, _ in rollouts]

    def alternatives(piece: str, sampling: Sampling):
        outcome, p = rollouts[sampling.seed % K_FIXED]
        if piece != outcome or p is None:
            return None
        return [[piece, p], ["NO" if piece == "YES" else "YES", max(1e-9, 1 - p)]]

    return ScriptedEngine(scripts=scripts, select="seed", alternatives=alternatives,
                          settings=EngineSettings(top_logprobs=2 if logprobs else 0))


def run_population(pop: Population, n: int, rule: AdaptiveRule, seed: int, checks: int,
                   plan_cost: PlanCost = cost) -> dict:
    rng = random.Random(seed)
    png = io.BytesIO()
    Image.new("RGB", (112, 112), "white").save(png, "PNG")
    image = png.getvalue()
    spectrum = make_spectrum()
    stats = Counter()
    stops: Counter = Counter()
    plans: Counter = Counter()
    ks, costs = [], []
    kind_cost = {"clear": 0.0, "hard": 0.0}
    t0 = time.perf_counter()
    for i in range(n):
        clear = rng.random() < pop.clear_share
        truth = rng.choice(("YES", "NO"))
        a = pop.clear_agreement if clear else pop.hard_agreement
        rollouts = spectrum_rollouts(rng, truth, a, pop.kappa, pop.failures * (1 if clear else 2))
        group = run_group(engine_for(rollouts, pop.logprobs), spectrum, "is it?", lambda view: image,
                          RolloutPlan.auto(rule))
        auto = aggregate([s[-1] for s in group.steps])
        full = aggregate_outcomes([o for o, _ in rollouts], [p if o == "YES" else None if p is None else 1 - p
                                                             for o, p in rollouts])
        if i < checks:  # the fold of the scripted outcomes is what the runner gives at K=8
            fixed = run_group(engine_for(rollouts, pop.logprobs), spectrum, "is it?", lambda view: image,
                              RolloutPlan(k=K_FIXED))
            assert aggregate([s[-1] for s in fixed.steps]).outcomes == full.outcomes
        ks.append(group.k_used)
        costs.append(plan_cost(group.k_used, group.rounds))
        plans[f"{group.k_used}/{group.rounds}"] += 1
        stops[group.stop_reason] += 1
        kind = "clear" if clear else "hard"
        stats[kind] += 1
        kind_cost[kind] += costs[-1]
        stats["alone"] += group.k_used == 1
        if of_confidence(auto) != of_confidence(full):
            stats["differs"] += 1
            stats[f"differs_{kind}"] += 1
        if (auto.verdict, auto.abstained) != (full.verdict, full.abstained):
            stats["pair_differs"] += 1
        stats["auto_abstained"] += of_confidence(auto) == "abstain"
        stats["k8_abstained"] += of_confidence(full) == "abstain"
        stats["auto_wrong"] += of_confidence(auto) not in ("abstain", truth)
        stats["k8_wrong"] += of_confidence(full) not in ("abstain", truth)
    return {
        "clear_share": pop.clear_share, "clear_agreement": pop.clear_agreement, "hard_agreement": pop.hard_agreement,
        "kappa": pop.kappa, "failures": pop.failures, "logprobs": pop.logprobs, "spectra": n,
        "rollouts_mean": round(sum(ks) / n, 3), "cost_mean": round(sum(costs) / n, 3),
        "cost_k8": round(plan_cost(K_FIXED, 1), 3),
        "cost_clear": round(kind_cost["clear"] / max(1, stats["clear"]), 3),
        "cost_hard": round(kind_cost["hard"] / max(1, stats["hard"]), 3),
        "stopped_at_one": round(stats["alone"] / n, 4),
        "differs_share": round(stats["differs"] / n, 4), "pair_differs_share": round(stats["pair_differs"] / n, 4),
        "differs_clear": stats["differs_clear"], "differs_hard": stats["differs_hard"],
        "clear": stats["clear"], "hard": stats["hard"],
        "abstained_auto": round(stats["auto_abstained"] / n, 4), "abstained_k8": round(stats["k8_abstained"] / n, 4),
        "wrong_auto": round(stats["auto_wrong"] / n, 4), "wrong_k8": round(stats["k8_wrong"] / n, 4),
        "stops": dict(sorted(stops.items())), "plans": dict(sorted(plans.items())), "seconds": round(time.perf_counter() - t0, 2),
    }


def _table(rows: list[dict], title: str) -> str:
    head = (f"{title}\n clear  a_clear a_hard kappa logp | rollouts  cost  (K=8 cost) clear/hard | differs  pair  "
            f"(clear/hard)  | abst auto/K8  wrong auto/K8 | stops")
    lines = [head]
    for r in rows:
        lines.append(
            f" {r['clear_share']:4.0%}   {r['clear_agreement']:.2f}   {r['hard_agreement']:.2f}  {r['kappa']:4g}  "
            f"{'y' if r['logprobs'] else 'n'}   | {r['rollouts_mean']:5.2f}  {r['cost_mean']:5.2f}  ({r['cost_k8']:.2f})"
            f"  {r['cost_clear']:.2f}/{r['cost_hard']:.2f} | {r['differs_share']:6.1%} {r['pair_differs_share']:6.1%} ({r['differs_clear']}/"
            f"{r['differs_hard']})  | {r['abstained_auto']:5.1%}/{r['abstained_k8']:5.1%} {r['wrong_auto']:5.1%}/{r['wrong_k8']:5.1%}"
            f" | {', '.join(f'{k} {v}' for k, v in r['stops'].items())}" + (f" [{r['rule']}]" if "rule" in r else ""))
    return "\n".join(lines)


#: The first-round bars for a lone rollout tried with ``k_min`` 1 (`AdaptiveRule.min_token_alone`).
LONE_BARS = (0.97, 0.98, 0.99)
GOAL_SHARE, GOAL_COST, GOAL_DIFFERS = 0.7, 1.5, 0.02


def population_report(n: int, clear_agreement: float = 0.97, hard_agreements=(0.7, 0.85), kappas=(20.0, 2.0),
                      failures: float = 0.02, seed: int = 0, lone_bars=LONE_BARS,
                      plan_cost: PlanCost = cost, measured: list[dict] | None = None) -> dict:
    """The benchmark's figures (also ``bench_parallel.py --auto``): ``populations`` under the default rule,
    ``lone`` (a first round of one rollout, `AdaptiveRule` ``k_min`` 1, at each bar in ``lone_bars``), ``tradeoff``
    (other settings at 70 % clear), ``goal`` (which rows meet it, and its ``floor``: the cost if every clear spectrum
    cost one greedy verdict and the hard ones what the default rule spends on them), and ``tables`` (the text)."""
    rule = AdaptiveRule()
    rows, lone = [], []
    for share in (0.5, 0.7, 0.9):
        for hard in hard_agreements:
            for kappa in kappas:
                pop = Population(share, clear_agreement, hard, kappa, failures)
                rows.append(run_population(pop, n, rule, seed, checks=3, plan_cost=plan_cost))
                for bar in lone_bars:
                    lone.append({"rule": f"k_min 1, alone {bar:g}",
                                 **run_population(pop, n, AdaptiveRule(k_min=1, min_token_alone=bar), seed, checks=0, plan_cost=plan_cost)})
        rows.append(run_population(Population(share, clear_agreement, hard_agreements[0], kappas[0], failures,
                                              logprobs=False), n, rule, seed, checks=0, plan_cost=plan_cost))
        print(f"{time.strftime('%H:%M:%S')} clear share {share:.0%} done", file=sys.stderr, flush=True)
    base = Population(GOAL_SHARE, clear_agreement, hard_agreements[0], kappas[0], failures)
    tradeoff = []
    for label, r in (("default", rule), ("max_change 0.01", AdaptiveRule(max_change=0.01)),
                     ("max_change 0.2", AdaptiveRule(max_change=0.2)), ("min_token 0.99", AdaptiveRule(min_token=0.99)),
                     ("k_min 1, alone 0.9", AdaptiveRule(k_min=1, min_token_alone=0.9)),
                     ("k_min 1, step 1", AdaptiveRule(k_min=1, step=1))):
        tradeoff.append({"rule": label, **run_population(base, n, r, seed, checks=0, plan_cost=plan_cost)})
    keys = ("hard_agreement", "kappa", "cost_mean", "differs_share")
    at_goal = [r for r in rows + lone if r["clear_share"] == GOAL_SHARE and r["logprobs"]]
    goal = {"target": "70 % clear: mean cost <= 1.5 x one greedy verdict, <= 2 % of decisions different from K=8",
            "met_by": [{"rule": r.get("rule", "default"), **{k: r[k] for k in keys}} for r in at_goal
                       if r["cost_mean"] <= GOAL_COST and r["differs_share"] <= GOAL_DIFFERS],
            "floor": [{**{k: r[k] for k in keys[:2]}, "cost_hard": r["cost_hard"],
                       "floor": round(GOAL_SHARE + (1 - GOAL_SHARE) * r["cost_hard"], 3)}
                      for r in at_goal if "rule" not in r],
            "rows": len(at_goal)}
    tables = [_table(rows, "populations (rule: defaults)"),
              _table(lone, "a first round of one rollout (k_min 1), agreed alone only at the given token bar"),
              _table(tradeoff, f"tradeoff at 70 % clear, a_hard {base.hard_agreement:.2f}, kappa {base.kappa:g}, "
                     "rules: " + ", ".join(t["rule"] for t in tradeoff)),
              "goal floor at 70 % clear (every clear spectrum at cost 1, the hard ones as the default rule spends): "
              + ", ".join(f"a_hard {f['hard_agreement']:.2f} kappa {f['kappa']:g}: {f['floor']:.2f}"
                          for f in goal["floor"])]
    model = {"extra_rollout": EXTRA_ROLLOUT, "extra_round": EXTRA_ROUND,
             "unit": "one greedy verdict (K=1) at 7B on the 2-core CPU of docs/design.md"}
    if measured is not None:
        model = {"measured": measured, "unit": "one greedy verdict (K=1), wall times of the bench_parallel.py run given "
                 "(other plans: the model's cost times the measured/model ratio interpolated in k)"}
    return {"cost_model": {**model, "k8": round(plan_cost(K_FIXED, 1), 3), "k2_one_round": round(plan_cost(2, 1), 3),
                           "k1_then_k2": round(plan_cost(2, 2), 3)},
            "populations": rows, "lone": lone, "tradeoff": tradeoff, "goal": goal, "tables": tables}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--quick", action="store_true", help="12 spectra per population (seconds)")
    p.add_argument("--spectra", type=int, default=300, help="spectra per population")
    p.add_argument("--clear-agreement", type=float, default=0.97)
    p.add_argument("--hard-agreement", type=float, nargs="+", default=[0.7, 0.85])
    p.add_argument("--kappa", type=float, nargs="+", default=[20.0, 2.0])
    p.add_argument("--failures", type=float, default=0.02)
    p.add_argument("--lone-bars", type=float, nargs="*", default=list(LONE_BARS),
                   help="token bars of a lone first rollout to try (k_min 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--measured", metavar="JSON",
                   help="cost each plan from measured wall times instead of the cost model: the JSON report of "
                        "bench_parallel.py --auto --sections rollouts (its auto.cost_model_check)")
    args = p.parse_args(argv)
    measured = json.loads(Path(args.measured).read_text())["auto"]["cost_model_check"] if args.measured else None
    report = population_report(12 if args.quick else args.spectra, args.clear_agreement, args.hard_agreement,
                               args.kappa, args.failures, args.seed, args.lone_bars,
                               plan_cost=measured_cost(measured) if measured else cost, measured=measured)
    for table in report.pop("tables"):
        print(table, file=sys.stderr)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

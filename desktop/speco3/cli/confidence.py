"""The model's confidence from the command line: ``--rollouts K`` of ``inspect`` and ``vet``, and ``spec-o3 queue``.

- ``inspect FILE --task cv --rollouts K [--temperature T --seed S] [--json]`` runs K sampled episodes (rollout i
  with seed ``S+i``) and reports ``p_yes`` (share of YES among the rollouts that answered), ``p_yes_token`` (mean
  probability the model put on YES at its verdict token, when the engine records log-probabilities), the K
  outcomes, the agreement, format failures and whether it abstains (``--min-agreement``, ``--min-answered``).
  Each rollout's trace goes to ``OUT/r00``, ``OUT/r01`` …, the fold to ``OUT/confidence.json``. K=1 without
  ``--temperature`` is the paper's greedy evaluation, unchanged.
- ``--rollouts auto [--max-rollouts N]`` runs them in rounds (`speco3.agent.adaptive`): 2 first, more only while
  the decision is not settled, up to N (default 8); ``k_used``, ``k_max`` and ``stop_reason`` say how it ended.
- ``vet … --rollouts K`` does the same for every spectrum of an archive and stores every rollout.
- ``queue STORE [--order p_yes|uncertainty|queue] [--abstained]`` lists the screened spectra for triage: likely
  positives first, or the most uncertain first, optionally only those where the model abstained.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from speco3.errors import Speco3Error

#: Alternatives recorded per generated token when K > 1 (for the probability on YES at the verdict token).
DEFAULT_TOP_LOGPROBS = 5


def rollout_options(p) -> None:
    """The ``--rollouts`` options shared by ``inspect`` and ``vet``."""
    from speco3.agent.adaptive import DEFAULT_K_MAX
    from speco3.agent.confidence import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_ANSWERED

    g = p.add_argument_group("confidence (K sampled rollouts per spectrum)")
    g.add_argument("--rollouts", type=rollouts_arg, default=1, metavar="K|auto",
                   help="sampled episodes per spectrum (default 1: one greedy run, the paper's evaluation); 'auto': "
                   "2, then more only while the decision is not settled, up to --max-rollouts")
    g.add_argument("--max-rollouts", type=int, default=DEFAULT_K_MAX, metavar="N",
                   help=f"the budget of --rollouts auto (default {DEFAULT_K_MAX}, the training group size)")
    g.add_argument("--temperature", type=float,
                   help="sampling temperature (default: 0 for K=1, 1.0 — the training temperature — for K>1)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1: off)")
    g.add_argument("--seed", type=int, default=0, help="seed of the first rollout; rollout i uses SEED+i")
    g.add_argument("--min-agreement", type=float, default=DEFAULT_MIN_AGREEMENT,
                   help=f"abstain when fewer of the answered rollouts back the majority (default {DEFAULT_MIN_AGREEMENT})")
    g.add_argument("--min-answered", type=float, default=DEFAULT_MIN_ANSWERED,
                   help=f"abstain when fewer of all rollouts answered (default {DEFAULT_MIN_ANSWERED})")
    g.add_argument("--top-logprobs", type=int,
                   help=f"alternatives recorded per token (default {DEFAULT_TOP_LOGPROBS} for K>1, else 0)")


AUTO = "auto"


def rollouts_arg(text: str) -> int | str:
    """``--rollouts``: a whole number K, or ``auto``."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of rollouts or 'auto', got {text!r}") from None


def top_logprobs(args) -> int:
    """How many alternatives the engine should record per token for these options."""
    n = getattr(args, "top_logprobs", None)
    if n is None:
        k = getattr(args, "rollouts", 1)
        return DEFAULT_TOP_LOGPROBS if k == AUTO or k > 1 else 0
    if n < 0:
        raise Speco3Error(f"--top-logprobs must be 0 or more, got {n}")
    return n


def plan_and_thresholds(args):
    """(`RolloutPlan` or None for the engine's own greedy run, `Thresholds`) of the options."""
    from speco3.agent.adaptive import AdaptiveRule
    from speco3.agent.confidence import Thresholds
    from speco3.agent.rollouts import RolloutPlan

    if args.rollouts == AUTO:
        if args.max_rollouts < 1:
            raise Speco3Error(f"--max-rollouts must be at least 1, got {args.max_rollouts}")
        try:
            plan = RolloutPlan.auto(AdaptiveRule(k_max=args.max_rollouts, k_min=min(2, args.max_rollouts)),
                                    args.temperature, args.top_p, 0, args.seed)
            plan.samplings()
            return plan, Thresholds(args.min_agreement, args.min_answered)
        except ValueError as exc:
            raise Speco3Error(str(exc).replace("k_max", "--max-rollouts").replace("min_", "--min-")) from exc
    if args.rollouts < 1:
        raise Speco3Error(f"--rollouts must be at least 1, got {args.rollouts}")
    try:
        thresholds = Thresholds(args.min_agreement, args.min_answered)
        if args.rollouts == 1 and args.temperature is None and args.seed == 0 and args.top_p == 1.0:
            return None, thresholds
        plan = RolloutPlan(args.rollouts, args.temperature, args.top_p, 0, args.seed)
        plan.samplings()  # checks K and the temperature
    except ValueError as exc:
        raise Speco3Error(str(exc).replace("min_", "--min-")) from exc
    return plan, thresholds


def _window(w) -> str:
    lo, hi, label = (list(w) + [None] * 3)[:3]
    rng = f"{lo:g}–{hi:g} Å" if lo is not None and hi is not None else "?"
    return rng + (f" {label}" if label else "")


def confidence_report(conf, records, run) -> dict:
    """The ``--json`` fields: the fold plus one entry per rollout."""
    return {**conf.to_dict(), "k_used": conf.k, "k_max": run.k_max, "stop_reason": run.stop_reason,
            "uncertainty": conf.uncertainty, "abstain_reason": conf.abstain_reason or None,
            "rollout_details": [{k: v for k, v in r.to_dict().items() if k != "verdict_id"} for r in records]}


def cmd_inspect_rollouts(args, task, spectrum, engine, render, out: Path) -> int:
    """``inspect`` with ``--rollouts K`` or ``--json`` (see module doc); the engine is closed here."""
    from speco3.agent import MAX_TURNS, VerdictStep
    from speco3.cli.agent import EXIT_INTERRUPTED, EXIT_NO_VERDICT, sigint_cancels
    from speco3.fileio import write_text_atomic
    from speco3.vetting.rollout_runs import engine_plan, log_fold, run_traced, save_rollouts

    plan, thresholds = plan_and_thresholds(args)
    plan = plan or engine_plan(engine)
    say = sys.stderr if args.json else sys.stdout
    stream = None
    if plan.k == 1 and not (args.quiet or args.json):
        stream = lambda piece: (sys.stdout.write(piece), sys.stdout.flush())  # noqa: E731
    samplings = plan.samplings()

    def on_step(i: int, step) -> None:
        if isinstance(step, VerdictStep):
            print(f"rollout {i + 1}/{plan.k} (seed {samplings[i].seed}, T={samplings[i].temperature:g}): "
                  f"{step.verdict or step.outcome.value} — {step.turns} turns, {step.zooms} zooms"
                  + (f", P(YES) {step.p_yes_token:.2f}" if step.p_yes_token is not None else "")
                  + (f" [{step.detail}]" if not step.outcome.has_verdict and step.detail else ""),
                  file=say, flush=True)

    cancel = threading.Event()
    print(f"{spectrum.name} · task {task.id} ({task.target_class}) · model {engine.info.model_id} · "
          + (f"up to {plan.k} rollouts (auto)" if plan.adaptive else f"{plan.k} rollout{'s' if plan.k > 1 else ''}"),
          file=say, flush=True)
    try:
        with sigint_cancels(cancel):
            run = run_traced(engine, spectrum, task, render, plan, cancel=cancel, on_step=on_step, on_token=stream,
                             thresholds=thresholds,
                             max_turns=MAX_TURNS if args.max_turns is None else args.max_turns)
    finally:
        engine.close()
    records = save_rollouts(run, out)
    conf = run.confidence(thresholds)
    log_fold(spectrum.name, task.id, conf)
    report = {"spectrum": spectrum.name, "task": task.id, "model_id": engine.info.model_id, "trace": str(out),
              **confidence_report(conf, records, run)}
    write_text_atomic(out / "confidence.json", json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for r in records:
            print(f"  rollout {r.idx + 1}: {r.verdict or r.outcome}; windows: "
                  f"{', '.join(_window(w) for w in r.windows) or 'none'}")
        p = "—" if conf.p_yes is None else f"{conf.p_yes:.2f}"
        tok = "" if conf.p_yes_token is None else f", mean P(YES) at the answer token {conf.p_yes_token:.2f}"
        agree = "—" if conf.agreement is None else f"{conf.agreement:.2f}"
        print(f"\ntrace: {out}\nVerdict: {conf.verdict or 'none'} ({task.target_class}) — p_yes {p} "
              f"({conf.yes} YES / {conf.no} NO of {conf.k}{tok}), agreement {agree}, "
              f"{conf.format_failures} format failures"
              + (f"; {conf.k} of up to {run.k_max} rollouts ({run.stop_reason})" if plan.adaptive else "")
              + (f" — ABSTAINED ({conf.abstain_reason})" if conf.abstained else ""))
    if run.cancelled:
        return EXIT_INTERRUPTED
    return 0 if conf.verdict else EXIT_NO_VERDICT


# -- queue ------------------------------------------------------------------------------------------------------
def register(sub) -> None:
    from speco3.vetting.triage import ORDERS

    q = sub.add_parser("queue", help="list screened spectra for triage by the model's confidence",
                       description="The vetting queue of a store, ordered by the model's confidence: 'p_yes' puts "
                       "likely positives first, 'uncertainty' the spectra with p_yes closest to 0.5 first, 'queue' "
                       "keeps the store's order. Spectra without p_yes go last.")
    q.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    q.add_argument("--task", help="only this task")
    q.add_argument("--order", choices=ORDERS, default="p_yes")
    q.add_argument("--abstained", action="store_true", help="only spectra where the model abstained")
    q.add_argument("--undecided", action="store_true", help="only spectra without a human decision")
    q.add_argument("--limit", type=int, help="at most N rows")
    q.add_argument("--json", action="store_true", help="print the rows as JSON")
    q.set_defaults(func=cmd_queue)


def _queue_json(row: dict) -> dict:
    """A queue row for ``--json``: the stored fields plus ``uncertainty`` and why the model abstained."""
    from speco3.agent.confidence import abstain_reason, uncertainty
    from speco3.vetting.triage import QUEUE_FIELDS

    out = {k: row.get(k) for k in QUEUE_FIELDS}
    outcomes = row.get("rollout_outcomes") or []
    out["uncertainty"] = uncertainty(row.get("p_yes"))
    out["abstain_reason"] = (abstain_reason(len(outcomes), outcomes.count("YES"), outcomes.count("NO"))
                             if row.get("abstained") and outcomes else None)
    return out


def cmd_queue(args) -> int:
    from speco3.vetting import VettingStore
    from speco3.vetting.triage import queue_rows

    with VettingStore(args.store, readonly=True) as store:
        rows = queue_rows(store, args.task, args.order, abstained_only=args.abstained,
                          undecided_only=args.undecided, limit=args.limit)
    if args.json:
        print(json.dumps([_queue_json(r) for r in rows], indent=1))
        return 0
    model = [str(r.get("model_verdict") or r.get("model_outcome") or "-") for r in rows]
    human = [str(r.get("decision") or "-") for r in rows]
    wm, wh = max([5, *map(len, model)]), max([5, *map(len, human)])  # outcomes such as no_answer are wider
    print(f"{'p_yes':>5} {'K':>2} {'agree':>5} {'':3} {'model':{wm}} {'human':{wh}} spectrum")
    for r, m, h in zip(rows, model, human, strict=True):
        p = "  —  " if r.get("p_yes") is None else f"{r['p_yes']:5.2f}"
        agree = "  —  " if r.get("agreement") is None else f"{r['agreement']:5.2f}"
        print(f"{p} {r.get('rollouts') or 1:>2} {agree} {'ABS' if r.get('abstained') else '':3} "
              f"{m:{wm}} {h:{wh}} {r['spectrum_key']} ({r['task']})")
    return 0

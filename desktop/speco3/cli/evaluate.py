"""``spec-o3 evaluate``: how well a local model build performs, on SpecVI-Bench or against your own decisions.

- ``evaluate BENCH.parquet [--model NAME | --text T --mmproj M] [--tasks cv,wd] [--limit N] [--out DIR] [--json]``
  runs the agent on the benchmark's items (resumable: the run store ``DIR/run.sqlite`` keeps every verdict; run the
  same command again to continue), with a progress bar and ETA on stderr; Ctrl-C stops cleanly.
- ``evaluate results.sqlite`` scores the model verdicts of a vetting store against the human decisions in it.
- ``evaluate BENCH.parquet --compare A B …`` runs the same items with several builds (model names, or
  ``TEXT.gguf,MMPROJ.gguf`` pairs) and reports agreement, F1 deltas and a first-turn KL / top-1 check against
  the most precise build (``DIR/<build>/`` holds each build's run).
- ``--rollouts K`` samples K rollouts per item (calibration figures); ``--rollouts auto [--max-rollouts N]`` runs them
  in rounds while the decision is not settled (`speco3.agent.adaptive`), and the summary gives the mean rollouts
  per item and why they stopped (``rollouts_used``).

Outputs in ``--out``: ``summary.json``, ``items.csv``, ``report.html``; ``--json`` prints the summary on stdout.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

from speco3.agent.settings import RunSettings
from speco3.agent.tasks import Task, load_tasks
from speco3.cli.options import (
    EXIT_INTERRUPTED,
    fill_model_digests,
    model_options,
    open_cli_engine,
    renderer,
    rollout_options,
    run_settings,
    sigint_cancels,
)
from speco3.cli.progress import ProgressBar
from speco3.engine.base import Engine
from speco3.errors import Speco3Error


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="score a model build on SpecVI-Bench or on your own decisions",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=_raw())
    p.add_argument("source", metavar="BENCH.parquet|STORE.sqlite")
    p.add_argument("--tasks", help="comma-separated task ids (default: all)")
    p.add_argument("--limit", type=int, help="at most N items per task (a quick look)")
    p.add_argument("--out", metavar="DIR", help="run folder (default: ./spec-o3-eval-<bench>)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--compare", nargs="+", metavar="BUILD", help="builds to compare (names or TEXT,MMPROJ pairs; "
                   "BUILD+ADAPTER.gguf[:SCALE]: that build with a LoRA adapter)")
    p.add_argument("--probe-items", type=int, default=4, help="--compare: items of the first-turn check")
    p.add_argument("--probe-positions", type=int, default=16, help="--compare: generated positions compared")
    model_options(p)
    rollout_options(p)  # K > 1: Brier score, calibration error, reliability and risk-coverage
    p.set_defaults(func=cmd_evaluate)


def _raw():
    import argparse

    return argparse.RawDescriptionHelpFormatter


def _open_engine(args, settings: RunSettings) -> Engine:
    return open_cli_engine(args, settings)  # max_tokens_per_turn is in the settings it opens with


def _tasks(args) -> list[str] | None:
    return [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None


def _emit(args, summary: dict, rows: list[dict], out: Path | None, title: str, extra: dict | None = None,
          benchmark: bool = True) -> None:
    from speco3.evaluate.report import write_outputs

    if out is not None:
        paths = write_outputs(out, summary, rows, title=title, extra=extra, benchmark=benchmark)
        print(f"report: {paths['html']}", file=sys.stderr)
    if args.json:
        print(json.dumps({**summary, **({"compare": extra} if extra else {})}, indent=1, sort_keys=True))
    else:
        tasks = " ".join(f"{t} F1 " + (f"n/a ({s['undefined']['f1']})" if "f1" in s.get("undefined", {})
                                      else f"{100 * s['f1']:.1f}") + f" (n={s['n']})"
                         for t, s in summary["tasks"].items())
        use = summary.get("rollouts_used")
        rollouts = (f" · {use['mean_k_used']:.2f} of up to {use['k_max']} rollouts per item ("
                    + ", ".join(f"{r} {n}" for r, n in use["stop_reasons"].items()) + ")") if use else ""
        print(f"{summary['n']} items · macro-F1 {100 * summary['macro_f1']:.1f} · {tasks}{rollouts}")
        if summary.get("left_out"):
            print(f"left out: {_counts(summary['left_out'])}")


def _counts(counts: dict[str, int]) -> str:
    """``{"UNSURE_decisions": 1}`` as ``1 UNSURE decisions``."""
    return ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in counts.items())


def cmd_evaluate(args) -> int:
    settings = run_settings(args)
    source = Path(args.source).expanduser()
    if source.suffix in (".sqlite", ".db", ".sqlite3"):
        return _evaluate_store(args, source)
    if source.suffix != ".parquet":
        raise Speco3Error(f"{source}: give a SpecVI-Bench .parquet file or a vetting store .sqlite")
    from speco3.evaluate.bench import BenchFile
    from speco3.evaluate.run import bench_items

    bench = BenchFile(source)
    items = bench_items(bench.items(tasks=_tasks(args), limit=args.limit))
    if not items:
        raise Speco3Error(f"{source}: no items for tasks {args.tasks or 'any'}")
    out = Path(args.out) if args.out else Path.cwd() / f"spec-o3-eval-{source.stem}"
    if args.compare:  # each build with its own adapter only (BUILD+ADAPTER.gguf): a task's is for one base
        return _compare(args, items, out, source)
    settings = run_settings(args, _adapter_task(args, items))
    engine = _open_engine(args, settings)
    try:
        fill_model_digests(engine.info)
        res, rows = _run(args, settings, items, engine, out / "run.sqlite")
    finally:
        engine.close()
    from speco3.evaluate.metrics import summarize

    summary = {**summarize(rows), "model_id": engine.info.model_id, "quant": engine.info.quant,
               "run": res.to_dict()}
    _emit(args, summary, rows, out, f"{source.name} · {engine.info.model_id}")
    if res.cancelled:
        print("stopped; run the same command again to continue", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _adapter_task(args, items) -> Task | None:
    """The task whose adapter (its file's ``lora``) the run uses when no ``--lora`` is given; one engine runs all
    items, so the tasks evaluated must share their adapter (or all have none)."""
    if args.lora:
        return None
    tasks = load_tasks()
    used = [tasks[t] for t in sorted({i.task for i in items}) if t in tasks]
    adapters = {t.lora for t in used}
    if len(adapters) > 1:
        which = ", ".join(f"{t.id} ({Path(t.lora.path).name if t.lora else 'no adapter'})" for t in used)
        raise Speco3Error(f"the tasks evaluated use different LoRA adapters: {which}; one model runs a whole "
                          "evaluation: evaluate them in separate runs (--tasks, --out) or give --lora (none: the "
                          "base model for all)")
    return next((t for t in used if t.lora is not None), None)


def _run(args, settings: RunSettings, items, engine, store_path: Path):
    from speco3.evaluate.run import evaluate_items, results
    from speco3.vetting import VettingStore

    render = renderer(args)
    cancel = threading.Event()
    bar = ProgressBar(len(items))
    with VettingStore(store_path) as store:
        try:
            with sigint_cancels(cancel):
                res = evaluate_items(items, store, engine, render, cancel=cancel,
                                     progress=lambda i, total, item, verdict: bar.item(item.key, i, verdict),
                                     trace_root=store_path.with_name("traces"), plan=settings.plan(),
                                     thresholds=settings.thresholds())
        finally:
            bar.close()
        return res, results(store, model_id=engine.info.model_id, thresholds=settings.thresholds())


def _thresholds(args):
    from speco3.agent.confidence import Thresholds

    try:
        return Thresholds(args.min_agreement, args.min_answered)
    except ValueError as exc:
        raise Speco3Error(str(exc).replace("min_", "--min-")) from exc


def _evaluate_store(args, path: Path) -> int:
    from speco3.evaluate.metrics import summarize
    from speco3.evaluate.run import left_out, results
    from speco3.vetting import VettingStore

    with VettingStore(path, readonly=True) as store:
        rows = results(store, tasks=_tasks(args), thresholds=_thresholds(args))
        if args.limit:
            rows = [r for t in sorted({r["task"] for r in rows})
                    for r in [x for x in rows if x["task"] == t][:args.limit]]
        skipped = left_out(store, rows, _tasks(args))
    if not rows:
        raise Speco3Error(f"{path}: no spectrum has both a model verdict and a YES/NO decision"
                          + (f" (left out: {_counts(skipped)})" if skipped else ""))
    summary = {**summarize(rows), "source": "vetting store: model verdicts vs your decisions", "left_out": skipped}
    _emit(args, summary, rows, Path(args.out) if args.out else None, f"{path.name} · your decisions", benchmark=False)
    return 0


def _split_lora(build: str) -> tuple[str, str | None]:
    """``BUILD+ADAPTER.gguf[:SCALE]`` -> (``BUILD``, ``ADAPTER.gguf[:SCALE]``); a build without one -> (build, None)."""
    m = re.fullmatch(r"(.+?)\+(.+\.gguf(?::[0-9.eE+-]+)?)", build)
    return (m.group(1), m.group(2)) if m else (build, None)


def _build_args(args, build: str):
    """A copy of ``args`` that opens ``build`` (a name, a TEXT,MMPROJ pair, or a scripted .json for tests), with the
    LoRA adapter of a ``BUILD+ADAPTER.gguf[:SCALE]`` added to ``--lora``'s."""
    import copy

    a = copy.copy(args)
    build, lora = _split_lora(build)
    a.lora = [*args.lora, *([lora] if lora else [])]
    a.model = a.text = a.mmproj = a.scripted = None
    if build.endswith(".json"):
        a.scripted = build
    elif "," in build:
        a.text, a.mmproj = build.split(",", 1)
    else:
        a.model = build
    return a


def _compare(args, items, out: Path, source: Path) -> int:
    from speco3.agent import get_task
    from speco3.evaluate.compare import (
        TurnProbe,
        compare_results,
        divergence,
        has_logits,
        precision_rank,
        probe_first_turn,
    )
    from speco3.evaluate.metrics import summarize

    # most precise first (ranked by the text file's or the name's quant); stable: the first given wins a tie
    builds = sorted(args.compare, key=lambda b: precision_rank(Path(_split_lora(b)[0].split(",")[0]).name))
    settings = run_settings(args)
    render = renderer(args)
    probes_ref, report, summaries, rows_by = None, {"reference": builds[0], "builds": {}}, {}, {}
    probe_items = [i for i in items if i.error is None][:args.probe_items]
    cancelled = False
    for build in builds:
        base, lora = _split_lora(build)
        label = Path(base.split(",")[0]).stem + (f"+lora-{Path(lora).name.replace('.gguf', '')}" if lora else "")
        label = re.sub(r"[^A-Za-z0-9._+-]+", "_", label)[:60]
        build_args = _build_args(args, build)
        engine = _open_engine(build_args, run_settings(build_args))  # with the build's own adapter
        try:
            probes = None
            if has_logits(engine) and args.probe_positions > 0:
                print(f"{label}: first-turn check on {len(probe_items)} items …", file=sys.stderr)
                ref_by: dict[str, TurnProbe] = {p.key: p for p in probes_ref} if probes_ref else {}
                probes = [probe_first_turn(engine, i.key, i.load(), get_task(i.task), render, args.probe_positions,
                                           forced=ref_by.get(i.key)) for i in probe_items]
            res, rows = _run(args, settings, items, engine, out / label / "run.sqlite")
        finally:
            engine.close()
        cancelled = cancelled or res.cancelled
        summaries[build], rows_by[build] = summarize(rows), rows
        entry: dict = {"model_id": engine.info.model_id, "macro_f1": summaries[build]["macro_f1"],
                       "f1": {t: s["f1"] for t, s in summaries[build]["tasks"].items()}}
        if build == builds[0]:
            probes_ref = probes
        else:
            entry.update(compare_results(rows_by[builds[0]], rows))
            if probes is not None and probes_ref is not None:
                entry["first_turn"] = divergence(probes_ref, probes)
        report["builds"][build] = entry
        if cancelled:
            break
    ref = builds[0]
    _emit(args, {**summaries[ref], "model_id": ref}, rows_by[ref], out, f"{source.name} · compare", extra=report)
    return EXIT_INTERRUPTED if cancelled else 0

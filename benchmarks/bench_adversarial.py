"""Adversarial model outputs at scale: episodes through `ScriptedEngine` and the real agent loop, by category.

Usage::

    .venv/bin/python benchmarks/bench_adversarial.py [--episodes 1900] [--seed 0] [--real-render] [--quick]

Runs `speco3_testkit.adversarial` episodes on a real LAMOST spectrum (Pillow renderer by default, the Qt
renderer ``speco3.render`` with ``--real-render``), saves and reloads every trace, and prints JSON: outcomes by
category, escaped exceptions, trace save/load failures, budget overruns, turns and tool calls per category, time
per episode, and the ratio of the mean episode time to that of plain valid episodes (one zoom, then an answer)
run in the same process as the reference.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path

from speco3_testkit import adversarial
from speco3_testkit.testdata import SPECTRA

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("episodes", "escaped_exceptions", "trace_failures", "over_budget", "outcomes", "by_category",
             "mean_episode_s", "ratio_to_reference")


SPECTRUM = SPECTRA / "lamost" / "spec-60591-LN042429N340750BM01_sp01-001.fits.gz"


def run(outputs, spectrum, render, folder: Path, unlimited: bool) -> dict:
    from speco3.agent import MAX_TURNS, Trace, get_task, run_episode
    from speco3.agent.steps import AssistantStep, ToolStep
    from speco3.engine.base import EngineSettings
    from speco3.engine.scripted import ScriptedEngine

    settings = EngineSettings(max_tokens_per_turn=10**6, n_ctx=1 << 20) if unlimited else EngineSettings()
    task = get_task("cv")
    trace = Trace(task_id=task.id, task_text=task.text, prompt_version=task.prompt_version)
    t0 = time.perf_counter()
    rec: dict = {}
    try:
        steps = list(trace.follow(run_episode(ScriptedEngine(outputs, settings=settings), spectrum, task, render)))
    except Exception as exc:  # noqa: BLE001 - measured
        return {"escaped": f"{type(exc).__name__}: {exc}"[:200], "seconds": time.perf_counter() - t0}
    rec["seconds"] = time.perf_counter() - t0
    final = steps[-1]
    rec.update(outcome=final.outcome.value, turns=final.turns, zooms=final.zooms,
               tools=sum(isinstance(s, ToolStep) for s in steps), over_budget=final.turns > MAX_TURNS)
    try:
        trace.save(folder)
        loaded = Trace.load(folder)
        texts = [s.text for s in steps if isinstance(s, AssistantStep)]
        if [s.text for s in loaded.steps if isinstance(s, AssistantStep)] != texts or loaded.outcome is not final.outcome:
            rec["trace_error"] = "round trip differs"
    except Exception as exc:  # noqa: BLE001 - measured
        rec["trace_error"] = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=100 * len(adversarial.CATEGORIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--real-render", action="store_true", help="render with speco3.render (Qt) instead of Pillow")
    ap.add_argument("--quick", action="store_true", help="one episode per category, 3 reference episodes")
    args = ap.parse_args(argv)
    n_reference = 3 if args.quick else 30
    if args.quick:
        args.episodes = len(adversarial.CATEGORIES)
    import logging

    logging.disable(logging.WARNING)
    from speco3.spectra import read_spectrum

    spectrum = read_spectrum(SPECTRUM)
    if args.real_render:
        from speco3.render import render_view

        def render(view):
            return render_view(view).png
    else:
        from speco3_testkit.spectra import pillow_render as render
    work = Path(tempfile.mkdtemp(prefix="advbench-"))
    rng = random.Random(args.seed + 1)
    reference = [run(adversarial.episode("valid_then_answer", rng), spectrum, render, work / f"ref{i}", True)["seconds"]
                 for i in range(n_reference)]
    by_cat: dict[str, list[dict]] = collections.defaultdict(list)
    t0 = time.perf_counter()
    for i, (cat, outputs) in enumerate(adversarial.generate(args.episodes, seed=args.seed)):
        by_cat[cat].append(run(outputs, spectrum, render, work / f"{i:05d}", unlimited=bool(i % 2)))
    wall = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    all_recs = [r for recs in by_cat.values() for r in recs]
    ref_mean = statistics.fmean(reference)
    mean = statistics.fmean(r["seconds"] for r in all_recs)
    report = {
        "benchmark": "adversarial_outputs",
        "episodes": len(all_recs),
        "seed": args.seed,
        "renderer": "speco3.render" if args.real_render else "pillow",
        "wall_s": round(wall, 1),
        "escaped_exceptions": sum("escaped" in r for r in all_recs),
        "trace_failures": sum("trace_error" in r for r in all_recs),
        "over_budget": sum(bool(r.get("over_budget")) for r in all_recs),
        "outcomes": dict(collections.Counter(r.get("outcome", "escaped") for r in all_recs)),
        "by_category": {
            cat: {
                "episodes": len(recs),
                "outcomes": dict(collections.Counter(r.get("outcome", "escaped") for r in recs)),
                "mean_turns": round(statistics.fmean(r.get("turns", 0) for r in recs), 2),
                "max_turns": max(r.get("turns", 0) for r in recs),
                "tool_steps": sum(r.get("tools", 0) for r in recs),
                "zooms_ok": sum(r.get("zooms", 0) for r in recs),
                "failures": [r.get("escaped") or r.get("trace_error") for r in recs
                             if "escaped" in r or "trace_error" in r][:3],
            }
            for cat, recs in sorted(by_cat.items())
        },
        "mean_episode_s": round(mean, 4),
        "max_episode_s": round(max(r["seconds"] for r in all_recs), 3),
        "reference_valid_episode_s": round(ref_mean, 4),
        "ratio_to_reference": round(mean / ref_mean, 3),
    }
    print(json.dumps(report, indent=1, ensure_ascii=False))
    return 1 if report["escaped_exceptions"] or report["trace_failures"] or report["over_budget"] else 0


if __name__ == "__main__":
    sys.exit(main())

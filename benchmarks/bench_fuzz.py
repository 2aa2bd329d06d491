"""FITS fuzzing at scale: thousands of seeded mutations of the test spectra through ``read_spectra``.

Usage::

    .venv/bin/python benchmarks/bench_fuzz.py [--cases 3000] [--seed 0] [--chunk 250] [--limit 2.0] [--quick]

The parent generates the cases (`speco3_testkit.fitsfuzz`) chunk by chunk into a temporary folder and runs
each chunk in a child process, which reads the cases in order and prints one JSON line per case. In the child,
``run_case`` interrupts a Python-level hang with SIGALRM (after 5 x the limit); a child that stops answering (a
C-level hang) is killed after a chunk deadline, and one that dies (a segfault) is noticed: either way the case
in flight is recorded (``native_hang`` / ``native_crash``) and the rest of the chunk runs in a fresh child.
Prints JSON: cases, outcomes overall and by kind, the most common error reasons by kind, crashes, hangs, the
slowest cases, time percentiles, and the mean read time of the clean source files measured in the same process
(the reference) with the ratio of the mutated files' mean to it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path

from speco3_testkit import fitsfuzz
from speco3_testkit.testdata import SPECTRA

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("cases", "outcomes", "outcomes_by_kind", "crashes", "hangs", "seconds_p99",
             "ratio_mutated_to_clean")



def worker(folder: Path, limit: float) -> int:
    """Child: read every case file listed in ``folder/cases.json`` (in order); one JSON line per case."""
    from speco3.errors import SpectrumReadError
    from speco3.spectra import read_spectra

    work = Path(tempfile.mkdtemp(prefix="fuzzw-"))
    try:
        for name, kind, suffix in json.loads((folder / "cases.json").read_text()):
            case = fitsfuzz.Case(name, kind, (folder / (name + suffix)).read_bytes(), suffix)
            print(json.dumps(fitsfuzz.run_case(case, work, read_spectra, SpectrumReadError, timeout_s=limit)),
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def run_chunk(cases: list[fitsfuzz.Case], limit: float) -> list[dict]:
    """Write ``cases`` to a folder and read them in child processes (restarted after a native crash/hang)."""
    results: list[dict] = []
    folder = Path(tempfile.mkdtemp(prefix="fuzzc-"))
    try:
        for c in cases:
            (folder / (c.name + c.suffix)).write_bytes(c.data)
        todo = list(cases)
        while todo:
            (folder / "cases.json").write_text(json.dumps([(c.name, c.kind, c.suffix) for c in todo]))
            deadline = limit * 5 * len(todo) + 60
            proc = subprocess.Popen([sys.executable, __file__, "--worker", str(folder), "--limit", str(limit)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                out, err = proc.communicate(timeout=deadline)
                died = proc.returncode != 0
                kind = "native_crash"
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                died, kind = True, "native_hang"
            got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            results.extend(got)
            todo = todo[len(got):]
            if todo and died:
                culprit = todo.pop(0)
                results.append({"case": culprit.name, "kind": culprit.kind, "outcome": kind,
                                "error": f"child status {proc.returncode}: {err.strip()[-200:]}", "seconds": None})
            elif todo:
                raise RuntimeError(f"worker ended early without an error: {err[-500:]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


def reference_read_seconds(repeat: int = 3) -> float:
    """Mean seconds to read one clean source file (best of ``repeat`` passes), in this process."""
    from speco3.errors import SpectrumReadError
    from speco3.spectra import read_spectra

    files = fitsfuzz.source_files(SPECTRA)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for f in files:
            with contextlib.suppress(SpectrumReadError):
                read_spectra(f)
        best = min(best, (time.perf_counter() - t0) / len(files))
    return best


def _reason_key(reason: str) -> str:
    """Group error reasons: numbers, quoted values and paths removed, first 70 characters."""
    r = re.sub(r"/\S+", "<path>", reason)
    r = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", r)
    r = re.sub(r"-?\d+(\.\d+)?(e[+-]?\d+)?", "N", r)
    return r[:70]


def summarize(results: list[dict], wall: float, reference: float, args) -> dict:
    outcomes = collections.Counter(r["outcome"] for r in results)
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    reasons: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_kind[r["kind"]][r["outcome"]] += 1
        if r["outcome"] == "error":
            reasons[r["kind"]][_reason_key(r.get("reason", r.get("error", "")))] += 1
    timed = [r for r in results if r.get("seconds") is not None]
    secs = sorted(r["seconds"] for r in timed)
    mutated_mean = statistics.fmean(secs) if secs else 0.0
    errors = [r for r in results if r["outcome"] == "error"]
    return {
        "benchmark": "fits_fuzz",
        "cases": len(results),
        "seed": args.seed,
        "limit_s": args.limit,
        "wall_s": round(wall, 1),
        "outcomes": dict(outcomes),
        "outcomes_by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "top_error_reasons_by_kind": {k: v.most_common(4) for k, v in sorted(reasons.items())},
        "errors_naming_the_file": f"{sum(bool(r.get('named_file')) for r in errors)}/{len(errors)}",
        "crashes": [r for r in results if r["outcome"] in ("crash", "native_crash", "invalid_spectrum")][:20],
        "hangs": [r for r in results if r["outcome"] in ("hang", "native_hang", "slow")][:20],
        "slowest": sorted(timed, key=lambda r: -r["seconds"])[:5],
        "seconds_p50": round(secs[len(secs) // 2], 5) if secs else None,
        "seconds_p99": round(secs[int(len(secs) * 0.99)], 5) if secs else None,
        "reference_clean_read_s": round(reference, 5),
        "mutated_mean_read_s": round(mutated_mean, 5),
        "ratio_mutated_to_clean": round(mutated_mean / reference, 3) if reference else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=250, help="cases per child process")
    ap.add_argument("--limit", type=float, default=2.0, help="seconds allowed per case")
    ap.add_argument("--worker", metavar="FOLDER", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="30 cases in 2 child processes, one reference pass")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(Path(args.worker), args.limit)
    if args.quick:
        args.cases, args.chunk = 30, 15
    reference = reference_read_seconds(1 if args.quick else 3)
    t0 = time.perf_counter()
    results: list[dict] = []
    chunk: list[fitsfuzz.Case] = []
    for case in fitsfuzz.generate(SPECTRA, args.cases, seed=args.seed):
        chunk.append(case)
        if len(chunk) == args.chunk:
            results += run_chunk(chunk, args.limit)
            chunk = []
            print(f"{len(results)}/{args.cases}", file=sys.stderr, flush=True)
    if chunk:
        results += run_chunk(chunk, args.limit)
    print(json.dumps(summarize(results, time.perf_counter() - t0, reference, args), indent=1))
    bad = sum(r["outcome"] not in ("ok", "error") for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

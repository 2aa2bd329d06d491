"""Vetting store and export figures: durable decision latency, resume lookup, export sizes and times.

Run: ``.venv/bin/python benchmarks/bench_vetting.py [--quick]``. Prints JSON (``--quick``: 20 decisions, 500 rows). The reference is the same store opened with
``synchronous=NORMAL`` in the same process (what durability costs per decision).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from speco3.vetting import Decision, ModelVerdict, VettingStore
from speco3.vetting.export import export
from speco3.vetting.report import write_report

#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("decision_write_ms", "model_verdict_inserts_per_s", "resume_done_keys_ms",
             "latest_model_verdict_ms", "exports_10k_rows")


def decision_latency(store: VettingStore, n: int, tag: str) -> list[float]:
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        store.record_decision(Decision(f"/a/{tag}{i}.fits#0", "cv", "YES" if i % 3 else "NO", flags=["low_snr"],
                                       comment="ok", vetter="bench"))
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 decisions, 500 model verdicts")
    args = ap.parse_args(argv)
    n_dec = 20 if args.quick else 200
    n_rows = 500 if args.quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = VettingStore(tmp / "full.sqlite")
        full = decision_latency(store, n_dec, "f")
        ref = VettingStore(tmp / "normal.sqlite")
        ref._db.execute("PRAGMA synchronous=NORMAL")
        normal = decision_latency(ref, n_dec, "n")
        ref.close()
        t0 = time.perf_counter()
        for i in range(n_rows):
            store.record_model_verdict(ModelVerdict(f"/a/s{i}.fits#0", "cv", "NO" if i % 7 else "YES",
                                                    "NO" if i % 7 else "YES", model_id="m", prompt_version="p",
                                                    turns=3, tokens=900, seconds=240.0))
        insert_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        done = store.done_keys("cv", "m", "p")
        done_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        for i in range(0, n_rows, 100):
            store.latest_model_verdict(f"/a/s{i}.fits#0", "cv")
        latest_ms = (time.perf_counter() - t0) * 1e3 / (n_rows / 100)
        figures = {}
        for name in ("out.csv", "out.vot", "out.fits"):
            t0 = time.perf_counter()
            export(store, tmp / name)
            figures[name] = {"seconds": round(time.perf_counter() - t0, 3), "bytes": (tmp / name).stat().st_size}
        t0 = time.perf_counter()
        write_report(store, tmp / "report.html")
        figures["report.html"] = {"seconds": round(time.perf_counter() - t0, 3),
                                  "bytes": (tmp / "report.html").stat().st_size}
        store.close()
    med_full, med_norm = statistics.median(full), statistics.median(normal)
    print(json.dumps({
        "decision_write_ms": {"synchronous_full_median": round(med_full, 3),
                              "synchronous_full_p95": round(sorted(full)[int(0.95 * n_dec)], 3),
                              "reference_synchronous_normal_median": round(med_norm, 3),
                              "ratio_full_vs_normal": round(med_full / med_norm, 2) if med_norm else None},
        "model_verdict_inserts_per_s": round(n_rows / insert_s, 1),
        "resume_done_keys_ms": round(done_ms, 2), "resume_done_keys_n": len(done),
        "latest_model_verdict_ms": round(latest_ms, 3),
        "exports_10k_rows": figures,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two ``spec-o3 vet`` runs on one store against one run, and what a claim costs per spectrum.

Run: ``.venv/bin/python benchmarks/bench_claims.py [--quick] [--text T.gguf --mmproj M.gguf]``. Prints JSON.

- ``scripted`` and ``tiny_model``: the same archive screened by one ``spec-o3 vet`` process (the reference) and by
  two started together on one new store, each timed from the start of the processes to the end of the last one
  (process start-up, indexing and model loading included, as a user would time it): spectra per minute, their ratio
  (two runs against one), the rows written and the work each run did (their ``done`` adds up to the archive when
  every spectrum was screened once). ``scripted``: the scripted engine with a per-piece delay (a model that
  spends its time waiting); ``tiny_model``: llama.cpp on the test kit's tiny pair (or ``--text``/``--mmproj``),
  one thread per run.
- ``claim_overhead_ms``: per spectrum, a claim plus the verdict written with its release
  (`VettingStore.claim` + `record_claimed_verdict`) against the verdict written alone (`record_model_verdict`),
  in the same process on the same kind of store (WAL, ``synchronous=FULL``).

Two runs can only be faster than one when one run leaves the machine idle (a model waiting on a server, a GPU a
single run does not fill, more cores than one run uses); on a loaded machine with two cores the ratio says what
sharing costs more than what it gains.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _kit  # test kit on sys.path (first)
import numpy as np

from speco3.vetting import ModelVerdict, VettingStore
from speco3.vetting.records import ClaimHolder, Work

#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("scripted", "tiny_model", "claim_overhead_ms")

ZOOM = ('<think>Check Hα.</think>\n<tool_call>\n{"name": "spectral_visualization_tool", "arguments": '
        '{"label": "Hα", "wavelength_range": [6500, 6600]}}\n</tool_call>')
YES = "<think>Emission at Hα.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."
NO = "<think>Flat.</think><answer>\\boxed{NO}</answer> No emission."


def archive(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    wl = np.linspace(3700, 9100, 600)
    for i in range(n):
        flux = 10 + (5 if i % 2 else 0) * np.exp(-((wl - 6564.6) / 8) ** 2) + 0.01 * i
        np.savetxt(folder / f"s{i:03d}.csv", np.c_[wl, flux], delimiter=",", header="wavelength,flux", comments="")
    return folder


def runs(cmd: list[str], store: Path, k: int, n: int) -> dict:
    """``k`` copies of ``cmd`` started together on ``store``: wall time, spectra per minute, rows, work per run."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([*cmd, "--out", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(k)]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - t0
    for p, (_out, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise SystemExit(f"spec-o3 vet exited {p.returncode}:\n{err[-3000:]}")
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    rows, unique = db.execute("SELECT COUNT(*), COUNT(DISTINCT spectrum_key) FROM model_verdicts").fetchone()
    db.close()
    return {"runs": k, "wall_s": round(wall, 2), "spectra_per_min": round(60 * n / wall, 1), "rows": rows,
            "unique_spectra": unique, "done_per_run": [s["done"] for s in summaries],
            "dropped": sum(s["dropped"] for s in summaries)}


def compare(cmd: list[str], tmp: Path, n: int, name: str) -> dict:
    one = runs(cmd, tmp / f"{name}-one.sqlite", 1, n)
    two = runs(cmd, tmp / f"{name}-two.sqlite", 2, n)
    return {"spectra": n, "one_run": one, "two_runs": two,
            "ratio_two_vs_one": round(two["spectra_per_min"] / one["spectra_per_min"], 2)}


def claim_overhead(tmp: Path, n: int) -> dict:
    work = Work("cv", "bench", "p", 1)
    holder = ClaimHolder.here()

    def verdict(i: int, tag: str) -> ModelVerdict:
        return ModelVerdict(f"/a/{tag}{i}.fits#0", "cv", "NO", "NO", model_id="bench", prompt_version="p", turns=3,
                            tokens=900, seconds=240.0)

    plain, claimed = [], []
    with VettingStore(tmp / "plain.sqlite") as a, VettingStore(tmp / "claimed.sqlite") as b:
        for i in range(n):
            t0 = time.perf_counter()
            a.record_model_verdict(verdict(i, "p"))
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            since = 0
            b.claim(f"/a/c{i}.fits#0", work, holder, since_id=since)
            b.record_claimed_verdict(verdict(i, "c"), [], work, holder, since_id=since)
            claimed.append(time.perf_counter() - t0)
    p, c = statistics.median(plain) * 1e3, statistics.median(claimed) * 1e3
    return {"spectra": n, "verdict_alone_ms": round(p, 3), "claim_and_verdict_ms": round(c, 3),
            "overhead_ms": round(c - p, 3), "ratio": round(c / p, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6 scripted spectra, 2 on the tiny model, 50 claims")
    ap.add_argument("--text", help="text GGUF (default: the test kit's tiny model)")
    ap.add_argument("--mmproj", help="projector GGUF")
    ap.add_argument("--quant", default="Q8_0", help="quantization of the tiny pair (default Q8_0)")
    ap.add_argument("--delay", type=float, default=0.01, help="scripted engine: seconds per generated piece")
    ap.add_argument("--spectra", type=int, help="scripted spectra (default 24)")
    ap.add_argument("--model-spectra", type=int, help="spectra on the model (default 8)")
    args = ap.parse_args(argv)
    n_scripted, n_model, n_claims = (6, 2, 50) if args.quick else (24, 8, 300)
    n_scripted, n_model = args.spectra or n_scripted, args.model_spectra or n_model
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        report: dict = {"machine": f"{os.cpu_count()} CPUs; shared and loaded machines give noisy figures"}
        report["claim_overhead_ms"] = claim_overhead(tmp, n_claims)
        script = tmp / "script.json"
        script.write_text(json.dumps({"scripts": [[ZOOM, YES], [NO]], "delay_s": args.delay}), encoding="utf-8")
        arch = archive(tmp / "arch", n_scripted)
        base = [sys.executable, "-m", "speco3", "vet", str(arch), "--task", "cv"]
        report["scripted"] = {"delay_s_per_piece": args.delay,
                              **compare([*base, "--scripted", str(script)], tmp, n_scripted, "scripted")}
        text, mmproj, label = _kit.model_pair(args, tmp_name)
        arch = archive(tmp / "arch-model", n_model)
        cmd = [sys.executable, "-m", "speco3", "vet", str(arch), "--task", "cv", "--text", text, "--mmproj", mmproj,
               "--n-ctx", "4096", "--threads", "1", "--n-gpu-layers", "0", "--image-max-tokens", "120",
               "--max-turns", "2", "--slots", "1"]
        report["tiny_model"] = {"model": label, **compare(cmd, tmp, n_model, "model")}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: spectra per minute against a local llama-server at concurrency 1, 2, 4, 8, beside the in-process engine.

The same items (generated spectra, task ``cv``, greedy, the tiny Qwen2.5-VL, a fixed answer budget per turn) are
screened four ways into fresh vetting stores:

* ``in_process``: `LlamaMtmdEngine` in this process through `vet_batch` (one conversation at a time);
* ``server``: llama.cpp's ``llama-server`` (built by ``scripts/build-llama-tools.sh`` from the same vendored
  sources) with 8 parallel slots on loopback, driven by the screening core's `on_threads` scheduler with N = 1, 2, 4, 8 conversations in
  flight; the server batches their decode steps.

Prints JSON: spectra per minute for each, the speedup of each concurrency over concurrency 1 and over the
in-process engine, and ``batching_pays_from`` (the smallest N whose rate beats N = 1 by 20 %). The tiny model's
answers are noise, so turn counts differ between paths; ``mean_turns`` is printed to read the rates with.
``--quick``: 4 spectra, N = 1 and 2, 8 tokens per turn. Measured figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path

from speco3.agent import get_task
from speco3.engine.base import EngineSettings
from speco3.engine.chatapi import ServerConfig
from speco3.engine.remote import RemoteEngine
from speco3.vetting import VettingStore
from speco3.vetting.schedulers import on_threads, vet_batch
from speco3.vetting.screening import Screening, VetItem, vet
from speco3_testkit.llamaserver import find_llama_server, llama_server
from speco3_testkit.spectra import make_spectrum, pillow_render
from speco3_testkit.tinymodel import tiny_gguf_pair

REQUIRES = ("llama_cpp", "httpx")
#: Headline keys of the printed JSON (the README's benchmark table lists them).
JSON_KEYS = ("items", "in_process", "server", "speedup_over_n1", "speedup_over_in_process", "batching_pays_from")


def items(n: int) -> list[VetItem]:
    out = []
    for i in range(n):
        spec = make_spectrum(name=f"b{i:03d}.fits", seed=i)
        out.append(VetItem(key=f"/bench/b{i:03d}.fits#0", load=lambda s=spec: s, name=spec.name))
    return out


def run(store_dir: Path, tag: str, fn) -> dict:
    store = VettingStore(store_dir / f"{tag}.sqlite")
    t0 = time.perf_counter()
    res = fn(store)
    wall = time.perf_counter() - t0
    rows = store.model_verdicts("cv", latest=False)
    store.close()
    return {"spectra": res.done, "wall_s": round(wall, 2), "spectra_per_min": round(60 * res.done / wall, 2),
            "mean_turns": round(sum(r.turns for r in rows) / max(1, len(rows)), 2), "outcomes": res.outcomes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 spectra, concurrency 1 and 2, 8 tokens per turn")
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    n_items, levels, max_tokens = (4, [1, 2], 8) if args.quick else (args.items, [1, 2, 4, 8], 48)
    exe = find_llama_server()
    if exe is None:
        print("bench_server: llama-server is not built (scripts/build-llama-tools.sh)", file=sys.stderr)
        return 2
    cache = Path(os.environ.get("SPECO3_TEST_CACHE") or tempfile.mkdtemp(prefix="speco3-bench-"))
    text, mmproj = tiny_gguf_pair(cache, "Q8_0")
    task = get_task("cv")
    settings = EngineSettings(n_ctx=4096, n_threads=args.threads, n_gpu_layers=0, mmproj_on_gpu=False,
                              image_max_tokens=120, max_tokens_per_turn=max_tokens)
    report: dict = {"items": n_items, "max_tokens_per_turn": max_tokens, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        from speco3.engine.llama import LlamaMtmdEngine

        local = LlamaMtmdEngine(text, mmproj, settings, warmup=False)
        local.load()
        report["in_process"] = run(tmpd, "local", lambda st: vet_batch(items(n_items), st, local, task, pillow_render))
        local.close()
        report["server"] = {}
        with llama_server(exe, text, mmproj, slots=max(levels), n_ctx_per_slot=4096, threads=args.threads,
                          log=tmpd / "server.log") as url:
            for n in levels:
                first = RemoteEngine(ServerConfig(url), settings)
                first.load()
                engines = [first] + [RemoteEngine(first.config, settings, client=first.client) for _ in range(n - 1)]
                report["server"][str(n)] = run(tmpd, f"server{n}", lambda st, e=engines: vet(
                    Screening(st, task, pillow_render), items(n_items), on_threads(e), e[0].info.model_id))
                for e in reversed(engines):
                    e.close()
    rates = {n: v["spectra_per_min"] for n, v in report["server"].items()}
    base = rates[str(levels[0])] or 1e-9
    report["speedup_over_n1"] = {n: round(r / base, 2) for n, r in rates.items()}
    local_rate = report["in_process"]["spectra_per_min"] or 1e-9
    report["speedup_over_in_process"] = {n: round(r / local_rate, 2) for n, r in rates.items()}
    report["batching_pays_from"] = next((int(n) for n, s in report["speedup_over_n1"].items() if s >= 1.2), None)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

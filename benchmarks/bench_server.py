"""Benchmark: spectra per minute against local llama-server and vLLM at concurrency 1, 2, 4, 8, beside the in-process
engine.

The same items (generated spectra, task ``cv``, greedy, the tiny Qwen2.5-VL, a fixed answer budget per turn) are
screened into fresh vetting stores:

* ``in_process``: `LlamaMtmdEngine` in this process through `vet_batch` (one conversation at a time);
* ``server``: llama.cpp's ``llama-server`` (built by ``scripts/build-llama-tools.sh`` from the same vendored
  sources) with 8 parallel slots on loopback, driven by the screening core's `on_threads` scheduler with N = 1, 2, 4, 8 conversations in
  flight; the server batches their decode steps;
* ``vllm``: vLLM's CPU build (``scripts/setup-vllm.sh``) serving the same tiny weights from the Hugging Face
  checkpoint (float32) with the flags of docs/howto/servers.md (vLLM), driven the same way; ``null`` (with ``vllm_note``) when its
  environment is not built, with ``--no-vllm``, and in ``--quick`` (its start alone takes about 2 minutes).

Each level screens the same items, so both servers run with their prompt caches off (llama-server
``--no-cache-prompt --cache-ram 0``, vLLM ``--no-enable-prefix-caching``): otherwise every level after the first
finds the items' prompts, images included, already computed, and measures the cache instead of the batching.

Prints JSON: spectra per minute for each, the speedup of each concurrency over concurrency 1 and over the
in-process engine, and ``batching_pays_from`` (the smallest N whose rate beats N = 1 by 20 %). The tiny model's
answers are noise, so turn counts and answer lengths differ between paths (the GGUF is Q8_0, vLLM runs float32);
``mean_turns`` and ``mean_tokens`` (generated per spectrum) are printed to read the rates with.
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
from speco3_testkit.tinymodel import make_tiny_qwen25vl, tiny_gguf_pair
from speco3_testkit.vllmserver import find_vllm_python, vllm_server

REQUIRES = ("llama_cpp", "httpx")
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("items", "in_process", "server", "speedup_over_n1", "speedup_over_in_process", "batching_pays_from",
             "vllm", "vllm_speedup_over_n1")
#: The servers' prompt caches off: each level screens the same items (see the module doc).
LLAMA_NO_CACHE = ("--no-cache-prompt", "--cache-ram", "0")
VLLM_NO_CACHE = ("--no-enable-prefix-caching",)


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
            "mean_turns": round(sum(r.turns for r in rows) / max(1, len(rows)), 2),
            "mean_tokens": round(sum(r.tokens for r in rows) / max(1, len(rows)), 1), "outcomes": res.outcomes}


def screen_server(url: str, tag: str, levels: list[int], n_items: int, settings: EngineSettings, tmpd: Path) -> dict:
    """Screen the items with N conversations in flight on the server at ``url``, for each N of ``levels``."""
    task = get_task("cv")
    out = {}
    for n in levels:
        first = RemoteEngine(ServerConfig(url), settings)
        first.load()
        engines = [first] + [RemoteEngine(first.config, settings, client=first.client) for _ in range(n - 1)]
        out[str(n)] = run(tmpd, f"{tag}{n}", lambda st, e=engines: vet(
            Screening(st, task, pillow_render), items(n_items), on_threads(e), e[0].info.model_id))
        for e in reversed(engines):
            e.close()
    return out


def speedups(rates: dict[str, dict]) -> dict[str, float]:
    base = next(iter(rates.values()))["spectra_per_min"] or 1e-9
    return {n: round(v["spectra_per_min"] / base, 2) for n, v in rates.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 spectra, concurrency 1 and 2, 8 tokens per turn")
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-vllm", action="store_true", help="leave vLLM out (it is left out in --quick)")
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
        with llama_server(exe, text, mmproj, slots=max(levels), n_ctx_per_slot=4096, threads=args.threads,
                          log=tmpd / "server.log", extra=LLAMA_NO_CACHE) as url:
            report["server"] = screen_server(url, "server", levels, n_items, settings, tmpd)
        report["vllm"] = report["vllm_speedup_over_n1"] = None
        python = find_vllm_python()
        if args.quick or args.no_vllm or python is None:
            report["vllm_note"] = ("left out (--quick)" if args.quick else "left out (--no-vllm)" if args.no_vllm
                                   else "vLLM's environment is not built (scripts/setup-vllm.sh)")
        else:
            checkpoint = make_tiny_qwen25vl(tmpd / "tiny-hf", shards=1)  # the weights of the GGUF pair (seed 0)
            t0 = time.perf_counter()
            with vllm_server(python, checkpoint, log=tmpd / "vllm.log", extra=VLLM_NO_CACHE) as url:
                report["vllm_start_s"] = round(time.perf_counter() - t0, 1)
                report["vllm"] = screen_server(url, "vllm", levels, n_items, settings, tmpd)
            report["vllm_speedup_over_n1"] = speedups(report["vllm"])
    rates = {n: v["spectra_per_min"] for n, v in report["server"].items()}
    report["speedup_over_n1"] = speedups(report["server"])
    local_rate = report["in_process"]["spectra_per_min"] or 1e-9
    report["speedup_over_in_process"] = {n: round(r / local_rate, 2) for n, r in rates.items()}
    if report["vllm"]:
        report["vllm_speedup_over_in_process"] = {n: round(v["spectra_per_min"] / local_rate, 2)
                                                  for n, v in report["vllm"].items()}
    report["batching_pays_from"] = next((int(n) for n, s in report["speedup_over_n1"].items() if s >= 1.2), None)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

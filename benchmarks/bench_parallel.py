"""Benchmark: K rollouts on parallel sequences vs K runs one after the other; batch slots; log-probability cost.

Four sections, all on one llama.cpp engine (the tiny Qwen2.5-VL unless ``--text/--mmproj`` name another GGUF pair,
e.g. the 7B-shaped random checkpoint at Q4_K_M):

* ``rollouts``: for each K in ``--rollouts`` (default 1,2,4,8), K sampled rollouts (temperature 1, seeds 0..K-1)
  of a 2-turn session (system + full image + task, ``--max-tokens`` sampled, a tool turn with its own zoom image,
  ``--max-tokens`` more) run ``parallel`` (`SequencePool`: the prefix evaluated once and copied with
  ``seq_cp``, one ``llama_decode`` per step for all rollouts) and ``sequential`` (one after the other, reusing the
  cached prefix as the rollout runner did before). Rollout i asks for window ``i mod 3`` (three windows between them,
  so from K = 4 on some rollouts repeat a window: their images come from the engine's cache of vision-encoder
  outputs); ``parallel_distinct`` runs K > 1 again with a window of its own for every rollout (``--no-distinct``
  skips it).
  Wall time, CPU seconds, text tokens evaluated (prompt + generated), images evaluated and how many of them came
  from the cache (``image_cache_hits``), how often the shared prefix was evaluated (``prefix_evaluations``: K minus
  the prefix copies), decode rounds, and ``wall_over_k1``: wall time over the K=1 wall time (goal at 7B scale:
  ≤ 2 for K=4).
* ``decode``: aggregate decode tokens/s with 1, 2, 4, 8 sequences generating together from one prefix.
* ``batch``: spectra per hour screening ``--spectra`` synthetic spectra with `vet_batch` (``slots`` 1 = one at a
  time, 2, 4), greedy, the real agent loop (tool calls render real zoom images).
* ``logprobs``: seconds per generated token with ``top_logprobs`` 0 and 5 (single sequence).

``--auto`` (``--rollouts auto``): the synthetic population table of ``bench_adaptive.py`` (its
`population_report`: mean rollouts and modelled cost per spectrum, decisions different from K=8, the goal; no model
loaded unless ``--sections`` is given); with ``--sections rollouts`` also the wall time of auto's rounds on the
same engine in the same run as the fixed K: ``auto_stop_2`` (one round of 2: a clear spectrum), ``auto_stop_4``
(2 + 2) and ``auto_budget_8`` (2 + 2 + 2 + 2), each round started when the previous one ended, on one pool. A random
checkpoint cannot agree with itself, so the stop is scripted: the rounds run as the rule runs them when it stops
there (the rule's own arithmetic costs microseconds).

Run: ``.venv/bin/python benchmarks/bench_parallel.py``; ``--quick``: 8 tokens per turn, K in 1,2,4, small images,
4 spectra. Timings depend on the machine's load. The tiny model is built into ``SPECO3_TEST_CACHE`` when set.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import _kit  # puts the test kit on sys.path; model_pair
from bench_adaptive import cost, population_report
from bench_engine import QUICK_SIZES, SIZES, SYSTEM, TASK, make_images, tool_turn

from speco3.engine.base import EngineSettings, Sampling
from speco3.engine.llama import LlamaMtmdEngine

REQUIRES = ("llama_cpp",)
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("rollouts", "decode", "batch", "logprobs")


def _progress(what: str, figures: dict) -> dict:
    """Each section's figures on stderr as soon as they are measured (a 7B-scale run takes long)."""
    print(f"{time.strftime('%H:%M:%S')} {what}: {json.dumps(figures)}", file=sys.stderr, flush=True)
    return figures


def counters(engine) -> dict:
    s = engine.stats()
    return {"text": s.text_tokens_evaluated + s.tokens_generated, "prompt": s.text_tokens_evaluated,
            "generated": s.tokens_generated, "images": s.images_encoded, "hits": s.extra.get("image_cache_hits", 0)}


def shared_windows(images):
    """Rollout i's zoom image when the rollouts ask for three windows between them."""
    return lambda i: images[1 + i % 3]


def distinct_windows(images, quick: bool):
    """Rollout i's zoom image when every rollout asks for a window of its own (zoom-sized, made on demand)."""
    made: dict[int, object] = {}
    size = (QUICK_SIZES if quick else SIZES)[1]

    def window(i: int):
        if i not in made:
            made[i] = make_images([size], seed0=100 + i)[0]
        return made[i]

    return window


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a}


def rollouts_parallel(engine, images, k: int, max_tokens: int, window=None, rounds: list[int] | None = None) -> dict:
    """K rollouts of a 2-turn session on one pool; ``rounds`` (sizes summing to K, default one round of K): the
    rollouts start in rounds as ``--rollouts auto`` runs them, each round after the previous one ended, on the same
    pool (the later rounds copy the prefix the first evaluated)."""
    window = window or shared_windows(images)
    rounds = rounds or [k]
    assert sum(rounds) == k, (rounds, k)
    engine.reset(keep_cache=False)
    engine.image_cache.clear()  # every run starts with an empty cache of vision-encoder outputs
    c0, t0, cpu0 = counters(engine), time.perf_counter(), time.process_time()
    with engine.open_pool() as pool:
        started = 0
        for size in rounds:
            turns = {}
            for i in range(started, started + size):
                slot = pool.open(Sampling(1.0, 1.0, 0, i))
                pool.extend(slot, [SYSTEM, images[0], TASK])
                pool.begin(slot, max_tokens=max_tokens)
                turns[slot] = i
            started += size
            done = {slot: 0 for slot in turns}
            while done:
                for slot, res in pool.step():
                    if isinstance(res, Exception):
                        raise res
                    done[slot] += 1
                    if done[slot] == 2:
                        del done[slot]
                        pool.release(slot)
                        continue
                    i = turns[slot]
                    pool.extend(slot, tool_turn(window(i), 6500 + i, 6600 + i))
                    pool.begin(slot, max_tokens=max_tokens)
        counts = dict(pool.counters)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    d = delta(c0, counters(engine))
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "text_tokens_evaluated": d["text"],
            "prompt_tokens_evaluated": d["prompt"], "tokens_generated": d["generated"], "images_encoded": d["images"],
            "image_cache_hits": d["hits"],
            # one round: K minus the prefix copies; in later rounds the slot on sequence 0 reuses its own cells, which
            # the copy counter does not count (compare text_tokens_evaluated with the fixed K's instead)
            "prefix_evaluations": k - counts["prefix_copies"] if len(rounds) == 1 else None,
            "decode_rounds": counts["rounds"], "rounds": list(rounds)}


#: ``--auto``: the rounds of ``--rollouts auto`` timed beside the fixed K (a random checkpoint cannot agree with
#: itself, so the stop is scripted: the rounds are run as the rule would run them when it stops there).
AUTO_RUNS = {"auto_stop_2": [2], "auto_stop_4": [2, 2], "auto_budget_8": [2, 2, 2, 2]}


def cost_model_check(rollouts: dict) -> list[dict]:
    """The measured wall (and CPU) time of each fixed K > 1 and each of auto's round plans, in units of K=1, beside
    what `bench_adaptive.cost` (the population tables' cost model) says it costs: how far those tables' costs are
    from this run's hardware."""
    out = []
    for name, row in rollouts.items():
        part = row["parallel"]
        k, n_rounds = sum(part["rounds"]), len(part["rounds"])
        if k > 1:
            out.append({"run": name, "k": k, "rounds": n_rounds, "model": round(cost(k, n_rounds), 3),
                        "wall_over_k1": part["wall_over_k1"], "cpu_over_k1": part["cpu_over_k1"]})
    return out


def rollouts_sequential(engine, images, k: int, max_tokens: int) -> dict:
    engine.reset(keep_cache=False)
    engine.image_cache.clear()
    c0, t0, cpu0 = counters(engine), time.perf_counter(), time.process_time()
    for i in range(k):
        engine.reset(sampling=Sampling(1.0, 1.0, 0, i))  # keeps the cached prefix, as the rollout runner did
        engine.extend([SYSTEM, images[0], TASK])
        engine.generate(max_tokens=max_tokens)
        engine.extend(tool_turn(images[1 + i % 3], 6500 + i, 6600 + i))
        engine.generate(max_tokens=max_tokens)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    d = delta(c0, counters(engine))
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "text_tokens_evaluated": d["text"],
            "prompt_tokens_evaluated": d["prompt"], "tokens_generated": d["generated"], "images_encoded": d["images"],
            "image_cache_hits": d["hits"]}


def decode_rate(engine, images, n: int, max_tokens: int) -> dict:
    """Aggregate decode tokens/s of n sequences sampling together after one shared prefix (kept from the previous
    call: the timing starts after admission either way, and a 7B-scale prefix takes minutes to evaluate)."""
    engine.reset(keep_cache=True)
    with engine.open_pool() as pool:
        for i in range(n):
            slot = pool.open(Sampling(1.0, 1.0, 0, 100 + i))
            pool.extend(slot, [SYSTEM, images[0], TASK])
            pool.begin(slot, max_tokens=max_tokens)
        done, generated = 0, 0
        first = pool.step(rounds=1)  # admission: the prefix once, every first token
        done += len(first)
        t0, cpu0 = time.perf_counter(), time.process_time()
        while done < n:
            finished = pool.step()
            done += len(finished)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        generated = pool.counters["round_tokens"]
    return {"sequences": n, "tokens": generated, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "tokens_per_s": round(generated / wall, 1) if wall > 0 else None,
            "tokens_per_cpu_s": round(generated / cpu, 2) if cpu > 0 else None}


def batch_rate(text, mmproj, settings: EngineSettings, n_spectra: int, slots_list, tmp: Path) -> dict:
    from speco3.agent import get_task
    from speco3.engine import open_engine
    from speco3.vetting import VettingStore
    from speco3.vetting.schedulers import vet_batch
    from speco3.vetting.screening import VetItem
    from speco3_testkit.spectra import make_spectrum, pillow_render

    items = [VetItem(key=f"/bench/s{i:03d}.fits#0", load=lambda i=i: make_spectrum(name=f"s{i:03d}.fits", seed=i),
                     name=f"s{i:03d}.fits") for i in range(n_spectra)]
    out = {}
    for slots in slots_list:
        engine = open_engine((text, mmproj), settings, warmup=False)
        store = VettingStore(tmp / f"batch{slots}.sqlite")
        try:
            t0 = time.perf_counter()
            result = vet_batch(items, store, engine, get_task("cv"), pillow_render, slots=slots)
            wall = time.perf_counter() - t0
        finally:
            engine.close()
            store.close()
        out[f"slots_{slots}"] = {"spectra": result.done, "wall_s": round(wall, 3),
                                 "spectra_per_hour": round(3600 * result.done / wall, 1), "outcomes": result.outcomes}
    base = out[f"slots_{slots_list[0]}"]["spectra_per_hour"]
    out["speedup_over_one_at_a_time"] = {k: round(v["spectra_per_hour"] / base, 3) for k, v in out.items()}
    return out


def logprob_cost(engine, images, max_tokens: int, repeat: int = 3) -> dict:
    """Seconds per generated token without and with 5 alternatives (alternating runs, the fastest of each kept)."""
    best: dict[int, float] = {}
    for _ in range(repeat):
        for n_top in (0, 5):
            engine.settings.top_logprobs = n_top
            engine.reset(keep_cache=True, sampling=Sampling(1.0, 1.0, 0, 3))
            engine.extend([SYSTEM, images[0], TASK])
            engine.evaluate()
            t0 = time.perf_counter()
            res = engine.generate(max_tokens=max_tokens)
            per = (time.perf_counter() - t0) / max(1, res.n_tokens)
            best[n_top] = min(best.get(n_top, per), per)
    engine.settings.top_logprobs = 0
    out = {f"top_{n}_s_per_token": round(v, 6) for n, v in best.items()}
    out["extra_ms_per_token"] = round(1000 * (out["top_5_s_per_token"] - out["top_0_s_per_token"]), 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", help="text GGUF (default: the converter's tiny model)")
    ap.add_argument("--mmproj", help="projector GGUF")
    ap.add_argument("--quant", default="Q8_0", help="quant of the tiny model (default Q8_0)")
    ap.add_argument("--rollouts", default="1,2,4,8", help="K values, comma-separated")
    ap.add_argument("--max-tokens", type=int, default=48, help="tokens sampled per turn")
    ap.add_argument("--spectra", type=int, default=12, help="spectra of the batch section (0: skip it)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sections", default="rollouts,sequential,decode,logprobs",
                    help="which of rollouts (parallel K), sequential (K one after the other), decode, logprobs to "
                    "run (the batch section follows --spectra)")
    ap.add_argument("--no-distinct", action="store_true",
                    help="skip the second run of each K > 1 with a window of its own for every rollout")
    ap.add_argument("--n-ctx", type=int, default=16384)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="8 tokens per turn, K in 1,2,4, small images, 4 spectra")
    ap.add_argument("--auto", action="store_true",
                    help="--rollouts auto: the synthetic population table of bench_adaptive.py (no model) and, when "
                    "--sections names rollouts, the wall time of auto's rounds stopped at 2, 4 and 8 beside K=1..")
    ap.add_argument("--auto-spectra", type=int, default=300, help="--auto: spectra per synthetic population")
    ap.add_argument("--auto-runs", default=",".join(AUTO_RUNS),
                    help=f"--auto with --sections rollouts: which of {', '.join(AUTO_RUNS)} to time")
    args = ap.parse_args(argv)
    auto = None
    if args.auto:
        auto = population_report(12 if args.quick else args.auto_spectra)
        for table in auto.pop("tables"):
            print(table, file=sys.stderr)
        if not any(a.startswith("--sections") for a in argv or sys.argv[1:]):  # the table alone: no model
            print(json.dumps({"auto": auto}, indent=1))
            return 0
    ks = [int(k) for k in args.rollouts.split(",")]
    if args.quick:
        args.max_tokens, args.spectra, ks = 8, min(args.spectra, 4), [k for k in ks if k <= 4] or [1]
    n_seq = max(ks + [4, 8])
    sections = set(args.sections.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        text, mmproj, model = _kit.model_pair(args, tmp)
        settings = EngineSettings(n_ctx=args.n_ctx, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers,
                                  n_seq=n_seq, mmproj_on_gpu=args.n_gpu_layers != 0)
        engine = LlamaMtmdEngine(text, mmproj, settings, warmup=False)
        engine.load()
        images = make_images(QUICK_SIZES if args.quick else SIZES)
        try:
            rollouts_parallel(engine, images, 1, 4)  # warm up allocators once
            rollouts = {}
            for k in ks if "rollouts" in sections else ():
                par = _progress(f"k={k} parallel", rollouts_parallel(engine, images, k, args.max_tokens))
                rollouts[f"k_{k}"] = {"parallel": par}
                if k > 1 and not args.no_distinct:
                    rollouts[f"k_{k}"]["parallel_distinct"] = _progress(
                        f"k={k} parallel, distinct windows",
                        rollouts_parallel(engine, images, k, args.max_tokens, distinct_windows(images, args.quick)))
                if args.auto and k == max(ks):  # auto's rounds, in the same run as the fixed K
                    for name, rounds in AUTO_RUNS.items():
                        if name in args.auto_runs.split(",") and sum(rounds) <= n_seq:
                            rollouts[name] = {"parallel": _progress(name, rollouts_parallel(
                                engine, images, sum(rounds), args.max_tokens, rounds=rounds))}
                if "sequential" in sections:
                    seq = _progress(f"k={k} sequential", rollouts_sequential(engine, images, k, args.max_tokens))
                    rollouts[f"k_{k}"] |= {"sequential": seq,
                                           "sequential_over_parallel_wall": round(seq["wall_s"] / par["wall_s"], 3)}
            k1 = rollouts.get("k_1", {}).get("parallel")
            for row in rollouts.values():  # cpu: the process's CPU seconds, steadier than wall time on a busy machine
                for part in (row[key] for key in ("parallel", "parallel_distinct") if key in row):
                    part["wall_over_k1"] = round(part["wall_s"] / k1["wall_s"], 3) if k1 else None
                    part["cpu_over_k1"] = round(part["cpu_s"] / k1["cpu_s"], 3) if k1 else None
            if auto is not None and k1:
                auto["cost_model_check"] = cost_model_check(rollouts)
            decode = [_progress(f"decode n={n}", decode_rate(engine, images, n, max(args.max_tokens, 16)))
                      for n in (1, 2, 4, 8) if n <= n_seq and "decode" in sections]
            logprobs = (_progress("logprobs", logprob_cost(engine, images, max(args.max_tokens, 16)))
                        if "logprobs" in sections else None)
            backend = engine.stats().backend
        finally:
            engine.close()
        batch = None
        if args.spectra > 0:
            bsettings = EngineSettings(n_ctx=args.n_ctx, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers,
                                       mmproj_on_gpu=args.n_gpu_layers != 0, n_seq=4, image_max_tokens=120
                                       if args.quick else None, max_tokens_per_turn=args.max_tokens)
            batch = batch_rate(text, mmproj, bsettings, args.spectra, [1, 2, 4], Path(tmp))
    report = {"model": model, "backend": backend, "max_tokens_per_turn": args.max_tokens, "rollouts": rollouts,
              "decode": decode, "batch": batch, "logprobs": logprobs, "auto": auto}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

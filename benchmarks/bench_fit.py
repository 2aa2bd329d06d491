"""Benchmark: the memory estimate (`speco3_models.fit`) against the measured peak RSS of a real load.

Each measurement is a fresh child process (`speco3_testkit.rssprobe`): load the pair with the real engine (CPU,
mtmd warm-up on), encode one image, generate 32 tokens; the peak RSS increase over the process before the load
is compared with the estimate at the same context. Reported per context (4k and 16k): estimated and measured
bytes and the relative error (goal: within 10 %), load time, image encode ms per image token, prefill and decode
tokens/s.

Models: the tiny random Qwen2.5-VL (default and ``--quick``); ``--shape 1.5b`` or ``--shape 7b`` (opt-in, real
scale: the random checkpoint of ``bench_convert.py`` converted to Q4_K_M here, with the converter's own peak RSS
and time reported; 7b needs ~34 GB of free disk and ~12 GB of RAM). Run:
``.venv/bin/python benchmarks/bench_fit.py [--quick] [--shape 7b --dir /big/disk]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path

from speco3_testkit.rssprobe import measure_load
from speco3_testkit.tinymodel import tiny_gguf_pair

REQUIRES = ("llama_cpp",)
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("model", "contexts", "worst_error", "goal_met", "converter")
GOAL = 0.10

_BUILD = """
import json, resource, sys, time
from speco3_converters.build import build_model
t0 = time.perf_counter()
res = build_model(None, sys.argv[1], quant="Q4_K_M", out_dir=sys.argv[2], register=False)
print(json.dumps({"text": str(res.text_path), "mmproj": str(res.mmproj_path), "seconds": time.perf_counter() - t0,
                  "self_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def build_checkpoint(shape: str, work: Path) -> tuple[Path, Path, dict]:
    """The random checkpoint of ``bench_convert.py`` at ``shape``, converted to Q4_K_M in a child process."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_convert import write_checkpoint

    layers = 28 if shape == "7b" else 16
    nbytes, params = write_checkpoint(work / "hf", layers, shape=shape)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _BUILD, str(work / "hf"), str(work / "gguf")], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"conversion failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    shutil.rmtree(work / "hf")
    conv = {"checkpoint_bytes": nbytes, "parameters": params, "convert_and_quantize_s": round(out["seconds"], 1),
            "child_wall_s": round(time.perf_counter() - t0, 1),
            "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}
    return Path(out["text"]), Path(out["mmproj"]), conv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the tiny model at 4k only")
    ap.add_argument("--shape", choices=("tiny", "1.5b", "7b"), default="tiny",
                    help="1.5b / 7b: opt-in random checkpoint of that shape, converted to Q4_K_M here")
    ap.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--text", help="an existing text GGUF to measure (with --mmproj) instead of building one")
    ap.add_argument("--mmproj", help="its projector GGUF")
    ap.add_argument("--image-max-tokens", type=int, default=1280,
                    help="image-token cap of the load (mtmd sizes its warm-up and buffers for it; default 1280)")
    ap.add_argument("--kv-type", choices=("f16", "q8_0"), default="f16", help="KV cache type of the loads")
    ap.add_argument("--contexts", default=None, help="comma-separated contexts (default 4096,16384; --quick 4096)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="speco3-bench-fit-", dir=args.dir))
    try:
        converter = None
        if args.text or args.mmproj:
            if not (args.text and args.mmproj):
                raise SystemExit("--text and --mmproj go together")
            text, mmproj = Path(args.text), Path(args.mmproj)
        elif args.shape == "tiny":
            text, mmproj = tiny_gguf_pair(work / "tiny", "Q8_0")
        else:
            text, mmproj, converter = build_checkpoint(args.shape, work)
        rows = []
        contexts = [int(c) for c in args.contexts.split(",")] if args.contexts else (
            [4096] if args.quick else [4096, 16384])
        for n_ctx in contexts:
            m = measure_load(text, mmproj, n_ctx, threads=args.threads, image_max_tokens=args.image_max_tokens,
                             kv_type=args.kv_type)
            rows.append({
                "n_ctx": n_ctx,
                "kv_type": args.kv_type,
                "image_max_tokens": args.image_max_tokens,
                "measured_peak_rss_MiB": round((m["measured_peak_rss_increase_bytes"] + m["baseline_rss_bytes"]) / 2**20, 1),
                "estimated_MiB": round(m["estimated_bytes"] / 2**20, 1),
                "measured_peak_rss_increase_MiB": round(m["measured_peak_rss_increase_bytes"] / 2**20, 1),
                "error": round(m["error"], 3),
                "estimate_parts_MiB": {k: round(v / 2**20, 1) for k, v in m["estimate_parts"].items()},
                "load_s": round(m["load_s"], 2),
                "image_tokens": m["image_tokens"],
                "image_encode_ms_per_token": round(m["image_encode_ms_per_token"], 3),
                "prefill_tokens_per_s": round(m["prefill_tokens_per_s"], 1),
                "decode_tokens_per_s": round(m["decode_tokens_per_s"], 1),
            })
        worst = max(abs(r["error"]) for r in rows)
        print(json.dumps({
            "model": f"{'given' if args.text else args.shape}: {text.name} + {mmproj.name}",
            "contexts": rows,
            "worst_error": worst,
            "goal_met": worst <= GOAL,
            "converter": converter,
            "note": "measured = peak RSS increase of a fresh process over its RSS before the load (CPU, one image, "
                    "32 tokens); timings on the machine this ran on (a shared 2-core machine is noisy)",
        }, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

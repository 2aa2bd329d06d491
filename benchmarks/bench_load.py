"""Benchmark: model load time and peak memory of our engine against raw llama.cpp, and the q8_0 KV cache.

Each load runs in a fresh child process on the CPU with flash attention, mtmd's warm-up on and the same context:

* ``ours``: `LlamaMtmdEngine` as a user gets it: the load mode chosen by the fit plan (``mmap`` in the row: the
  model file is mapped when free memory holds it beside the loaded weights, `speco3_models.fit.choose_mmap`);
* ``ours_mmap`` / ``ours_read``: the same with the file mapped / read into memory (``--mmap`` / ``--no-mmap``);
* ``ours_read_q8_kv``: read, with a q8_0 KV cache (half the KV bytes of f16);
* ``llama_server`` / ``llama_server_no_mmap``: llama.cpp's own ``llama-server`` (built by
  ``scripts/build-llama-tools.sh`` from the same vendored sources) loading the same pair at the same context, with its
  defaults (mmap on) and with ``--load-mode none``, timed until ``/health`` answers: raw llama.cpp, the reference.

Reported per load: wall seconds to ready, the peak RSS (``VmHWM``) after loading and, for ours, after encoding one
full-view image and generating a few tokens, and the peak of anonymous memory (``RssAnon`` sampled every 20 ms; ``rss_before_load``: the interpreter, numpy and Pillow
already resident before ours loads, which llama-server has no counterpart of):
RSS also counts the mapped file's pages, which are clean page cache the system can drop, anonymous memory is what
the load really takes. Ratios: each of ours against raw llama.cpp's default load and against the reference with the
same load mode. Then the quality cost of the q8_0 KV cache on the model's own numbers: next-token distributions
after the same image + text prompt with an f16 and a q8_0 cache (KL divergence, top-1 agreement, max |Δ logit|).
Run: ``.venv/bin/python benchmarks/bench_load.py [--text T --mmproj M] [--ctx 16384]``; ``--quick``: the tiny
model at 4k. Prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path

REQUIRES = ("llama_cpp",)
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("model", "n_ctx", "loads", "ratios_to_llama_server", "q8_0_kv_quality")

_CHILD = r"""
import io, json, sys, threading, time
import numpy as np
from PIL import Image
from speco3.engine import native
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine
from speco3.imaging import prepare_image

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key))

def hwm():
    return status("VmHWM")

anon = [0]
def sample():  # llama.cpp's load runs with the GIL released: this thread keeps sampling
    while True:
        anon[0] = max(anon[0], status("RssAnon"))
        time.sleep(0.02)

threading.Thread(target=sample, daemon=True).start()
text, mmproj, ctx, cap, kv, threads, mode, mmap = sys.argv[1:9]
native.ensure_backend()
buf = io.BytesIO()  # a full-view-sized image (792 x 472 px, as the renderer makes them)
Image.fromarray(np.random.default_rng(0).integers(0, 256, (472, 792, 3), dtype=np.uint8)).save(buf, format="PNG")
image = prepare_image(buf.getvalue())
settings = EngineSettings(n_ctx=int(ctx), n_threads=int(threads), n_gpu_layers=0, mmproj_on_gpu=False, kv_type=kv,
                          image_max_tokens=int(cap) if cap != "none" else None,
                          use_mmap=None if mmap == "auto" else mmap == "1")
if cap != "none" and int(cap) > 1280:
    # the engine before the cap was tied to the renders: mtmd told 16,384 tokens, no fit check (the fit now refuses
    # a cap this large: encoding one image at it would need tens of GiB); plan the fit for 1280 to load as it did
    from speco3.engine import fitting
    fitting.image_cap = lambda settings: 1280
before = status("VmRSS")
t0 = time.perf_counter()
engine = LlamaMtmdEngine(text, mmproj, settings, warmup=True)
engine.load()
out = {"load_s": time.perf_counter() - t0, "peak_after_load": hwm(), "mmap": engine.stats().extra["use_mmap"],
       "rss_before_load": before}
engine.extend(["<|im_start|>user\n", image, "Describe the spectrum.<|im_end|>\n<|im_start|>assistant\n"])
if mode == "logits":
    engine.evaluate()
    np.save(sys.argv[9], engine.last_logits())
else:
    engine.generate(max_tokens=8)
out["peak_after_inspection"] = hwm()
out["peak_anon"] = max(anon[0], status("RssAnon"))
out["image_tokens"] = image.n_tokens
engine.close()
print(json.dumps(out))
"""


def _child(text, mmproj, ctx, cap, kv, threads, mode="load", extra=(), mmap="auto") -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*sys.path[1:], env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(text), str(mmproj), str(ctx), str(cap), kv,
                           str(threads), mode, mmap, *extra], capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"load failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _server_binary() -> Path | None:
    env = os.environ.get("SPECO3_LLAMA_SERVER")
    if env:
        return Path(env)
    import importlib.metadata as md

    try:
        version = md.version("llama-cpp-python")
    except md.PackageNotFoundError:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    p = cache / "speco3" / "llama-tools" / version / "bin" / "llama-server"
    return p if p.exists() else None


def _proc_status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def _server_load(binary: Path, text, mmproj, ctx: int, threads: int, mmap: bool = True) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(binary), "-m", str(text), "--mmproj", str(mmproj), "-c", str(ctx), "-t", str(threads),
                             "-fa", "on", "-np", "1", "-ngl", "0", "--host", "127.0.0.1", "--port", str(port),
                             "--load-mode", "mmap" if mmap else "none"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    anon = 0
    try:
        while True:
            with contextlib.suppress(OSError, StopIteration):
                anon = max(anon, _proc_status(proc.pid, "RssAnon"))
            if proc.poll() is not None:
                raise SystemExit(f"llama-server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - t0 > 3600:
                raise SystemExit("llama-server did not become ready")
            time.sleep(0.02)
        load_s = time.perf_counter() - t0
        return {"load_s": load_s, "peak_after_load": _proc_status(proc.pid, "VmHWM"), "mmap": mmap,
                "peak_anon": max(anon, _proc_status(proc.pid, "RssAnon"))}
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _kv_quality(text, mmproj, ctx, threads, work: Path) -> dict:
    import numpy as np

    a, b = work / "f16.npy", work / "q8.npy"
    _child(text, mmproj, ctx, 1280, "f16", threads, "logits", (str(a),), "0")
    _child(text, mmproj, ctx, 1280, "q8_0", threads, "logits", (str(b),), "0")
    la, lb = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
    pa, pb = np.exp(la - la.max()), np.exp(lb - lb.max())
    pa, pb = pa / pa.sum(), pb / pb.sum()
    kl = float(np.sum(pa * (np.log(pa + 1e-300) - np.log(pb + 1e-300))))
    return {"kl_f16_to_q8_0": kl, "top1_same": bool(la.argmax() == lb.argmax()),
            "max_abs_logit_diff": float(np.abs(la - lb).max()), "logit_scale": float(np.abs(la).max()),
            "positions": 1, "note": "next-token distribution after one full-view image + text prompt"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", help="text GGUF (default: the tiny model)")
    ap.add_argument("--mmproj", help="projector GGUF")
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="the tiny model at a 4k context")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="speco3-bench-load-") as tmp:
        work = Path(tmp)
        if args.text:
            text, mmproj = Path(args.text), Path(args.mmproj)
        else:
            from speco3_testkit.tinymodel import tiny_gguf_pair

            cache = Path(os.environ["SPECO3_TEST_CACHE"]) if os.environ.get("SPECO3_TEST_CACHE") else work / "tiny"
            text, mmproj = tiny_gguf_pair(cache, "Q8_0")
        ctx = 4096 if args.quick else args.ctx
        from speco3.imaging import DEFAULT_MAX_TOKENS

        cap = "none"  # the engine's default cap (speco3.imaging.DEFAULT_MAX_TOKENS)
        loads = {"ours": _child(text, mmproj, ctx, cap, "f16", args.threads),
                 "ours_mmap": _child(text, mmproj, ctx, cap, "f16", args.threads, mmap="1"),
                 "ours_read": _child(text, mmproj, ctx, cap, "f16", args.threads, mmap="0"),
                 "ours_read_q8_kv": _child(text, mmproj, ctx, cap, "q8_0", args.threads, mmap="0")}
        binary = _server_binary()
        if binary is not None:
            loads["llama_server"] = _server_load(binary, text, mmproj, ctx, args.threads)
            loads["llama_server_no_mmap"] = _server_load(binary, text, mmproj, ctx, args.threads, mmap=False)
        ratios = {}
        for key, v in loads.items():
            if key.startswith("llama_server") or "llama_server" not in loads:
                continue
            same = loads["llama_server" if v["mmap"] else "llama_server_no_mmap"]
            ratios[key] = {"load": round(v["load_s"] / loads["llama_server"]["load_s"], 3),
                           "peak": round(v["peak_after_load"] / loads["llama_server"]["peak_after_load"], 4),
                           "load_same_mode": round(v["load_s"] / same["load_s"], 3),
                           "peak_same_mode": round(v["peak_after_load"] / same["peak_after_load"], 4),
                           "peak_anon_same_mode": round(v["peak_anon"] / same["peak_anon"], 4)}
        quality = _kv_quality(text, mmproj, ctx, args.threads, work)
    mib = {k: {kk: (round(vv / 2**20, 1) if kk.startswith(("peak", "rss")) else round(vv, 2) if isinstance(vv, float) else vv)
               for kk, vv in v.items()} for k, v in loads.items()}
    print(json.dumps({"model": f"{text.name} + {mmproj.name}", "n_ctx": ctx, "image_cap_now": DEFAULT_MAX_TOKENS,
                      "loads": mib, "ratios_to_llama_server": ratios or None, "q8_0_kv_quality": quality,
                      "note": "peaks are VmHWM (peak_anon: RssAnon) in MiB; load_s to ready (llama-server: until /health answers); CPU, "
                              "flash attention, mtmd warm-up on; a shared 2-core machine is noisy"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Measure what loading a model pair really costs: a child process loads it with the real engine, encodes one
image at the token cap, generates a few tokens and reports its peak RSS increase (Linux: ``VmHWM`` after resetting it with
``/proc/self/clear_refs``), load time, image encode, prefill and decode rates, next to `speco3_models.fit`'s
estimate for the same settings. Shared by ``tests/engine/test_fit_rss.py`` and ``benchmarks/bench_fit.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import io, json, sys, time
import numpy as np
from PIL import Image
from speco3.engine import native
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine
from speco3.imaging import prepare_image
from speco3_models.fit import ModelShape, estimate

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024
    return out

text, mmproj, ctx, cap, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fa, kv = sys.argv[6] == "1", sys.argv[7]
native.ensure_backend()
buf = io.BytesIO()
# an image at the token cap: the estimate counts the encoder's buffers and a full prefill batch for one such image
Image.fromarray(np.random.default_rng(0).integers(0, 256, (1600, 2800, 3), dtype=np.uint8)).save(buf, format="PNG")
image = prepare_image(buf.getvalue(), max_tokens=cap)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current RSS
base = status()["VmRSS"]
settings = EngineSettings(n_ctx=ctx, n_threads=threads, image_max_tokens=cap, n_gpu_layers=0, mmproj_on_gpu=False, use_mmap=False,
                          flash_attn=fa, kv_type=kv)
t0 = time.perf_counter()
engine = LlamaMtmdEngine(text, mmproj, settings, warmup=True)
engine.load()
load_s = time.perf_counter() - t0
engine.extend(["<|im_start|>user\n", image, "Describe the spectrum.<|im_end|>\n<|im_start|>assistant\n"])
res = engine.generate(max_tokens=32)
st = engine.stats()
peak = status()["VmHWM"]
est = estimate(ModelShape.from_gguf(text, mmproj), ctx, kv_type=settings.kv_type, flash_attn=settings.flash_attn,
               image_max_tokens=cap)
print(json.dumps({
    "n_ctx": ctx, "measured_peak_rss_increase_bytes": peak - base, "estimated_bytes": est.total_bytes,
    "estimate_parts": est.parts(), "load_s": load_s, "image_tokens": image.n_tokens,
    "image_encode_ms_per_token": 1000 * st.extra.get("image_seconds", 0.0) / max(1, st.image_tokens_encoded),
    "prefill_tokens_per_s": st.prefill_tokens_per_s, "decode_tokens_per_s": st.decode_tokens_per_s,
    "tokens_generated": res.n_tokens, "baseline_rss_bytes": base,
}))
"""


def measure_load(text: str | Path, mmproj: str | Path, n_ctx: int, *, image_max_tokens: int = 1280,
                 threads: int = 2, flash_attn: bool = True, kv_type: str = "f16", timeout: float = 1200.0) -> dict:
    """Load ``text`` + ``mmproj`` at ``n_ctx`` in a fresh child process; its figures as a dict (see the module)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*sys.path[1:], env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(text), str(mmproj), str(n_ctx), str(image_max_tokens),
                           str(threads), "1" if flash_attn else "0", kv_type], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"load measurement failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["error"] = out["estimated_bytes"] / out["measured_peak_rss_increase_bytes"] - 1
    return out

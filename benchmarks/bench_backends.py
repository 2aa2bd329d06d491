"""Benchmark: the engine on the CPU backend against the GPU backend of the same llama.cpp build.

Loads a model pair twice in one process, with ``n_gpu_layers=0`` (the CPU alone) and with every layer and the
projector on the first GPU device ggml lists (`--gpu-layers`), and measures for each: load seconds, image
encode seconds, prefill tokens/s (a prompt of ``--prompt-tokens`` text tokens after the image) and decode tokens/s
(``--max-tokens`` greedy tokens). The backend is what llama-cpp-python was compiled with: run it with the Vulkan
venv (``scripts/setup-vulkan.sh``) or the bundle with dynamically loaded backends (``scripts/build-bundle.sh``,
``.venv-bundle/bin/python``: the backend modules it loaded, and its CPU variant, are in ``backend_modules``); on
lavapipe set ``GGML_VK_VISIBLE_DEVICES=0`` (ggml skips CPU-type Vulkan devices otherwise). Without ``--text``/``--mmproj`` the tiny test pair (``--quant``, default F32) is built into
``SPECO3_TEST_CACHE`` when set, else a temporary folder. Prints JSON.

Run: ``GGML_VK_VISIBLE_DEVICES=0 .venv-vulkan/bin/python benchmarks/bench_backends.py``; ``--quick``: a short
prompt, 8 tokens, a small image, one run. Without a GPU device ``gpu`` says so and only the CPU is measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import _kit  # puts the test kit on sys.path; model_pair
import numpy as np
from PIL import Image

from speco3.engine import native
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine
from speco3.imaging import prepare_image

REQUIRES = ("llama_cpp",)
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("model", "devices", "cpu", "gpu")


def _image(width: int, height: int):
    import io

    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return prepare_image(buf.getvalue())


def measure(text, mmproj, n_gpu_layers: int, args) -> dict:
    settings = EngineSettings(n_ctx=4096, n_threads=args.threads, n_gpu_layers=n_gpu_layers,
                              mmproj_on_gpu=n_gpu_layers != 0, flash_attn=False, kv_type="f16", temperature=0.0)
    t0 = time.perf_counter()
    engine = LlamaMtmdEngine(text, mmproj, settings, warmup=False)
    engine.load()
    load_s = time.perf_counter() - t0
    try:
        image = _image(*args.image)
        words = " ".join(["spectrum"] * (args.prompt_tokens * 2))
        body = engine.detokenize(engine.tokenize(words)[: args.prompt_tokens])
        engine.extend(["<|im_start|>user\n", image, body + "<|im_end|>\n<|im_start|>assistant\n"])
        engine.evaluate()  # warm-up: pipelines and buffers
        best = None
        for _ in range(args.repeat):
            engine.reset(keep_cache=False)
            engine.image_cache.clear()
            engine.extend(["<|im_start|>user\n", image])
            t1 = time.perf_counter()
            engine.evaluate()
            image_s = time.perf_counter() - t1
            engine.extend([body + "<|im_end|>\n<|im_start|>assistant\n"])
            n_prompt = engine.plan().pending_text_tokens
            t2 = time.perf_counter()
            engine.evaluate()
            prefill_s = time.perf_counter() - t2
            t3 = time.perf_counter()
            res = engine.generate(max_tokens=args.max_tokens)
            decode_s = time.perf_counter() - t3
            run = {"image_tokens": image.n_tokens, "image_s": round(image_s, 4), "prefill_tokens": n_prompt,
                   "prefill_tok_s": round(n_prompt / prefill_s, 1), "decode_tokens": res.n_tokens,
                   "decode_tok_s": round(res.n_tokens / decode_s, 1)}
            best = run if best is None or run["decode_tok_s"] > best["decode_tok_s"] else best
        st = engine.stats()
        return {"backend": st.backend, "mmproj_backend": st.extra["mmproj_backend"],
                "n_gpu_layers": st.extra["n_gpu_layers"], "fit": st.extra["fit"], "load_s": round(load_s, 3), **best}
    finally:
        engine.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", help="text GGUF (default: the tiny test model)")
    ap.add_argument("--mmproj", help="projector GGUF")
    ap.add_argument("--quant", default="F32", help="quant of the tiny model (default F32)")
    ap.add_argument("--gpu-layers", type=int, default=-1, help="layers on the device (-1: all)")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--image", type=int, nargs=2, default=(448, 336), metavar=("W", "H"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="runs per backend (the best decode rate is kept)")
    ap.add_argument("--quick", action="store_true", help="32 prompt tokens, 8 sampled, a small image, one run")
    args = ap.parse_args(argv)
    if args.quick:
        args.prompt_tokens, args.max_tokens, args.image, args.repeat = 32, 8, (112, 84), 1
    with tempfile.TemporaryDirectory() as tmp:
        text, mmproj, model = _kit.model_pair(args, tmp)
        native.ensure_backend()
        gpus = [d for d in native.list_devices() if d.kind in ("GPU", "IGPU", "ACCEL")]
        modules = native.backend_modules()
        report = {"model": model, "devices": [f"{d.backend}:{d.name} ({d.description})" for d in native.list_devices()],
                  "backend_modules": None if modules is None or not modules.dynamic else {
                      "cpu_variant": modules.cpu_variant, "notice": native.backend_notice(),
                      "gpu": {m.name: m.devices if m.loaded else m.reason for m in modules.modules}},
                  "cpu": measure(text, mmproj, 0, args)}
        report["gpu"] = measure(text, mmproj, args.gpu_layers, args) if gpus else "no GPU device in ggml's registry"
    if isinstance(report["gpu"], dict):
        report["gpu_over_cpu"] = {k: round(report["gpu"][k] / report["cpu"][k], 3)
                                  for k in ("load_s", "image_s", "prefill_tok_s", "decode_tok_s")}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

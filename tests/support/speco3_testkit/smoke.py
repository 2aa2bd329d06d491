"""Load a text+projector GGUF pair in llama-cpp-python and run one image+text forward, in a child process.

llama.cpp aborts the whole process on some malformed files, so a freshly written or imported pair is
first exercised here, in a subprocess: the text model and the projector are loaded through the mtmd API,
a prompt with one image is evaluated chunk by chunk (``mtmd_helper_eval_chunk_single``), and a few greedy
tokens are decoded. The result carries the last-prompt-token logits, the greedy tokens and the prompt's
chunk layout (text token ids, image grid), which is what a parity check against transformers needs.
Numerically tight settings are the default: F32 KV cache and flash attention off in both contexts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from speco3.errors import EngineError

logger = logging.getLogger(__name__)

MARKER = "<__media__>"
DEFAULT_PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + MARKER
                  + "\nDescribe this spectrum.<|im_end|>\n<|im_start|>assistant\n")


def run_pair(text: str | Path, mmproj: str | Path, image: str | Path, *, prompt: str = DEFAULT_PROMPT,
             n_predict: int = 4, n_ctx: int = 1024, n_threads: int = 2, f32_kv: bool = True,
             flash_attn: bool = False, lora: list | None = None) -> dict[str, Any]:
    """Run the forward pass in *this* process (the child). See :func:`smoke_test`."""
    import ctypes

    import llama_cpp
    from llama_cpp import mtmd_cpp as mtmd

    llm = llama_cpp.Llama(str(text), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_gpu_layers=0,
                          n_threads=n_threads, n_threads_batch=n_threads, flash_attn=flash_attn,
                          type_k=0 if f32_kv else None, type_v=0 if f32_kv else None, verbose=False)
    lctx, model = llm._ctx.ctx, llm._model.model
    if lora:  # [[adapter_gguf, scale], ...] set on the context as the engine does
        handles = [llama_cpp.llama_adapter_lora_init(model, str(path).encode()) for path, _ in lora]
        if not all(handles):
            raise RuntimeError(f"llama_adapter_lora_init failed for one of {[p for p, _ in lora]}")
        arr = (llama_cpp.llama_adapter_lora_p_ctypes * len(handles))(*handles)
        scales = (ctypes.c_float * len(handles))(*(float(s) for _, s in lora))
        if llama_cpp.llama_set_adapters_lora(lctx, arr, len(handles), scales) != 0:
            raise RuntimeError("llama_set_adapters_lora failed")
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = n_threads
    params.warmup = False
    params.print_timings = False
    params.flash_attn_type = 1 if flash_attn else 0  # LLAMA_FLASH_ATTN_TYPE_ENABLED / _DISABLED
    mctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), model, params)
    if not mctx:
        raise RuntimeError(f"mtmd_init_from_file failed for {mmproj}")
    data = Path(image).read_bytes()
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(mctx, buf, len(data), False)
    if not bitmap:
        raise RuntimeError(f"cannot decode image {image}")
    chunks = mtmd.mtmd_input_chunks_init()
    txt = mtmd.mtmd_input_text(prompt.encode("utf-8"), len(prompt.encode("utf-8")), False, True)
    bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
    rc = mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(txt), bitmaps, 1)
    if rc != 0:
        raise RuntimeError(f"mtmd_tokenize returned {rc}")
    layout: list[dict[str, Any]] = []
    n_past = 0
    n_chunks = mtmd.mtmd_input_chunks_size(chunks)
    for i in range(n_chunks):
        chunk = mtmd.mtmd_input_chunks_get(chunks, i)
        if mtmd.mtmd_input_chunk_get_type(chunk) == 0:  # MTMD_INPUT_CHUNK_TYPE_TEXT
            n = ctypes.c_size_t(0)
            ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            layout.append({"type": "text", "tokens": [int(ptr[k]) for k in range(n.value)]})
        else:
            img = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
            layout.append({"type": "image", "n_tokens": int(mtmd.mtmd_input_chunk_get_n_tokens(chunk)),
                           "nx": int(mtmd.mtmd_image_tokens_get_nx(img)),
                           "ny": int(mtmd.mtmd_image_tokens_get_ny(img)),
                           "n_pos": int(mtmd.mtmd_input_chunk_get_n_pos(chunk))})
        new_n_past = llama_cpp.llama_pos(n_past)  # text chunks *add* to it
        rc = mtmd.mtmd_helper_eval_chunk_single(mctx, lctx, chunk, n_past, 0, 512, i == n_chunks - 1,
                                                ctypes.byref(new_n_past))
        if rc != 0:
            raise RuntimeError(f"evaluating chunk {i} failed ({rc})")
        n_past = new_n_past.value
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), shape=(n_vocab,)).copy()
    first_logits = logits
    tokens: list[int] = []
    batch = llama_cpp.llama_batch_init(1, 0, 1)
    try:
        for _ in range(n_predict):
            tok = int(np.argmax(logits))
            tokens.append(tok)
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = tok, n_past, 1, True
            batch.seq_id[0][0] = 0
            if llama_cpp.llama_decode(lctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            n_past += 1
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), shape=(n_vocab,)).copy()
    finally:
        llama_cpp.llama_batch_free(batch)
    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bitmap)
    mtmd.mtmd_free(mctx)
    pieces = llm.detokenize(tokens).decode("utf-8", errors="replace")
    llm.close()
    return {"layout": layout, "n_vocab": int(n_vocab), "tokens": tokens, "text": pieces,
            "finite": bool(np.isfinite(first_logits).all()), "logits": first_logits}


def smoke_test(text: str | Path, mmproj: str | Path, image: str | Path, *, timeout: float = 300,
               **kwargs: Any) -> dict[str, Any]:
    """Load a GGUF pair and run one image+text forward in a child process.

    Parameters
    ----------
    text, mmproj : path-like
        Text-model and projector GGUF files.
    image : path-like
        PNG/JPEG file (sides multiples of 28 are used as they are).
    timeout : float
        Seconds before the child is killed.
    **kwargs
        ``prompt`` (with the ``<__media__>`` marker), ``n_predict``, ``n_ctx``, ``n_threads``,
        ``f32_kv``, ``flash_attn``, ``lora`` (``[[adapter_gguf, scale], ...]``).

    Returns
    -------
    dict
        ``layout`` (prompt chunks), ``tokens`` (greedy), ``text``, ``finite``, ``logits``
        (numpy array of the last prompt position), ``n_vocab``.

    Raises
    ------
    EngineError
        If the child crashes, times out or reports an error (its stderr tail is included).
    """
    with tempfile.TemporaryDirectory(prefix="speco3-smoke-") as tmp:
        out = Path(tmp) / "result"
        args = {"text": str(text), "mmproj": str(mmproj), "image": str(image), "out": str(out), **kwargs}
        cmd = [sys.executable, "-m", "speco3_testkit.smoke", json.dumps(args)]
        kit_root = str(Path(__file__).resolve().parents[1])  # the child imports this module from the test kit
        path = os.pathsep.join(p for p in (kit_root, os.environ.get("PYTHONPATH", "")) if p)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path})
        except subprocess.TimeoutExpired as exc:
            raise EngineError(f"{Path(text).name}: forward pass did not finish within {timeout:.0f} s") from exc
        if proc.returncode != 0 or not out.with_suffix(".json").is_file():
            tail = "\n".join((proc.stderr or "").strip().splitlines()[-8:])
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            raise EngineError(f"{Path(text).name} + {Path(mmproj).name}: llama.cpp failed ({how}):\n{tail}")
        result = json.loads(out.with_suffix(".json").read_text())
        result["logits"] = np.load(out.with_suffix(".npy"))
    return result


def _child(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m speco3_testkit.smoke")
    parser.add_argument("spec", help="JSON object with text, mmproj, image, out and run_pair options")
    spec = json.loads(parser.parse_args(argv).spec)
    out = Path(spec.pop("out"))
    try:
        result = run_pair(spec.pop("text"), spec.pop("mmproj"), spec.pop("image"), **spec)
    except Exception as exc:  # reported to the parent through stderr and the exit code
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    np.save(out.with_suffix(".npy"), result.pop("logits"))
    out.with_suffix(".json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))

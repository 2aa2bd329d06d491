"""Benchmark: GGUF checks and file hashing of the model store on a full-size Qwen2.5-VL-7B Q4_K_M-shaped file.

The text model file is written sparse: real metadata (152,064 tokens, 151,387 merges, token types), the real 339
tensor shapes and types (Q4_K matrices, F32 norms and biases) and the real total size (~4.4 GB), but its tensor
data is a hole, so it costs no disk and no time to make. Measured:

- ``scan``: the bounded structural scan that also decodes metadata (`speco3_models.gguf_scan.scan_gguf`);
- ``summary``: `read_gguf_summary` (scan only); ``summary_cross_checked_with_reader``: the same with
  ``use_reader=True`` (import and verify); ``check``: `check_text_model` on a summary;
- reference: ``gguf.GGUFReader(path)`` alone, in the same process;
- ``sha256`` MB/s vs a plain read of the same (page-cached) 512 MB file.

Run: ``.venv/bin/python benchmarks/bench_model_checks.py``; prints JSON. ``--quick``: 2 layers and 8,192 tokens
(same file layout, seconds), a 16 MB hashing file, one run of each timing.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from speco3_base.fileio import sha256_file
from speco3_models.gguf_check import check_text_model, read_gguf_summary
from speco3_models.gguf_scan import scan_gguf

N_EMBD, N_FF, N_LAYER, N_VOCAB = 3584, 18944, 28, 152064
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("file", "seconds", "ratios", "hashing")


def _qbytes(rows: int, cols: int, qtype: QT) -> tuple[int, int]:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return rows, cols // block * size


def write_sparse_7b(path: Path, n_layer: int = N_LAYER, n_vocab: int = N_VOCAB) -> int:
    w = gguf.GGUFWriter(str(path), "qwen2vl")
    w.add_block_count(n_layer)
    w.add_context_length(128000)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(28)
    w.add_head_count_kv(4)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_sections([16, 24, 24, 0])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([f"tok{i:06d}" for i in range(n_vocab)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges([f"t{i} k{i}" for i in range(n_vocab - 677)])
    w.add_chat_template("{{ messages }}")
    total = 0

    def add(name: str, rows: int, cols: int | None, qtype: QT) -> None:
        nonlocal total
        if cols is None:
            shape, nbytes, dtype = (rows,), rows * 4, np.float32
        else:
            shape = _qbytes(rows, cols, qtype)
            nbytes, dtype = shape[0] * shape[1], np.uint8
        w.add_tensor_info(name, shape, np.dtype(dtype), nbytes, raw_dtype=qtype)
        total += nbytes + (-nbytes % 32)

    add("token_embd.weight", n_vocab, N_EMBD, QT.Q4_K)
    add("output.weight", n_vocab, N_EMBD, QT.Q6_K)
    add("output_norm.weight", N_EMBD, None, QT.F32)
    for i in range(n_layer):
        add(f"blk.{i}.attn_norm.weight", N_EMBD, None, QT.F32)
        add(f"blk.{i}.ffn_norm.weight", N_EMBD, None, QT.F32)
        add(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD, QT.Q4_K)
        add(f"blk.{i}.attn_q.bias", N_EMBD, None, QT.F32)
        add(f"blk.{i}.attn_k.weight", 512, N_EMBD, QT.Q4_K)
        add(f"blk.{i}.attn_k.bias", 512, None, QT.F32)
        add(f"blk.{i}.attn_v.weight", 512, N_EMBD, QT.Q6_K)
        add(f"blk.{i}.attn_v.bias", 512, None, QT.F32)
        add(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD, QT.Q4_K)
        add(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD, QT.Q4_K)
        add(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD, QT.Q4_K)
        add(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF, QT.Q6_K if i % 3 == 0 else QT.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    head = path.stat().st_size
    size = head + (-head % 32) + total
    with open(path, "r+b") as fh:
        fh.truncate(size)
    return size


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 layers, 8,192 tokens, a 16 MB hashing file, one run each")
    args = ap.parse_args(argv)
    n_layer, n_vocab = (2, 8192) if args.quick else (N_LAYER, N_VOCAB)
    repeat = 1 if args.quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sparse-7b-Q4_K_M.gguf"
        t0 = time.perf_counter()
        size = write_sparse_7b(path, n_layer, n_vocab)
        t_write = time.perf_counter() - t0
        t_reader, _ = timed(lambda: gguf.GGUFReader(str(path)), repeat)
        t_scan, scan = timed(lambda: scan_gguf(path), repeat)
        t_summary, summary = timed(lambda: read_gguf_summary(path), repeat)
        t_deep, _ = timed(lambda: read_gguf_summary(path, use_reader=True), repeat=1)
        t_check, _ = timed(lambda: check_text_model(summary), repeat)
        blob = Path(tmp) / "blob.bin"
        blob.write_bytes(os.urandom((16 if args.quick else 512) << 20))
        mb = blob.stat().st_size / 1e6

        def plain_read():
            with open(blob, "rb") as fh:
                while fh.read(8 << 20):
                    pass

        t_read, _ = timed(plain_read, repeat)
        t_hash, _ = timed(lambda: sha256_file(blob), repeat)
    print(json.dumps({
        "file": {"size_bytes": size, "tensors": scan.n_tensors, "metadata_keys": scan.n_kv,
                 "tokens": n_vocab, "layers": n_layer, "written_in_s": round(t_write, 2)},
        "seconds": {"scan": round(t_scan, 3), "summary": round(t_summary, 3),
                    "summary_cross_checked_with_reader": round(t_deep, 3),
                    "check_text_model": round(t_check, 4), "reference_GGUFReader_alone": round(t_reader, 3)},
        "ratios": {"summary_vs_reader": round(t_summary / t_reader, 4),
                   "cross_checked_vs_reader": round(t_deep / t_reader, 3)},
        "hashing": {"sha256_MB_s": round(mb / t_hash, 1), "plain_read_MB_s": round(mb / t_read, 1),
                    "sha256_vs_read": round(t_read / t_hash, 3),
                    "sha256_7b_pair_estimate_s": round((size + 1.35e9) / 1e6 / (mb / t_hash), 1)},
    }, indent=2))


if __name__ == "__main__":
    main()

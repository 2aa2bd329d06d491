"""Write a random-weight Qwen2.5-VL text GGUF of a given shape in the Q4_K_M tensor-type mix, fast, for speed and
memory measurements where the real weights cannot go (the GPU machine of ``benchmarks/gpu_device_check.sh``).

Nothing is quantized: each tensor's blocks are random bytes with a small finite scale (Q4_K: ``d``/``dmin``; Q6_K:
``d``) written in place, so a 7B-shaped file (4.4 GiB) takes seconds instead of a 15 GB F16 checkpoint plus
``llama-quantize``. The types follow llama.cpp's Q4_K_M rule for this architecture: Q4_K everywhere, Q6_K for the
output layer and for ``attn_v``/``ffn_down`` in the layers that rule gives more bits (the first and last eighth and
every third in between), F32 norms and biases. The vocabulary is llama.cpp's ``none`` type with ``vocab_size``
dummy tokens: ``llama-bench`` and ``llama-batched-bench`` feed token ids and need no tokenizer. The numbers the
model computes are noise; its sizes, kernels and memory are those of the real shape.

Only gguf-py and numpy are needed (the GPU machine has no project environment): ``PYTHONPATH=<llama.cpp>/gguf-py
python3 benchmarks/make_gguf_shape.py --shape 7b --out 7b.gguf``; ``--shape small`` writes a tiny one for trying
the script on a CPU.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType

#: (hidden, intermediate, layers, heads, kv heads, vocab) per shape (Qwen2.5-VL-7B's text model for "7b").
SHAPES = {
    "7b": (3584, 18944, 28, 28, 4, 152064),
    "small": (256, 512, 4, 4, 2, 4096),
}
Q4_K, Q6_K = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K
BLOCK = {Q4_K: 144, Q6_K: 210}  # bytes per 256 weights


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's ``use_more_bits`` for Q4_K_M: the first and last eighth of the layers and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def random_blocks(rng: np.random.Generator, pool: np.ndarray, rows: int, cols: int, qtype) -> np.ndarray:
    """``rows × cols`` weights of ``qtype`` as raw blocks (uint8 rows), from a random pool at a random offset, with
    every block's scale(s) set to a small finite float16."""
    per_row = cols // 256 * BLOCK[qtype]
    n = rows * per_row
    start = int(rng.integers(0, pool.size - n)) if pool.size > n else 0
    data = np.array(pool[start:start + n], copy=True).reshape(rows, per_row // BLOCK[qtype], BLOCK[qtype])
    scale = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
    if qtype == Q4_K:  # d, dmin at the start of the block
        data[:, :, 0:2] = scale
        data[:, :, 2:4] = scale
    else:  # Q6_K: ql[128] qh[64] scales[16] d
        data[:, :, 208:210] = scale
    return data.reshape(rows, per_row)


def write(shape: str, out: Path, ctx_train: int = 128000) -> dict[str, float]:
    hidden, ff, layers, heads, kv_heads, vocab = SHAPES[shape]
    kv = hidden // heads * kv_heads
    rng = np.random.default_rng(0)
    biggest = vocab * hidden // 256 * BLOCK[Q6_K]
    pool = rng.integers(0, 256, size=biggest + (1 << 20), dtype=np.uint8)
    arch = "qwen2vl"
    w = GGUFWriter(str(out), arch)
    w.add_name(f"random {shape}-shaped Qwen2.5-VL text model")
    w.add_block_count(layers)
    w.add_context_length(ctx_train)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_sections([16, 24, 24, 0])
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("none")
    w.add_file_type(LlamaFileType.MOSTLY_Q4_K_M)

    def quant(name: str, rows: int, cols: int, qtype) -> None:
        w.add_tensor(name, random_blocks(rng, pool, rows, cols, qtype), raw_dtype=qtype)

    def f32(name: str, n: int) -> None:
        w.add_tensor(name, rng.standard_normal(n, dtype=np.float32) * 0.02 + (1.0 if "norm" in name else 0.0))

    quant("token_embd.weight", vocab, hidden, Q4_K)
    f32("output_norm.weight", hidden)
    quant("output.weight", vocab, hidden, Q6_K)
    for i in range(layers):
        b = f"blk.{i}"
        f32(f"{b}.attn_norm.weight", hidden)
        quant(f"{b}.attn_q.weight", hidden, hidden, Q4_K)
        f32(f"{b}.attn_q.bias", hidden)
        quant(f"{b}.attn_k.weight", kv, hidden, Q4_K)
        f32(f"{b}.attn_k.bias", kv)
        quant(f"{b}.attn_v.weight", kv, hidden, Q6_K if more_bits(i, layers) else Q4_K)
        f32(f"{b}.attn_v.bias", kv)
        quant(f"{b}.attn_output.weight", hidden, hidden, Q4_K)
        f32(f"{b}.ffn_norm.weight", hidden)
        quant(f"{b}.ffn_gate.weight", ff, hidden, Q4_K)
        quant(f"{b}.ffn_up.weight", ff, hidden, Q4_K)
        # ffn_down's rows are 18944 wide: 74 blocks of 256
        quant(f"{b}.ffn_down.weight", hidden, ff, Q6_K if more_bits(i, layers) else Q4_K)
    t0 = time.perf_counter()
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"seconds": round(time.perf_counter() - t0, 2), "bytes": out.stat().st_size}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    info = write(a.shape, a.out)
    print(f"make_gguf_shape: {a.shape} → {a.out}: {info['bytes'] / 2**30:.2f} GiB in {info['seconds']} s")


if __name__ == "__main__":
    main()

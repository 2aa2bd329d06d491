"""Small GGUF files written with gguf.GGUFWriter: a Qwen2.5-VL-shaped text model and vision projector.

The weights are tiny random arrays: enough for every header, metadata and shape check of the model store, not
for llama.cpp to run (the tests that load a model use the converter's tiny checkpoint).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_text_gguf(path: Path, *, n_embd: int = 64, n_layer: int = 2, n_ff: int = 96, n_vocab: int = 80,
                    arch: str = "qwen2vl", drop_tensors: tuple[str, ...] = (), drop_keys: tuple[str, ...] = (),
                    tied: bool = True, seed: int = 0) -> Path:
    """Write a text-model GGUF (arch ``qwen2vl`` unless told otherwise) and return its path."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    keys = {
        "block_count": lambda k: w.add_uint32(k, n_layer),
        "context_length": lambda k: w.add_uint32(k, 4096),
        "embedding_length": lambda k: w.add_uint32(k, n_embd),
        "feed_forward_length": lambda k: w.add_uint32(k, n_ff),
        "attention.head_count": lambda k: w.add_uint32(k, 4),
        "attention.head_count_kv": lambda k: w.add_uint32(k, 2),
        "attention.layer_norm_rms_epsilon": lambda k: w.add_float32(k, 1e-6),
        "rope.dimension_sections": lambda k: w.add_array(k, [2, 3, 3, 0]),
    }
    for name, add in keys.items():
        if f"{arch}.{name}" not in drop_keys:
            add(f"{arch}.{name}")
    w.add_name("tiny test model")
    w.add_type("model")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if "tokenizer.ggml.tokens" not in drop_keys:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list([f"t{i}" for i in range(n_vocab)])

    def t(name, *shape):  # shape in numpy order (rows, cols)
        if name not in drop_tensors:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))

    t("token_embd.weight", n_vocab, n_embd)
    t("output_norm.weight", n_embd)
    if not tied:
        t("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        t(f"blk.{i}.attn_norm.weight", n_embd)
        for p in ("q", "k", "v"):
            t(f"blk.{i}.attn_{p}.weight", n_embd, n_embd)
            t(f"blk.{i}.attn_{p}.bias", n_embd)
        t(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        t(f"blk.{i}.ffn_norm.weight", n_embd)
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    _finish(w)
    return path


def write_mmproj_gguf(path: Path, *, proj_dim: int = 64, v_embd: int = 32, n_layer: int = 2, v_ff: int = 48,
                      projector_type: str = "qwen2.5vl_merger", n_wa_pattern: int = 2, write_proj_dim: bool = True,
                      drop_tensors: tuple[str, ...] = (), has_vision: bool = True, seed: int = 1) -> Path:
    """Write a Qwen2.5-VL-shaped vision projector GGUF (arch ``clip``) and return its path."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_type("mmproj")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_bool("clip.has_vision_encoder", has_vision)
    w.add_string("clip.projector_type", projector_type)
    w.add_bool("clip.use_silu", True)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.embedding_length", v_embd)
    w.add_uint32("clip.vision.feed_forward_length", v_ff)
    w.add_uint32("clip.vision.attention.head_count", 2)
    w.add_uint32("clip.vision.patch_size", 14)
    w.add_uint32("clip.vision.image_size", 560)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.n_wa_pattern", n_wa_pattern)
    if write_proj_dim:
        w.add_uint32("clip.vision.projection_dim", proj_dim)
    w.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])

    def t(name, *shape):
        if name not in drop_tensors:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))

    t("v.patch_embd.weight", v_embd, 3, 14, 14)
    t("v.patch_embd.weight.1", v_embd, 3, 14, 14)
    for i in range(n_layer):
        t(f"v.blk.{i}.ln1.weight", v_embd)
        t(f"v.blk.{i}.ln2.weight", v_embd)
        for p in ("q", "k", "v"):
            t(f"v.blk.{i}.attn_{p}.weight", v_embd, v_embd)
            t(f"v.blk.{i}.attn_{p}.bias", v_embd)
        t(f"v.blk.{i}.attn_out.weight", v_embd, v_embd)
        t(f"v.blk.{i}.attn_out.bias", v_embd)
        t(f"v.blk.{i}.ffn_gate.weight", v_ff, v_embd)
        t(f"v.blk.{i}.ffn_up.weight", v_ff, v_embd)
        t(f"v.blk.{i}.ffn_down.weight", v_embd, v_ff)
    merged = 4 * v_embd
    t("v.post_ln.weight", v_embd)
    t("mm.0.weight", merged, merged)
    t("mm.0.bias", merged)
    t("mm.2.weight", proj_dim, merged)
    t("mm.2.bias", proj_dim)
    _finish(w)
    return path


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def rewrite_gguf(src: Path, dst: Path, overrides: dict) -> Path:
    """Copy a GGUF file with some metadata values replaced (tensors copied byte for byte).

    ``general.architecture`` may be among the overrides: only that value changes (the keys keep their prefix).
    """
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), overrides.get("general.architecture", r.fields["general.architecture"].contents()))
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, overrides.get(key, f.contents()), vtype, sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=[int(x) for x in reversed(t.shape)], raw_dtype=t.tensor_type)
    _finish(w)
    return dst

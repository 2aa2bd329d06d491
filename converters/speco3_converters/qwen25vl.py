"""Qwen2.5-VL (Spec-o3-7B / -3B, stock Qwen2.5-VL-3B/7B-Instruct): tensor mapping and GGUF metadata.

Text model → arch ``qwen2vl`` (llama.cpp ``src/models/qwen2vl.cpp``); vision tower and merger → arch
``clip`` with projector type ``qwen2.5vl_merger`` (``tools/mtmd/models/qwen2vl.cpp``). The mapping is the
one of llama.cpp's ``conversion/qwenvl.py`` (facts: ``docs/design.md`` §6), with two differences on
purpose: both checkpoint naming layouts are accepted (``visual.*``/``model.*`` and
``model.visual.*``/``model.language_model.*``), and the Spec-o3 chat template is written.
"""

from __future__ import annotations

import logging
from pathlib import Path

import gguf
from gguf import GGMLQuantizationType as QT

from speco3_base.errors import ConversionError

from .chat_template import speco3_chat_template
from .hfconfig import Qwen25VLConfig, load_config
from .plan import OUTTYPES, ConversionPlan, FilePlan, PlannedTensor
from .safetensors_io import SafetensorsCheckpoint
from .tokenizer import Vocab, load_vocab

logger = logging.getLogger(__name__)

IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

_TEXT_LAYER = {  # HF suffix -> (GGUF suffix, shape builder)
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}

_VISION_BLOCK = {
    "norm1.weight": "ln1.weight",
    "norm2.weight": "ln2.weight",
    "attn.proj.weight": "attn_out.weight",
    "attn.proj.bias": "attn_out.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.gate_proj.bias": "ffn_gate.bias",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.up_proj.bias": "ffn_up.bias",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.down_proj.bias": "ffn_down.bias",
}


def canonical_name(name: str) -> str:
    """Map a checkpoint tensor name of either naming layout to the classic ``visual.*``/``model.*`` form."""
    for old, new in (("model.language_model.", "model."), ("language_model.model.", "model."),
                     ("language_model.lm_head.", "lm_head."), ("model.visual.", "visual.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def detect_layout(names: list[str]) -> str:
    new = any(n.startswith(("model.language_model.", "model.visual.")) for n in names)
    classic = any(n.startswith(("visual.", "model.layers.", "model.embed_tokens.")) for n in names)
    return "mixed" if new and classic else ("new" if new else "classic")


def expected_shapes(cfg: Qwen25VLConfig, tied: bool) -> dict[str, tuple[int, ...]]:
    """Canonical HF tensor names of a complete checkpoint and their shapes (PyTorch order)."""
    t, v = cfg.text, cfg.vision
    hd = t.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (t.vocab_size, t.hidden)}
    per_layer = {
        "input_layernorm.weight": (t.hidden,),
        "self_attn.q_proj.weight": (t.n_heads * hd, t.hidden),
        "self_attn.q_proj.bias": (t.n_heads * hd,),
        "self_attn.k_proj.weight": (t.n_kv_heads * hd, t.hidden),
        "self_attn.k_proj.bias": (t.n_kv_heads * hd,),
        "self_attn.v_proj.weight": (t.n_kv_heads * hd, t.hidden),
        "self_attn.v_proj.bias": (t.n_kv_heads * hd,),
        "self_attn.o_proj.weight": (t.hidden, t.n_heads * hd),
        "post_attention_layernorm.weight": (t.hidden,),
        "mlp.gate_proj.weight": (t.intermediate, t.hidden),
        "mlp.up_proj.weight": (t.intermediate, t.hidden),
        "mlp.down_proj.weight": (t.hidden, t.intermediate),
    }
    for i in range(t.n_layers):
        for suffix, shape in per_layer.items():
            shapes[f"model.layers.{i}.{suffix}"] = shape
    shapes["model.norm.weight"] = (t.hidden,)
    if not tied:
        shapes["lm_head.weight"] = (t.vocab_size, t.hidden)
    h, ff, p = v.hidden, v.intermediate, v.patch_size
    shapes["visual.patch_embed.proj.weight"] = (h, v.in_chans, v.temporal_patch_size, p, p)
    block = {
        "norm1.weight": (h,), "norm2.weight": (h,),
        "attn.qkv.weight": (3 * h, h), "attn.qkv.bias": (3 * h,),
        "attn.proj.weight": (h, h), "attn.proj.bias": (h,),
        "mlp.gate_proj.weight": (ff, h), "mlp.gate_proj.bias": (ff,),
        "mlp.up_proj.weight": (ff, h), "mlp.up_proj.bias": (ff,),
        "mlp.down_proj.weight": (h, ff), "mlp.down_proj.bias": (h,),
    }
    for i in range(v.depth):
        for suffix, shape in block.items():
            shapes[f"visual.blocks.{i}.{suffix}"] = shape
    m = h * v.spatial_merge_size ** 2
    shapes.update({
        "visual.merger.ln_q.weight": (h,),
        "visual.merger.mlp.0.weight": (m, m), "visual.merger.mlp.0.bias": (m,),
        "visual.merger.mlp.2.weight": (v.out_hidden, m), "visual.merger.mlp.2.bias": (v.out_hidden,),
    })
    return shapes


def _resolve_sources(ckpt: SafetensorsCheckpoint, cfg: Qwen25VLConfig) -> tuple[dict[str, str], bool, list[str]]:
    """Match checkpoint names to the canonical names; check completeness and shapes."""
    canon: dict[str, str] = {}
    for name in ckpt.names():
        if name.endswith(IGNORED_SUFFIXES):
            continue
        c = canonical_name(name)
        if c in canon:
            raise ConversionError(f"{ckpt.folder}: tensors {canon[c]!r} and {name!r} both map to {c!r}")
        canon[c] = name
    notes: list[str] = []
    tied = cfg.text.tied
    if not tied and "lm_head.weight" not in canon:
        raise ConversionError(
            f"{ckpt.folder}: tie_word_embeddings is false but the checkpoint has no lm_head.weight "
            "(incomplete checkpoint?)"
        )
    if tied and "lm_head.weight" in canon:
        notes.append("tied embeddings: lm_head.weight ignored, llama.cpp reuses token_embd")
    expected = expected_shapes(cfg, tied)
    missing = [n for n in expected if n not in canon]
    if missing:
        vis = sum(1 for n in missing if n.startswith("visual."))
        found = f"found {len(canon)} tensors ({sum(1 for n in canon if n.startswith('visual.'))} vision)"
        raise ConversionError(
            f"{ckpt.folder}: incomplete checkpoint: {found}; missing {len(missing)} "
            f"({vis} vision, {len(missing) - vis} text), e.g. {', '.join(missing[:4])}"
        )
    unexpected = sorted(n for n in canon if n not in expected and not (tied and n == "lm_head.weight"))
    if unexpected:
        raise ConversionError(
            f"{ckpt.folder}: {len(unexpected)} tensor(s) this Qwen2.5-VL converter does not know, "
            f"e.g. {', '.join(unexpected[:4])}"
        )
    bad = [f"{n} {list(ckpt[canon[n]].shape)} (expected {list(s)})"
           for n, s in expected.items() if tuple(ckpt[canon[n]].shape) != s]
    if bad:
        raise ConversionError(f"{ckpt.folder}: tensor shapes do not match config.json: {'; '.join(bad[:3])}")
    return canon, tied, notes


def _kvs_from(writer: gguf.GGUFWriter, plan: FilePlan) -> None:
    for key, val in writer.kv_data[0].items():
        if key != gguf.Keys.General.ARCHITECTURE:
            plan.add(key, val.value, val.type, val.sub_type)


def _text_plan(cfg: Qwen25VLConfig, vocab: Vocab, ckpt, canon, tied, outtype: str, name: str) -> FilePlan:
    qtype, ftype = OUTTYPES[outtype]
    t = cfg.text
    rec = gguf.GGUFWriter(None, "qwen2vl")
    rec.add_type(gguf.GGUFType.MODEL)
    rec.add_name(name)
    rec.add_block_count(t.n_layers)
    rec.add_context_length(t.context_length)
    rec.add_embedding_length(t.hidden)
    rec.add_feed_forward_length(t.intermediate)
    rec.add_head_count(t.n_heads)
    rec.add_head_count_kv(t.n_kv_heads)
    rec.add_rope_freq_base(t.rope_theta)
    rec.add_layer_norm_rms_eps(t.rms_eps)
    rec.add_rope_dimension_sections(list(t.mrope_section) + [0] * (4 - len(t.mrope_section)))
    rec.add_file_type(ftype)
    rec.add_quantization_version(gguf.GGML_QUANT_VERSION)
    rec.add_tokenizer_model("gpt2")
    rec.add_tokenizer_pre(vocab.pre)
    rec.add_token_list(vocab.tokens)
    rec.add_token_types(vocab.types)
    vocab.special.add_to_gguf(rec, quiet=True)
    rec.add_chat_template(speco3_chat_template())
    plan = FilePlan("text", "qwen2vl", f"{name}-{outtype.upper()}.gguf")
    _kvs_from(rec, plan)

    def add(gguf_name: str, hf_name: str) -> None:
        ref = ckpt[canon[hf_name]]
        plan.tensors.append(PlannedTensor(gguf_name, ref.name, ref.shape, qtype if len(ref.shape) > 1 else QT.F32))

    add("token_embd.weight", "model.embed_tokens.weight")
    for i in range(t.n_layers):
        for hf_suffix, gg_suffix in _TEXT_LAYER.items():
            add(f"blk.{i}.{gg_suffix}", f"model.layers.{i}.{hf_suffix}")
    add("output_norm.weight", "model.norm.weight")
    if not tied:
        add("output.weight", "lm_head.weight")
    return plan


def _vision_type(mmproj_type: str, row_len: int, name: str, notes: list[str]) -> QT:
    qtype = OUTTYPES[mmproj_type][0]
    if qtype == QT.Q8_0 and row_len % 32:
        notes.append(f"{name}: row length {row_len} is not a multiple of 32, kept F16")
        return QT.F16
    return qtype


def _mmproj_plan(cfg: Qwen25VLConfig, ckpt, canon, mmproj_type: str, name: str, notes: list[str]) -> FilePlan:
    v = cfg.vision
    qtype, ftype = OUTTYPES[mmproj_type]
    rec = gguf.GGUFWriter(None, "clip")
    rec.add_type(gguf.GGUFType.MMPROJ)
    rec.add_name(f"{name} vision projector")
    rec.add_file_type(ftype)
    rec.add_clip_has_vision_encoder(True)
    rec.add_clip_projector_type(gguf.VisionProjectorType.QWEN25VL)
    rec.add_vision_projection_dim(cfg.text.hidden)
    rec.add_vision_image_size(v.image_size)
    rec.add_vision_patch_size(v.patch_size)
    rec.add_vision_embedding_length(v.hidden)
    rec.add_vision_feed_forward_length(v.intermediate)
    rec.add_vision_block_count(v.depth)
    rec.add_vision_head_count(v.n_heads)
    rec.add_vision_image_mean(list(cfg.image_mean))
    rec.add_vision_image_std(list(cfg.image_std))
    rec.add_vision_use_silu(True)
    rec.add_vision_n_wa_pattern(v.n_wa_pattern)
    rec.add_vision_attention_layernorm_eps(1e-6)  # Qwen2.5-VL's vision RMSNorms use eps 1e-6
    rec.add_quantization_version(gguf.GGML_QUANT_VERSION)
    plan = FilePlan("mmproj", "clip", f"mmproj-{name}-{mmproj_type.upper()}.gguf")
    _kvs_from(rec, plan)

    def add(gguf_name: str, hf_name: str, rows: tuple[int, int] | None = None) -> None:
        ref = ckpt[canon[hf_name]]
        shape = ref.shape if rows is None else (rows[1] - rows[0], *ref.shape[1:])
        q = _vision_type(mmproj_type, shape[-1], gguf_name, notes) if len(shape) > 1 else QT.F32
        plan.tensors.append(PlannedTensor(gguf_name, ref.name, tuple(shape), q, rows=rows))

    patch = ckpt[canon["visual.patch_embed.proj.weight"]]
    out_c, in_c, _, kh, kw = patch.shape
    patch_type = QT.F32 if mmproj_type == "f32" else QT.F16
    for t_idx, suffix in ((0, ""), (1, ".1")):
        plan.tensors.append(PlannedTensor(f"v.patch_embd.weight{suffix}", patch.name, (out_c, in_c, kh, kw),
                                          patch_type, temporal=t_idx))
    h = v.hidden
    for i in range(v.depth):
        prefix = f"visual.blocks.{i}."
        for j, part in enumerate("qkv"):
            add(f"v.blk.{i}.attn_{part}.weight", prefix + "attn.qkv.weight", (j * h, (j + 1) * h))
            add(f"v.blk.{i}.attn_{part}.bias", prefix + "attn.qkv.bias", (j * h, (j + 1) * h))
        for hf_suffix, gg_suffix in _VISION_BLOCK.items():
            add(f"v.blk.{i}.{gg_suffix}", prefix + hf_suffix)
    add("v.post_ln.weight", "visual.merger.ln_q.weight")
    for idx in (0, 2):
        add(f"mm.{idx}.weight", f"visual.merger.mlp.{idx}.weight")
        add(f"mm.{idx}.bias", f"visual.merger.mlp.{idx}.bias")
    return plan


def build_plan(folder: Path, outtype: str = "bf16", mmproj_type: str = "f16",
               name: str | None = None) -> tuple[ConversionPlan, SafetensorsCheckpoint]:
    """Plan the conversion of a Qwen2.5-VL checkpoint folder (reads configs and headers only).

    Parameters
    ----------
    folder : Path
        Hugging Face checkpoint folder.
    outtype : {"bf16", "f16", "f32"}
        Type of the text model's matrices.
    mmproj_type : {"f16", "f32", "q8_0"}
        Type of the projector's matrices.
    name : str, optional
        Model name for ``general.name`` and the file names (default: the folder name).

    Returns
    -------
    plan : ConversionPlan
    checkpoint : SafetensorsCheckpoint
        The opened checkpoint (tensor locations) the plan refers to.
    """
    folder = Path(folder)
    if outtype not in ("bf16", "f16", "f32"):
        raise ConversionError(f"unsupported text output type {outtype!r}; use bf16, f16 or f32")
    if mmproj_type not in ("f16", "f32", "q8_0"):
        raise ConversionError(f"unsupported projector type {mmproj_type!r}; use f16, f32 or q8_0")
    cfg = load_config(folder)
    ckpt = SafetensorsCheckpoint(folder)
    canon, tied, notes = _resolve_sources(ckpt, cfg)
    vocab = load_vocab(folder, cfg.text.vocab_size)
    name = name or folder.resolve().name
    text = _text_plan(cfg, vocab, ckpt, canon, tied, outtype, name)
    mmproj = _mmproj_plan(cfg, ckpt, canon, mmproj_type, name, notes)
    plan = ConversionPlan(source=str(folder), layout=detect_layout(ckpt.names()), config_layout=cfg.layout,
                          input_dtypes=sorted(ckpt.dtypes), text=text, mmproj=mmproj, notes=notes)
    return plan, ckpt

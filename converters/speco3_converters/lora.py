"""PEFT LoRA adapter (``adapter_config.json`` + ``adapter_model.safetensors``) → GGUF LoRA adapter, without torch.

The output follows llama.cpp's LoRA format (``convert_lora_to_gguf.py``; read by ``llama_adapter_lora_init``):
``general.type = adapter``, ``adapter.type = lora``, ``adapter.lora.alpha``, the base's architecture
(``qwen2vl``) and, per adapted matrix, ``<base GGUF tensor>.lora_a`` with PEFT's ``lora_A`` ``[r, in]`` and
``<base GGUF tensor>.lora_b`` with ``lora_B`` ``[out, r]``, both as stored (numpy order; no transpose for
linear layers). llama.cpp adds ``scale · (alpha / r) · B (A x)`` with ``r`` read from each pair, which is PEFT's
``lora_alpha / r`` scaling; where PEFT scales a module differently (``alpha_pattern``, ``use_rslora``) the
ratio is folded into that module's ``lora_b``, so one file-wide alpha stays exact.

Mapped: the text model's attention (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``) and MLP (``gate_proj``,
``up_proj``, ``down_proj``) of every layer, in both checkpoint naming layouts. Refused, with the reason: vision
tower and merger targets, embeddings and ``lm_head``, DoRA, LoRA biases, ``modules_to_save``, trainable tokens,
aLoRA, layer replication, ``target_parameters`` and any tensor that is not a ``lora_A``/``lora_B`` weight.
The base (`speco3_models.adapters`) is the installed text GGUF the adapter is converted against: every pair's
shape is checked against its matrix, and its SHA-256 is recorded in the adapter.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from speco3_base.errors import ConversionError
from speco3_models.adapters import ALPHA_KEY, BASE_NAME_KEY, BASE_SHA256_KEY, SOURCE_KEY, SUFFIX_A, SUFFIX_B
from speco3_models.gguf_check import TEXT_ARCH, check_text_model

from .qwen25vl import _TEXT_LAYER, canonical_name
from .safetensors_io import TensorRef, bf16_to_f32, tensor_refs

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OUTTYPES = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16}

#: HF module (relative to ``model.layers.N.``) -> GGUF tensor (relative to ``blk.N.``): the weights of the text
#: model's attention and MLP projections, from the converter's own mapping.
TEXT_TARGETS = {hf.removesuffix(".weight"): gg for hf, gg in _TEXT_LAYER.items()
                if hf.endswith("_proj.weight")}

#: adapter_config.json options that change what the adapter computes and that llama.cpp's LoRA cannot express.
_UNSUPPORTED_OPTIONS = {
    "use_dora": "DoRA (use_dora) rescales each weight by a learned magnitude; llama.cpp's LoRA has no magnitude "
                "vector",
    "lora_bias": "LoRA biases (lora_bias) add a bias to lora_B; llama.cpp's LoRA has none",
    "modules_to_save": "modules_to_save holds fully trained copies of base modules, which an adapter cannot carry",
    "trainable_token_indices": "trainable tokens change embedding rows, which an adapter cannot carry",
    "alora_invocation_tokens": "activated LoRA (aLoRA) is not supported by Spec-o3's engine",
    "layer_replication": "layer replication changes the base model's layer stack",
    "target_parameters": "LoRA on raw parameters (target_parameters) has no llama.cpp mapping",
    "fan_in_fan_out": "fan_in_fan_out (Conv1D layers) does not occur in Qwen2.5-VL's linear layers",
}

_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


@dataclass
class LoraPair:
    """One adapted matrix: its PEFT module, its base GGUF tensor, the two factors and PEFT's scaling."""

    module: str  # PEFT module key, e.g. model.language_model.layers.0.self_attn.q_proj
    target: str  # base GGUF tensor, e.g. blk.0.attn_q.weight
    a_name: str
    b_name: str
    rank: int
    n_in: int
    n_out: int
    peft_scale: float  # PEFT's scaling of this module (alpha/r, alpha/sqrt(r), alpha_pattern)
    fold: float = 1.0  # peft_scale / (file alpha / rank): multiplied into lora_b


@dataclass
class LoraResult:
    """Outcome of `convert_lora`."""

    path: Path | None
    alpha: float
    pairs: list[LoraPair]
    base_text_sha256: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def ranks(self) -> list[int]:
        return sorted({p.rank for p in self.pairs})


def read_adapter_config(peft_dir: Path) -> dict[str, Any]:
    """``adapter_config.json``, checked for a LoRA whose options llama.cpp can run.

    Raises
    ------
    ConversionError
        Missing or invalid file, another PEFT method, or an option that cannot be mapped (named, with why).
    """
    path = peft_dir / ADAPTER_CONFIG
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConversionError(f"{peft_dir}: no {ADAPTER_CONFIG} (not a PEFT adapter folder)") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConversionError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(cfg, dict):
        raise ConversionError(f"{path}: expected a JSON object")
    kind = cfg.get("peft_type")
    if kind != "LORA":
        raise ConversionError(f"{path}: peft_type is {kind!r}; only LoRA adapters (peft_type 'LORA') convert")
    for key, why in _UNSUPPORTED_OPTIONS.items():
        if cfg.get(key):
            raise ConversionError(f"{path}: cannot convert: {why} ({key} = {cfg[key]!r})")
    for key in ("r", "lora_alpha"):
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConversionError(f"{path}: {key} must be a positive number, got {value!r}")
    for key in ("rank_pattern", "alpha_pattern"):
        if not isinstance(cfg.get(key) or {}, dict):
            raise ConversionError(f"{path}: {key} must be an object mapping module patterns to numbers")
    return cfg


def _pattern_value(patterns: dict[str, Any], module: str, default: float) -> float:
    """PEFT's rule (``peft.utils.other.get_pattern_key``): the first pattern matching the end of the module key."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return float(value)
    return float(default)


def _module_target(module: str, path: Path) -> str:
    """Base GGUF tensor adapted by a PEFT module key, or `ConversionError` saying why it cannot be mapped."""
    canon = canonical_name(module + ".weight").removesuffix(".weight")
    m = _LAYER_RE.match(canon)
    if m and m.group(2) in TEXT_TARGETS:
        return f"blk.{m.group(1)}.{TEXT_TARGETS[m.group(2)]}"
    if canon.startswith("visual."):
        why = "the vision tower and merger stay as converted (the projector GGUF takes no adapter)"
    elif canon.endswith(("embed_tokens", "lm_head")):
        why = "token embeddings and lm_head cannot be adapted (llama.cpp ties and reshapes them; train without them)"
    else:
        why = ("only the text model's attention (q/k/v/o_proj) and MLP (gate/up/down_proj) projections are "
               "supported")
    raise ConversionError(f"{path}: cannot convert the LoRA target {module!r}: {why}")


def plan_pairs(peft_dir: Path, cfg: dict[str, Any], base_tensors: dict[str, tuple[int, ...]]) -> list[LoraPair]:
    """Match the adapter's tensors into pairs, map each to its base tensor and check the shapes.

    ``base_tensors``: GGUF tensor name -> shape in GGUF order (``[in, out]`` for a matrix).
    """
    path = peft_dir / ADAPTER_WEIGHTS
    if not path.is_file():
        found = sorted(p.name for p in peft_dir.iterdir())
        hint = " (adapter_model.bin is PyTorch pickle: save with safe_serialization)" \
            if "adapter_model.bin" in found else ""
        raise ConversionError(f"{peft_dir}: no {ADAPTER_WEIGHTS}{hint}; found: {', '.join(found[:12]) or 'nothing'}")
    refs = tensor_refs(path)
    halves: dict[str, dict[str, str]] = {}
    for name in refs:
        m = re.match(r"^(?:base_model\.model\.)?(.+)\.lora_([AB])\.weight$", name)
        if not m:
            why = ("DoRA magnitude vectors" if "lora_magnitude_vector" in name else
                   "embedding LoRA factors (embed_tokens)" if "lora_embedding_" in name else
                   "a LoRA bias" if re.search(r"\.lora_B\.bias$", name) else "not a lora_A/lora_B weight")
            raise ConversionError(f"{path.name}: cannot convert tensor {name!r}: {why}")
        halves.setdefault(m.group(1), {})[m.group(2)] = name
    if not halves:
        raise ConversionError(f"{path.name}: no LoRA tensors")
    alpha, use_rslora = float(cfg["lora_alpha"]), bool(cfg.get("use_rslora"))
    pairs = []
    for module, ab in halves.items():
        if set(ab) != {"A", "B"}:
            raise ConversionError(f"{path.name}: {module}: lora_{'A' if 'B' in ab else 'B'} is missing")
        target = _module_target(module, path)
        a, b = refs[ab["A"]], refs[ab["B"]]
        if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[0] != b.shape[1]:
            raise ConversionError(f"{path.name}: {module}: lora_A {list(a.shape)} and lora_B {list(b.shape)} do not "
                                  "chain (expected [r, in] and [out, r])")
        rank, n_in, n_out = a.shape[0], a.shape[1], b.shape[0]
        base_shape = base_tensors.get(target)
        if base_shape is None:
            raise ConversionError(f"{path.name}: {module} adapts {target}, which the base model does not have "
                                  "(an adapter for a deeper model?)")
        if tuple(base_shape) != (n_in, n_out):
            raise ConversionError(f"{path.name}: {module} is [{n_out} x {n_in}] but the base's {target} is "
                                  f"[{base_shape[1]} x {base_shape[0]}]: the adapter was trained on another base")
        module_alpha = _pattern_value(cfg.get("alpha_pattern") or {}, module, alpha)
        peft_scale = module_alpha / (math.sqrt(rank) if use_rslora else rank)
        pairs.append(LoraPair(module, target, ab["A"], ab["B"], rank, n_in, n_out, peft_scale,
                              fold=peft_scale / (alpha / rank)))
    return sorted(pairs, key=lambda p: _target_order(p.target))


def _target_order(target: str) -> tuple[int, int]:
    layer, rest = target.split(".", 2)[1:]
    order = list(TEXT_TARGETS.values())
    return int(layer), order.index(rest)


def _read_f32(ref: TensorRef) -> np.ndarray:
    raw = ref.read()
    return bf16_to_f32(raw) if ref.dtype == "BF16" else raw.astype(np.float32)


def _encode(arr: np.ndarray, qtype: QT) -> np.ndarray:
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if qtype == QT.F32:
        return arr
    if qtype == QT.F16:
        with np.errstate(over="ignore"):
            out = arr.astype(np.float16)
        if not np.isfinite(out).all() and np.isfinite(arr).all():
            raise ConversionError(f"LoRA values up to {float(np.abs(arr).max()):.4g} overflow F16; use --outtype f32")
        return out
    return gguf.quants.quantize(arr, qtype)


def convert_lora(peft_dir: str | os.PathLike[str], base_text: str | os.PathLike[str], out: str | os.PathLike[str],
                 *, base_sha256: str, base_name: str | None = None, outtype: str = "f32", name: str | None = None,
                 dry_run: bool = False) -> LoraResult:
    """Convert a PEFT LoRA of a Qwen2.5-VL text model into a GGUF LoRA adapter for llama.cpp.

    Parameters
    ----------
    peft_dir : path-like
        Folder with ``adapter_config.json`` and ``adapter_model.safetensors``.
    base_text : path-like
        The base text GGUF the adapter will run on (its header gives the shapes to check against).
    out : path-like
        Adapter GGUF to write (appears only when complete).
    base_sha256 : str
        SHA-256 of ``base_text`` (the model store's record of it), written as the adapter's base identity.
    base_name : str, optional
        Installed name of the base (shown in messages).
    outtype : {"f32", "f16", "bf16"}
        Type of the factors (F32, llama.cpp's own default, keeps the folded scalings exact).
    name : str, optional
        ``general.name`` (default: the PEFT folder name).
    dry_run : bool
        Check and plan only; nothing is written.

    Raises
    ------
    ConversionError
        What cannot be converted, and why (see the module docstring).
    speco3_base.errors.ModelFileError
        The base is not a Qwen2.5-VL text GGUF.
    """
    peft_dir, base_text, out = Path(peft_dir), Path(base_text), Path(out)
    if outtype not in OUTTYPES:
        raise ConversionError(f"unsupported adapter type {outtype!r}; use {', '.join(OUTTYPES)}")
    if not peft_dir.is_dir():
        raise ConversionError(f"{peft_dir}: not a folder (expected a PEFT adapter folder)")
    if not re.fullmatch(r"[0-9a-f]{64}", base_sha256 or ""):
        raise ValueError(f"base_sha256 must be a SHA-256 hex digest, got {base_sha256!r}")
    cfg = read_adapter_config(peft_dir)
    base = check_text_model(base_text)
    pairs = plan_pairs(peft_dir, cfg, {k: t.shape for k, t in base.tensors.items()})
    alpha = float(cfg["lora_alpha"])
    name = name or peft_dir.resolve().name
    meta: dict[str, Any] = {"general.type": "adapter", "adapter.type": "lora", ALPHA_KEY: alpha,
                            "general.name": name, BASE_SHA256_KEY: base_sha256, BASE_NAME_KEY: base_name or "",
                            SOURCE_KEY: str(cfg.get("base_model_name_or_path") or "")}
    result = LoraResult(None if dry_run else out, alpha, pairs, base_sha256, meta)
    folded = [p.module for p in pairs if not math.isclose(p.fold, 1.0, rel_tol=1e-9)]
    if folded:
        logger.info("%s: PEFT scaling of %d module(s) folded into lora_b (alpha_pattern/rslora)", peft_dir, len(folded))
    if dry_run:
        return result
    _write(result, peft_dir / ADAPTER_WEIGHTS, OUTTYPES[outtype])
    logger.info("wrote %s (%d LoRA pairs, ranks %s, alpha %g) for %s", out, len(pairs), result.ranks, alpha,
                base_name or base_text.name)
    return result


def _write(result: LoraResult, weights: Path, qtype: QT) -> None:
    out = result.path
    if out is None:
        raise ValueError("a LoRA result to write needs its output path")
    out.parent.mkdir(parents=True, exist_ok=True)
    refs = tensor_refs(weights)
    part = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(part, TEXT_ARCH)
    try:
        m = result.metadata
        writer.add_type(m["general.type"])
        writer.add_string("adapter.type", m["adapter.type"])
        writer.add_float32(ALPHA_KEY, m[ALPHA_KEY])
        writer.add_name(m["general.name"])
        writer.add_string(BASE_SHA256_KEY, m[BASE_SHA256_KEY])
        writer.add_string(BASE_NAME_KEY, m[BASE_NAME_KEY])
        writer.add_string(SOURCE_KEY, m[SOURCE_KEY])
        writer.add_file_type({QT.F32: gguf.LlamaFileType.ALL_F32, QT.F16: gguf.LlamaFileType.MOSTLY_F16,
                              QT.BF16: gguf.LlamaFileType.MOSTLY_BF16}[qtype])
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        for p in result.pairs:
            a, b = _read_f32(refs[p.a_name]), _read_f32(refs[p.b_name])
            if p.fold != 1.0:
                b = b * np.float32(p.fold)
            for suffix, arr in ((SUFFIX_A, a), (SUFFIX_B, b)):
                data = _encode(arr, qtype)
                # BF16 comes back from gguf.quants as bytes: the writer derives the element shape from them
                writer.add_tensor(p.target + suffix, data, raw_dtype=qtype if qtype == QT.BF16 else None)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(part, out)
    except BaseException:
        writer.close()
        part.unlink(missing_ok=True)
        raise

"""Reading and validating the configuration of a Qwen2.5-VL Hugging Face checkpoint.

Two config layouts exist: the hub layout (text keys at the top level, ``vision_config`` nested,
``rope_scaling.mrope_section``) and the transformers-5 layout (``text_config`` and ``vision_config``
nested, ``rope_parameters``). Both are normalised into :class:`Qwen25VLConfig`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speco3_base.errors import ConversionError

logger = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("Qwen2_5_VLForConditionalGeneration",)
SUPPORTED_MODEL_TYPES = ("qwen2_5_vl",)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class TextConfig:
    """Hyper-parameters of the language model."""

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    context_length: int
    rms_eps: float
    rope_theta: float
    mrope_section: tuple[int, ...]
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads


@dataclass(frozen=True)
class VisionConfig:
    """Hyper-parameters of the vision tower and merger."""

    depth: int
    hidden: int
    intermediate: int
    n_heads: int
    out_hidden: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    in_chans: int
    window_size: int
    fullatt_block_indexes: tuple[int, ...]
    image_size: int = 560

    @property
    def n_wa_pattern(self) -> int:
        return self.fullatt_block_indexes[0] + 1


@dataclass(frozen=True)
class Qwen25VLConfig:
    """Everything the converter needs from ``config.json`` and ``preprocessor_config.json``."""

    text: TextConfig
    vision: VisionConfig
    image_mean: tuple[float, ...] = CLIP_MEAN
    image_std: tuple[float, ...] = CLIP_STD
    layout: str = "flat"
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConversionError(f"{path.parent}: {path.name} is missing") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConversionError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConversionError(f"{path}: expected a JSON object")
    return data


def _need(cfg: dict[str, Any], key: str, where: str) -> int:
    if key not in cfg or cfg[key] is None:
        raise ConversionError(f"config.json: {where} has no {key!r}")
    try:
        return int(cfg[key])
    except (TypeError, ValueError) as exc:
        raise ConversionError(f"config.json: {where}.{key} = {cfg[key]!r} is not a int") from exc


def _text_config(top: dict[str, Any]) -> tuple[TextConfig, str]:
    nested = isinstance(top.get("text_config"), dict) and "hidden_size" in top["text_config"]
    merged = {k: v for k, v in top.items() if k not in ("text_config", "vision_config")}
    if nested:
        merged.update(top["text_config"])
    where = "text_config" if nested else "config"
    rope = merged.get("rope_scaling") or merged.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        rope = {}
    section = rope.get("mrope_section")
    if not section:
        raise ConversionError(
            f"config.json: {where} has no rope_scaling/rope_parameters.mrope_section "
            "(found keys: " + ", ".join(sorted(rope)) + ") — not a Qwen2.5-VL text model"
        )
    theta = rope.get("rope_theta", merged.get("rope_theta", 1_000_000.0))
    tied = merged.get("tie_word_embeddings")
    if tied is None:
        tied = top.get("tie_word_embeddings", False)
    text = TextConfig(
        n_layers=_need(merged, "num_hidden_layers", where),
        hidden=_need(merged, "hidden_size", where),
        intermediate=_need(merged, "intermediate_size", where),
        n_heads=_need(merged, "num_attention_heads", where),
        n_kv_heads=int(merged.get("num_key_value_heads") or merged["num_attention_heads"]),
        vocab_size=_need(merged, "vocab_size", where),
        context_length=int(merged.get("max_position_embeddings", 128000)),
        rms_eps=float(merged.get("rms_norm_eps", 1e-6)),
        rope_theta=float(theta),
        mrope_section=tuple(int(s) for s in section),
        tied=bool(tied),
    )
    if text.hidden % text.n_heads or text.n_heads % text.n_kv_heads:
        raise ConversionError(
            f"config.json: hidden_size {text.hidden}, {text.n_heads} heads and {text.n_kv_heads} KV heads "
            "are inconsistent"
        )
    if len(text.mrope_section) > 4 or sum(text.mrope_section) * 2 != text.head_dim:
        raise ConversionError(
            f"config.json: mrope_section {list(text.mrope_section)} must have at most 4 entries summing to "
            f"head_dim/2 = {text.head_dim // 2}"
        )
    return text, ("nested" if nested else "flat")


def _vision_config(top: dict[str, Any], out_hidden_default: int) -> VisionConfig:
    v = top.get("vision_config")
    if not isinstance(v, dict):
        raise ConversionError("config.json: no vision_config — the checkpoint has no vision tower")
    full = v.get("fullatt_block_indexes")
    if not full:
        raise ConversionError("config.json: vision_config has no fullatt_block_indexes (required for Qwen2.5-VL)")
    full = tuple(int(i) for i in full)
    step = full[0] + 1
    if any(b - a != step for a, b in zip(full, full[1:], strict=False)):
        raise ConversionError(
            f"config.json: fullatt_block_indexes {list(full)} are not equally spaced; llama.cpp supports only "
            "a periodic window-attention pattern"
        )
    vision = VisionConfig(
        depth=_need(v, "depth", "vision_config"),
        hidden=_need(v, "hidden_size", "vision_config"),
        intermediate=_need(v, "intermediate_size", "vision_config"),
        n_heads=_need(v, "num_heads", "vision_config"),
        out_hidden=int(v.get("out_hidden_size") or out_hidden_default),
        patch_size=int(v.get("patch_size", 14)),
        temporal_patch_size=int(v.get("temporal_patch_size", 2)),
        spatial_merge_size=int(v.get("spatial_merge_size", 2)),
        in_chans=int(v["in_chans"] if "in_chans" in v else v.get("in_channels", 3)),
        window_size=int(v.get("window_size", 112)),
        fullatt_block_indexes=full,
        image_size=int(v.get("image_size", 560)),
    )
    problems = []
    if vision.temporal_patch_size != 2:
        problems.append(f"temporal_patch_size {vision.temporal_patch_size} (llama.cpp needs 2)")
    if vision.spatial_merge_size != 2:
        problems.append(f"spatial_merge_size {vision.spatial_merge_size} (llama.cpp needs 2)")
    if vision.window_size != 112:
        problems.append(f"window_size {vision.window_size} (llama.cpp uses 112)")
    if vision.in_chans != 3:
        problems.append(f"in_chans {vision.in_chans} (RGB images need 3)")
    if vision.hidden % vision.n_heads or (vision.hidden // vision.n_heads) % 4:
        problems.append(f"vision head dim {vision.hidden}/{vision.n_heads} is not a multiple of 4")
    if max(full) >= vision.depth:
        problems.append(f"fullatt_block_indexes {list(full)} exceed depth {vision.depth}")
    if problems:
        raise ConversionError("config.json: unsupported vision tower: " + "; ".join(problems))
    return vision


def load_config(folder: Path) -> Qwen25VLConfig:
    """Load and validate the configuration of a Qwen2.5-VL checkpoint folder.

    Parameters
    ----------
    folder : Path
        Hugging Face checkpoint folder.

    Returns
    -------
    Qwen25VLConfig

    Raises
    ------
    ConversionError
        If the folder is not a Qwen2.5-VL checkpoint or its config is incomplete or unsupported.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ConversionError(f"{folder}: not a folder")
    top = _read_json(folder / "config.json")
    archs = top.get("architectures") or []
    model_type = top.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES and not set(archs) & set(SUPPORTED_ARCHITECTURES):
        raise ConversionError(
            f"{folder}: unsupported model (model_type {model_type!r}, architectures {archs}); "
            f"this converter handles {', '.join(SUPPORTED_ARCHITECTURES)} (model_type qwen2_5_vl)"
        )
    text, layout = _text_config(top)
    vision = _vision_config(top, text.hidden)
    if vision.out_hidden != text.hidden:
        raise ConversionError(
            f"config.json: vision out_hidden_size {vision.out_hidden} differs from text hidden_size {text.hidden}"
        )
    mean: tuple[float, ...] = CLIP_MEAN
    std: tuple[float, ...] = CLIP_STD
    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        pcfg = _read_json(pre)
        mean = tuple(float(x) for x in pcfg.get("image_mean", mean))
        std = tuple(float(x) for x in pcfg.get("image_std", std))
        if len(mean) != 3 or len(std) != 3:
            raise ConversionError(f"{pre}: image_mean/image_std must have 3 values")
    else:
        logger.warning("%s: no preprocessor_config.json, using the CLIP mean/std", folder)
    return Qwen25VLConfig(text=text, vision=vision, image_mean=mean, image_std=std, layout=layout, raw=top)

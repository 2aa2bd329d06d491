"""Read and check GGUF model files before llama.cpp sees them.

`read_gguf_summary` first runs the bounded structural scan of `speco3_models.gguf_scan` (magic, version, counts,
every length and every tensor's data range checked against the file size) and only then opens the file with
gguf's own `GGUFReader` to read metadata and the tensor table. The ``check_*`` functions then test what the
Spec-o3 engine needs: a Qwen2.5-VL text model (arch ``qwen2vl``), a Qwen2.5-VL vision projector (arch ``clip``,
projector ``qwen2.5vl_merger``) and a pair whose projector output width equals the text model's hidden size.
Every problem is a `ModelFileError(path, reason)` that names the file and the specific reason.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType, LlamaFileType

from speco3_base.errors import ModelFileError
from speco3_models.gguf_scan import MAX_DECODED_ARRAY, LargeArray, ScanResult, scan_gguf

logger = logging.getLogger(__name__)

TEXT_ARCH = "qwen2vl"
PROJECTOR_ARCH = "clip"
PROJECTOR_TYPE = "qwen2.5vl_merger"

_TEXT_KEYS = ("block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
              "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.dimension_sections")
_TEXT_BLOCK = ("attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias", "attn_v.weight",
               "attn_v.bias", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
               "ffn_down.weight")
_VISION_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count", "patch_size",
                "image_size", "attention.layer_norm_epsilon", "n_wa_pattern")
_VISION_BLOCK = ("ln1.weight", "ln2.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_out.weight",
                 "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
_VISION_GLOBAL = ("v.patch_embd.weight", "v.patch_embd.weight.1", "v.post_ln.weight", "mm.0.weight", "mm.0.bias",
                  "mm.2.weight", "mm.2.bias")


@dataclass(frozen=True)
class TensorInfo:
    """Shape (GGUF order: fastest-varying dimension first), type name and byte size of one tensor."""

    shape: tuple[int, ...]
    type: str
    nbytes: int


@dataclass
class GGUFSummary:
    """What a GGUF file holds, read after its structure was checked.

    Attributes
    ----------
    arch : str
        ``general.architecture`` (``qwen2vl`` for the text model, ``clip`` for a projector).
    n_tensors : int
        Number of tensors.
    tensor_types : dict of str to int
        How many tensors have each ggml type (``{'Q4_K': 140, 'F32': 141, ...}``).
    metadata : dict
        Every key/value pair; arrays longer than `MAX_DECODED_ARRAY` appear as `LargeArray`.
    file_size : int
        Size of the file in bytes.
    file_type : str or None
        ``general.file_type`` as a quantization name (``Q4_K_M``), when present.
    """

    path: Path
    arch: str
    n_tensors: int
    tensor_types: dict[str, int]
    metadata: dict[str, Any]
    file_size: int
    version: int
    data_offset: int
    tensors: dict[str, TensorInfo] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def name(self) -> str | None:
        return self.metadata.get("general.name")

    @property
    def kind(self) -> str | None:
        """``general.type`` (``model`` or ``mmproj``) when written."""
        return self.metadata.get("general.type")

    @property
    def file_type(self) -> str | None:
        raw = self.metadata.get("general.file_type")
        if raw is None:
            return None
        try:
            return LlamaFileType(int(raw)).name.removeprefix("MOSTLY_").replace("ALL_", "")
        except ValueError:
            return f"unknown({raw})"

    @property
    def quant(self) -> str:
        """Quantization name: ``general.file_type`` or, when absent, the most common weight type."""
        if self.file_type:
            return self.file_type
        weights = {k: v for k, v in self.tensor_types.items() if k != "F32"} or self.tensor_types
        return max(weights, key=lambda k: weights[k]) if weights else "unknown"

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def _decode_field(f) -> Any:
    """A reader field as the scan decodes it (long or nested arrays as `LargeArray`)."""
    types = f.types
    if not types:
        return None
    if types[0] == GGUFValueType.ARRAY:
        item, count = GGUFValueType(int(f.parts[3][0])), int(f.parts[4][0])
        if count > MAX_DECODED_ARRAY or item == GGUFValueType.ARRAY:
            return LargeArray(item.name.lower(), count)
        return f.contents()
    return f.contents()


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def read_gguf_summary(path: str | os.PathLike[str], *, scan: ScanResult | None = None,
                      use_reader: bool = False) -> GGUFSummary:
    """Summarise a GGUF file after a bounded structural check.

    Parameters
    ----------
    path : path-like
        The GGUF file.
    scan : ScanResult, optional
        A scan already made of this file (skips the second scan).
    use_reader : bool
        Also read the file with gguf's `GGUFReader` and require that it agrees with the scan on every key,
        value and tensor (two independent parsers; used on import and verify). The reader decodes every
        tokenizer string, which takes seconds on a 7B model; the scan alone takes milliseconds.

    Returns
    -------
    GGUFSummary

    Raises
    ------
    ModelFileError
        The file is missing, truncated, zero-filled, not GGUF, or internally inconsistent.
    """
    path = Path(path)
    scan = scan or scan_gguf(path)
    metadata = dict(scan.metadata)
    tensors = {t.name: TensorInfo(t.shape, t.type.name, t.nbytes) for t in scan.tensors}
    if use_reader:
        _cross_check(path, scan, metadata, tensors)
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(path, "GGUF file without general.architecture (not a model file)")
    types = Counter(t.type for t in tensors.values())
    return GGUFSummary(path, arch, len(tensors), dict(types.most_common()), metadata, scan.file_size, scan.version,
                       scan.data_offset, tensors)


def _cross_check(path: Path, scan: ScanResult, metadata: dict[str, Any], tensors: dict[str, TensorInfo]) -> None:
    """Read the (already scanned) file with gguf's reader; raise when it disagrees with the scan."""
    try:
        reader = GGUFReader(path, "r")
        r_meta = {k: _decode_field(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}
        r_tensors = {t.name: TensorInfo(tuple(int(d) for d in t.shape), t.tensor_type.name, int(t.n_bytes))
                     for t in reader.tensors}
        r_offset = int(reader.data_offset)
        del reader
    except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise ModelFileError(path, f"the GGUF reader rejected the file: {exc}") from exc
    if r_offset != scan.data_offset or r_tensors != tensors:
        raise ModelFileError(path, "inconsistent GGUF: gguf's reader and the structural scan disagree on the tensors")
    for key in metadata.keys() | r_meta.keys():
        if not _same(metadata.get(key), r_meta.get(key)):
            raise ModelFileError(path, f"inconsistent GGUF: gguf's reader and the structural scan disagree on {key!r}")


def _summary(file: str | os.PathLike[str] | GGUFSummary) -> GGUFSummary:
    return file if isinstance(file, GGUFSummary) else read_gguf_summary(file)


def _missing_report(missing: list[str], what: str) -> str:
    shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
    return f"incomplete {what}: missing {shown}"


def _int_key(s: GGUFSummary, key: str) -> int:
    value = s.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelFileError(s.path, f"metadata {key} must be a positive integer, got {value!r}")
    return value


def check_text_model(file: str | os.PathLike[str] | GGUFSummary) -> GGUFSummary:
    """Check that a file is a complete Qwen2.5-VL text model (arch ``qwen2vl``).

    Raises
    ------
    ModelFileError
        Wrong architecture (naming what it is), missing metadata keys or tensors, or shapes that disagree with
        the metadata.
    """
    s = _summary(file)
    if s.arch != TEXT_ARCH:
        hint = " — this is a vision projector, not the text model" if s.arch == PROJECTOR_ARCH else ""
        raise ModelFileError(s.path, f"architecture is {s.arch!r}, expected {TEXT_ARCH!r} (Qwen2.5-VL text model){hint}")
    a = TEXT_ARCH
    missing = [f"{a}.{k}" for k in _TEXT_KEYS if f"{a}.{k}" not in s.metadata]
    missing += [k for k in ("tokenizer.ggml.model", "tokenizer.ggml.tokens") if k not in s.metadata]
    if missing:
        raise ModelFileError(s.path, _missing_report(missing, "text model metadata"))
    n_layer, n_embd = _int_key(s, f"{a}.block_count"), _int_key(s, f"{a}.embedding_length")
    n_ff = _int_key(s, f"{a}.feed_forward_length")
    n_head, n_head_kv = _int_key(s, f"{a}.attention.head_count"), _int_key(s, f"{a}.attention.head_count_kv")
    if n_embd % n_head or n_head % n_head_kv:
        raise ModelFileError(s.path, f"inconsistent attention shape: hidden size {n_embd}, {n_head} heads, "
                                     f"{n_head_kv} KV heads (heads must divide the width, KV heads the heads)")
    sections = s.get(f"{a}.rope.dimension_sections")
    if isinstance(sections, LargeArray) or not isinstance(sections, list) or len(sections) != 4:
        raise ModelFileError(s.path, f"{a}.rope.dimension_sections must be 4 integers (M-RoPE), got {sections!r}")
    names = ["token_embd.weight", "output_norm.weight"]
    names += [f"blk.{i}.{t}" for i in range(n_layer) for t in _TEXT_BLOCK]
    missing = [n for n in names if n not in s.tensors]
    if missing:
        raise ModelFileError(s.path, _missing_report(missing, f"text model ({n_layer} blocks declared)"))
    extra_blocks = [n for n in s.tensors if n.startswith(f"blk.{n_layer}.")]
    if extra_blocks:
        raise ModelFileError(s.path, f"tensors for block {n_layer} exist but block_count is {n_layer}")
    n_vocab = len(s.get("tokenizer.ggml.tokens"))
    expect = {"token_embd.weight": (n_embd, n_vocab), "output_norm.weight": (n_embd,),
              "blk.0.ffn_up.weight": (n_embd, n_ff), "blk.0.ffn_down.weight": (n_ff, n_embd),
              "blk.0.attn_q.weight": (n_embd, n_embd), "blk.0.attn_norm.weight": (n_embd,)}
    if "output.weight" in s.tensors:
        expect["output.weight"] = (n_embd, n_vocab)
    for name, shape in expect.items():
        if s.tensors[name].shape != shape:
            raise ModelFileError(s.path, f"tensor {name} has shape {list(s.tensors[name].shape)}, expected "
                                         f"{list(shape)} from the metadata (hidden {n_embd}, vocab {n_vocab})")
    return s


def projector_type(s: GGUFSummary) -> str | None:
    """The projector type of a ``clip`` file (vision-specific key first, as llama.cpp reads it)."""
    return s.get("clip.vision.projector_type") or s.get("clip.projector_type")


def projector_output_width(s: GGUFSummary) -> int:
    """Width of the vectors the projector hands to the text model (its ``mm.2`` output rows)."""
    return s.tensors["mm.2.weight"].shape[1]


def check_projector(file: str | os.PathLike[str] | GGUFSummary) -> GGUFSummary:
    """Check that a file is a complete Qwen2.5-VL vision projector (arch ``clip``, ``qwen2.5vl_merger``).

    Raises
    ------
    ModelFileError
        Wrong architecture or projector type, no vision encoder, missing keys or tensors, or inconsistent widths.
    """
    s = _summary(file)
    if s.arch != PROJECTOR_ARCH:
        hint = " — this is a text model, not the vision projector" if s.arch == TEXT_ARCH else ""
        raise ModelFileError(s.path, f"architecture is {s.arch!r}, expected {PROJECTOR_ARCH!r} (vision projector){hint}")
    ptype = projector_type(s)
    if ptype != PROJECTOR_TYPE:
        hint = " (a Qwen2-VL projector; Spec-o3 needs Qwen2.5-VL)" if ptype == "qwen2vl_merger" else ""
        raise ModelFileError(s.path, f"projector type is {ptype!r}, expected {PROJECTOR_TYPE!r}{hint}")
    if s.get("clip.has_vision_encoder") is not True:
        raise ModelFileError(s.path, "clip.has_vision_encoder is not true: the file holds no vision encoder")
    missing = [f"clip.vision.{k}" for k in _VISION_KEYS if f"clip.vision.{k}" not in s.metadata]
    if missing:
        raise ModelFileError(s.path, _missing_report(missing, "projector metadata"))
    n_layer = _int_key(s, "clip.vision.block_count")
    n_embd = _int_key(s, "clip.vision.embedding_length")
    n_head = _int_key(s, "clip.vision.attention.head_count")
    if n_embd % n_head:
        raise ModelFileError(s.path, f"inconsistent vision attention: width {n_embd} is not a multiple of {n_head} "
                                     "heads (llama.cpp would abort)")
    wa = _int_key(s, "clip.vision.n_wa_pattern")
    if wa < 2 or wa > n_layer:
        raise ModelFileError(s.path, f"clip.vision.n_wa_pattern is {wa}; a Qwen2.5-VL projector needs 2 … "
                                     f"{n_layer} (full-attention block spacing), llama.cpp aborts otherwise")
    names = list(_VISION_GLOBAL) + [f"v.blk.{i}.{t}" for i in range(n_layer) for t in _VISION_BLOCK]
    missing = [n for n in names if n not in s.tensors]
    if missing:
        raise ModelFileError(s.path, _missing_report(missing, f"projector ({n_layer} vision blocks declared)"))
    for name in ("v.blk.0.attn_q.weight", "v.blk.0.ln1.weight"):
        if s.tensors[name].shape[0] != n_embd:
            raise ModelFileError(s.path, f"tensor {name} has shape {list(s.tensors[name].shape)}, expected first "
                                         f"dimension {n_embd} (clip.vision.embedding_length)")
    proj_dim = s.get("clip.vision.projection_dim")
    if proj_dim is not None and proj_dim != projector_output_width(s):
        raise ModelFileError(s.path, f"clip.vision.projection_dim is {proj_dim} but tensor mm.2.weight outputs "
                                     f"{projector_output_width(s)} values")
    return s


@dataclass(frozen=True)
class PairInfo:
    """A text model and projector that belong together."""

    text: GGUFSummary
    mmproj: GGUFSummary
    width: int


def check_pair(text: str | os.PathLike[str] | GGUFSummary, mmproj: str | os.PathLike[str] | GGUFSummary) -> PairInfo:
    """Check both files and that the projector's output width equals the text model's hidden size.

    Raises
    ------
    ModelFileError
        From `check_text_model` / `check_projector`, or (naming the projector) a width mismatch.
    """
    t, p = check_text_model(text), check_projector(mmproj)
    n_embd = t.get(f"{TEXT_ARCH}.embedding_length")
    width = projector_output_width(p)
    if width != n_embd:
        raise ModelFileError(p.path, f"projector output width is {width} but the text model {t.path.name} has hidden "
                                     f"size {n_embd}: this projector belongs to another model")
    return PairInfo(t, p, width)

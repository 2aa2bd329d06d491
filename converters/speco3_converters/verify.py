"""Checking GGUF files with gguf's reader before llama.cpp ever opens them.

A malformed GGUF (truncated data, missing tensor, wrong shape, a projector of the wrong kind) makes
llama.cpp abort the whole process inside C. :func:`verify_gguf` reads only the header and tensor table
(memory-mapped, no tensor data is touched) and raises a :class:`~speco3.errors.ModelFileError` naming
what is wrong; a file that is fine but not what the caller expected raises
:class:`~speco3.errors.ConversionError`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
from gguf import GGMLQuantizationType as QT

from speco3.errors import ConversionError, ModelFileError

logger = logging.getLogger(__name__)

ARCH = {"text": "qwen2vl", "mmproj": "clip"}
PROJECTOR_TYPE = "qwen2.5vl_merger"
_TEXT_BLOCK = ("attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias",
               "attn_v.weight", "attn_v.bias", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
               "ffn_up.weight", "ffn_down.weight")
_VISION_BLOCK = ("ln1.weight", "ln2.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias",
                 "attn_v.weight", "attn_v.bias", "attn_out.weight", "attn_out.bias", "ffn_gate.weight",
                 "ffn_gate.bias", "ffn_up.weight", "ffn_up.bias", "ffn_down.weight", "ffn_down.bias")
_FLOAT_ONLY = (QT.F32, QT.F16, QT.BF16)


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    f = reader.get_field(key)
    if f is None:
        return None
    value = f.contents()
    return value


def read_gguf(path: Path) -> gguf.GGUFReader:
    """Open a GGUF file's header and tensor table, turning any parse failure into a ModelFileError."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(path, "file not found")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or head[:4] != b"GGUF":
        raise ModelFileError(path, f"not a GGUF file (starts with {head[:4]!r})")
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as exc:  # the reader raises ValueError, IndexError, KeyError... on bad headers
        if "cannot reshape" in str(exc):  # a tensor's data runs past the end of the file
            raise ModelFileError(path, f"truncated: tensor data is shorter than declared (file has {size} bytes)"
                                 ) from exc
        raise ModelFileError(path, f"corrupt or truncated GGUF header ({type(exc).__name__}: {exc})") from exc
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise ModelFileError(
                path, f"truncated: tensor {t.name} ends at byte {end} but the file has {size} bytes"
            )
    return reader


def _shape(t) -> tuple[int, ...]:
    """ggml order (ne0 first), trailing 1s dropped."""
    dims = [int(d) for d in t.shape]
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return tuple(dims)


def _check_text(path: Path, reader, tensors: dict, info: dict[str, Any]) -> None:
    n_layer = _field(reader, "qwen2vl.block_count")
    n_embd = _field(reader, "qwen2vl.embedding_length")
    n_head = _field(reader, "qwen2vl.attention.head_count")
    sections = _field(reader, "qwen2vl.rope.dimension_sections")
    tokens = reader.get_field("tokenizer.ggml.tokens")
    missing_keys = [k for k, v in (("qwen2vl.block_count", n_layer), ("qwen2vl.embedding_length", n_embd),
                                   ("qwen2vl.attention.head_count", n_head),
                                   ("qwen2vl.rope.dimension_sections", sections),
                                   ("tokenizer.ggml.tokens", tokens)) if v is None]
    if missing_keys:
        raise ModelFileError(path, f"missing metadata: {', '.join(missing_keys)}")
    if len(sections) != 4 or sum(sections) * 2 > n_embd // n_head:
        raise ModelFileError(path, f"rope.dimension_sections {list(sections)} do not fit head size "
                                   f"{n_embd // n_head}")
    n_vocab = len(tokens.data)
    need = ["token_embd.weight", "output_norm.weight"]
    need += [f"blk.{i}.{s}" for i in range(n_layer) for s in _TEXT_BLOCK]
    missing = [n for n in need if n not in tensors]
    if missing:
        raise ModelFileError(path, f"missing {len(missing)} tensor(s), e.g. {', '.join(missing[:3])}")
    emb = _shape(tensors["token_embd.weight"])
    if emb != (n_embd, n_vocab):
        raise ModelFileError(path, f"token_embd.weight is {list(emb)}, expected [{n_embd}, {n_vocab}]")
    if "output.weight" in tensors and _shape(tensors["output.weight"]) != (n_embd, n_vocab):
        raise ModelFileError(path, f"output.weight is {list(_shape(tensors['output.weight']))}")
    info.update(n_layer=int(n_layer), n_embd=int(n_embd), n_head=int(n_head), n_vocab=n_vocab,
                tied="output.weight" not in tensors, rope_sections=[int(s) for s in sections],
                chat_template=_field(reader, "tokenizer.chat_template"),
                tokenizer_pre=_field(reader, "tokenizer.ggml.pre"))


def _check_mmproj(path: Path, reader, tensors: dict, info: dict[str, Any]) -> None:
    proj = _field(reader, "clip.projector_type")
    if proj != PROJECTOR_TYPE:
        raise ModelFileError(path, f"projector type is {proj!r}, expected {PROJECTOR_TYPE!r} (Qwen2.5-VL)")
    if not _field(reader, "clip.has_vision_encoder"):
        raise ModelFileError(path, "clip.has_vision_encoder is not set")
    n_layer = _field(reader, "clip.vision.block_count")
    n_embd = _field(reader, "clip.vision.embedding_length")
    proj_dim = _field(reader, "clip.vision.projection_dim")
    n_wa = _field(reader, "clip.vision.n_wa_pattern")
    for key, val in (("clip.vision.block_count", n_layer), ("clip.vision.embedding_length", n_embd),
                     ("clip.vision.projection_dim", proj_dim), ("clip.vision.n_wa_pattern", n_wa),
                     ("clip.vision.patch_size", _field(reader, "clip.vision.patch_size")),
                     ("clip.vision.image_mean", _field(reader, "clip.vision.image_mean"))):
        if val is None:
            raise ModelFileError(path, f"missing metadata: {key}")
    if n_wa < 2 or n_wa > n_layer:
        raise ModelFileError(path, f"clip.vision.n_wa_pattern {n_wa} is invalid for {n_layer} blocks")
    need = ["v.patch_embd.weight", "v.patch_embd.weight.1", "v.post_ln.weight",
            "mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias"]
    need += [f"v.blk.{i}.{s}" for i in range(n_layer) for s in _VISION_BLOCK]
    missing = [n for n in need if n not in tensors]
    if missing:
        raise ModelFileError(path, f"missing {len(missing)} vision tensor(s), e.g. {', '.join(missing[:3])}")
    mm2 = _shape(tensors["mm.2.weight"])
    if mm2[-1] != proj_dim:
        raise ModelFileError(path, f"mm.2.weight outputs {mm2[-1]} but projection_dim is {proj_dim}")
    if _shape(tensors["v.blk.0.attn_q.weight"]) != (n_embd, n_embd):
        raise ModelFileError(path, f"v.blk.0.attn_q.weight is {list(_shape(tensors['v.blk.0.attn_q.weight']))}")
    info.update(n_layer=int(n_layer), n_embd=int(n_embd), projection_dim=int(proj_dim), n_wa_pattern=int(n_wa),
                projector_type=proj)


def verify_gguf(path: str | Path, kind: str = "text", expect: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Check a text-model or projector GGUF file without loading it into llama.cpp.

    Parameters
    ----------
    path : path-like
        The GGUF file.
    kind : {"text", "mmproj"}
        What the file must be: a ``qwen2vl`` text model or a ``clip`` ``qwen2.5vl_merger`` projector.
    expect : mapping, optional
        Extra expectations: ``n_tensors`` (int), ``file_type`` (int, ``general.file_type``),
        ``tensor_types`` (mapping tensor name -> type name), ``allowed_types`` (type names for every
        tensor), ``n_embd`` (text hidden size; for a projector its ``projection_dim``), ``metadata``
        (mapping key -> value).

    Returns
    -------
    dict
        ``path, kind, arch, size, n_tensors, file_type, types`` (type name -> count) and the key
        hyper-parameters (``n_layer, n_embd, n_vocab, tied, ...`` or ``projection_dim, n_wa_pattern``).

    Raises
    ------
    ModelFileError
        Not a GGUF, corrupt or truncated, wrong architecture, missing keys or tensors, bad shapes.
    ConversionError
        A valid file that does not meet ``expect``.
    """
    if kind not in ARCH:
        raise ValueError(f"kind must be 'text' or 'mmproj', not {kind!r}")
    path = Path(path)
    reader = read_gguf(path)
    arch = _field(reader, "general.architecture")
    if arch != ARCH[kind]:
        what = {"qwen2vl": "a Qwen2-VL text model", "clip": "a vision projector"}.get(arch, f"arch {arch!r}")
        raise ModelFileError(path, f"expected a {ARCH[kind]!r} {kind} file, found {what}")
    tensors = {t.name: t for t in reader.tensors}
    bad_1d = [t.name for t in reader.tensors if len(_shape(t)) == 1 and t.tensor_type not in _FLOAT_ONLY]
    if bad_1d:
        raise ModelFileError(path, f"1-D tensors must be float, found {bad_1d[0]} "
                                   f"{tensors[bad_1d[0]].tensor_type.name}")
    types: dict[str, int] = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    info: dict[str, Any] = {"path": str(path), "kind": kind, "arch": arch, "size": path.stat().st_size,
                            "n_tensors": len(tensors), "file_type": _field(reader, "general.file_type"),
                            "name": _field(reader, "general.name"), "types": types}
    (_check_text if kind == "text" else _check_mmproj)(path, reader, tensors, info)
    if expect:
        _check_expect(path, reader, tensors, info, expect)
    logger.debug("verified %s: %s", path, {k: v for k, v in info.items() if k != "chat_template"})
    return info


def _check_expect(path: Path, reader, tensors: dict, info: dict[str, Any], expect: Mapping[str, Any]) -> None:
    problems = []
    if "n_tensors" in expect and info["n_tensors"] != expect["n_tensors"]:
        problems.append(f"{info['n_tensors']} tensors, expected {expect['n_tensors']}")
    if "file_type" in expect and info["file_type"] != int(expect["file_type"]):
        problems.append(f"file_type {info['file_type']}, expected {int(expect['file_type'])}")
    for name, tname in (expect.get("tensor_types") or {}).items():
        if name not in tensors:
            problems.append(f"tensor {name} absent")
        elif tensors[name].tensor_type.name != str(tname).upper():
            problems.append(f"{name} is {tensors[name].tensor_type.name}, expected {str(tname).upper()}")
    allowed = {str(a).upper() for a in expect.get("allowed_types") or ()}
    if allowed and not set(info["types"]) <= allowed:
        problems.append(f"tensor types {sorted(info['types'])} outside {sorted(allowed)}")
    if "n_embd" in expect:
        have = info.get("projection_dim" if info["kind"] == "mmproj" else "n_embd")
        if have != expect["n_embd"]:
            problems.append(f"width {have}, expected {expect['n_embd']}")
    for key, val in (expect.get("metadata") or {}).items():
        got = _field(reader, key)
        if isinstance(got, list) or isinstance(val, (list, tuple)):
            got, val = list(got or []), list(val)
        if got != val:
            problems.append(f"{key} = {got!r}, expected {val!r}")
    if problems:
        raise ConversionError(f"{path}: " + "; ".join(problems))


def verify_pair(text_path: str | Path, mmproj_path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Verify a text model and a projector and check that the projector feeds the model's width."""
    text = verify_gguf(text_path, "text")
    mmproj = verify_gguf(mmproj_path, "mmproj")
    if mmproj["projection_dim"] != text["n_embd"]:
        raise ModelFileError(mmproj_path, f"projector outputs {mmproj['projection_dim']} values per token but "
                                          f"the text model {Path(text_path).name} has width {text['n_embd']}")
    return text, mmproj

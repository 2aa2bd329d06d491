"""The converter's checks of the GGUF files it writes: the model package's structural checker plus expectations.

Whether a file is a complete, consistent Qwen2.5-VL text model or vision projector is decided in one place,
`speco3_models.gguf_check` (a bounded scan of the header and tensor table: milliseconds even on a 152k-token
vocabulary, no tensor data read). :func:`verify_gguf` runs it and then checks what the converter or the
quantizer expected of this particular file (tensor count, ``general.file_type``, tensor types, width,
metadata values). A file that is not what llama.cpp can load raises :class:`~speco3_base.errors.ModelFileError`
(from the checker); a valid file that is not what was expected raises :class:`~speco3_base.errors.ConversionError`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speco3_base.errors import ConversionError
from speco3_models.gguf_check import (
    TEXT_ARCH,
    GGUFSummary,
    check_pair,
    check_projector,
    check_text_model,
    projector_output_width,
    projector_type,
    read_gguf_summary,
)

logger = logging.getLogger(__name__)

_CHECKS = {"text": check_text_model, "mmproj": check_projector}


def _info(s: GGUFSummary, kind: str) -> dict[str, Any]:
    info: dict[str, Any] = {"path": str(s.path), "kind": kind, "arch": s.arch, "size": s.file_size,
                            "n_tensors": s.n_tensors, "file_type": s.get("general.file_type"), "name": s.name,
                            "types": dict(s.tensor_types)}
    if kind == "text":
        a = TEXT_ARCH
        info.update(n_layer=s.get(f"{a}.block_count"), n_embd=s.get(f"{a}.embedding_length"),
                    n_head=s.get(f"{a}.attention.head_count"), n_vocab=len(s.get("tokenizer.ggml.tokens")),
                    tied="output.weight" not in s.tensors, rope_sections=list(s.get(f"{a}.rope.dimension_sections")),
                    chat_template=s.get("tokenizer.chat_template"), tokenizer_pre=s.get("tokenizer.ggml.pre"))
    else:
        info.update(n_layer=s.get("clip.vision.block_count"), n_embd=s.get("clip.vision.embedding_length"),
                    projection_dim=projector_output_width(s), n_wa_pattern=s.get("clip.vision.n_wa_pattern"),
                    projector_type=projector_type(s))
    return info


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
        tensor), ``n_embd`` (text hidden size; for a projector its output width), ``metadata``
        (mapping key -> value).

    Returns
    -------
    dict
        ``path, kind, arch, size, n_tensors, file_type, types`` (type name -> count) and the key
        hyper-parameters (``n_layer, n_embd, n_vocab, tied, ...`` or ``projection_dim, n_wa_pattern``).

    Raises
    ------
    ModelFileError
        From `speco3_models.gguf_check`: not a GGUF, corrupt or truncated, wrong architecture, missing keys or
        tensors, bad shapes.
    ConversionError
        A valid file that does not meet ``expect``.
    """
    if kind not in _CHECKS:
        raise ValueError(f"kind must be 'text' or 'mmproj', not {kind!r}")
    summary = _CHECKS[kind](read_gguf_summary(path))
    info = _info(summary, kind)
    if expect:
        _check_expect(summary, info, expect)
    logger.debug("verified %s: %s", path, {k: v for k, v in info.items() if k != "chat_template"})
    return info


def _check_expect(s: GGUFSummary, info: dict[str, Any], expect: Mapping[str, Any]) -> None:
    problems = []
    if "n_tensors" in expect and info["n_tensors"] != expect["n_tensors"]:
        problems.append(f"{info['n_tensors']} tensors, expected {expect['n_tensors']}")
    if "file_type" in expect and info["file_type"] != int(expect["file_type"]):
        problems.append(f"file_type {info['file_type']}, expected {int(expect['file_type'])}")
    for name, tname in (expect.get("tensor_types") or {}).items():
        if name not in s.tensors:
            problems.append(f"tensor {name} absent")
        elif s.tensors[name].type != str(tname).upper():
            problems.append(f"{name} is {s.tensors[name].type}, expected {str(tname).upper()}")
    allowed = {str(a).upper() for a in expect.get("allowed_types") or ()}
    if allowed and not set(info["types"]) <= allowed:
        problems.append(f"tensor types {sorted(info['types'])} outside {sorted(allowed)}")
    if "n_embd" in expect:
        have = info.get("projection_dim" if info["kind"] == "mmproj" else "n_embd")
        if have != expect["n_embd"]:
            problems.append(f"width {have}, expected {expect['n_embd']}")
    for key, val in (expect.get("metadata") or {}).items():
        got = s.get(key)
        if isinstance(got, list) or isinstance(val, (list, tuple)):
            got, val = list(got) if isinstance(got, list) else got, list(val)
        if got != val:
            problems.append(f"{key} = {got!r}, expected {val!r}")
    if problems:
        raise ConversionError(f"{s.path}: " + "; ".join(problems))


def verify_pair(text_path: str | Path, mmproj_path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Verify a text model and a projector and that the projector feeds the model's width
    (`speco3_models.gguf_check.check_pair`)."""
    pair = check_pair(text_path, mmproj_path)
    return _info(pair.text, "text"), _info(pair.mmproj, "mmproj")

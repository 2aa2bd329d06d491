"""Conversion plans: the GGUF files to write, their metadata and every tensor with its source and type.

A plan is built without reading any weight data, so ``--dry-run`` can show it and the writer
(:mod:`speco3_converters.gguf_stream`) can lay out the file header before streaming the tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

#: Output type names accepted by the converter -> GGML tensor type and llama file type.
OUTTYPES: dict[str, tuple[QT, int]] = {
    "bf16": (QT.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "f16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "f32": (QT.F32, gguf.LlamaFileType.ALL_F32),
    "q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}


@dataclass(frozen=True)
class KV:
    """One metadata key of a GGUF file."""

    key: str
    value: object
    vtype: VT
    sub_type: VT | None = None

    def summary(self) -> object:
        """A printable form (long arrays shortened)."""
        if isinstance(self.value, (list, tuple)) and len(self.value) > 8:
            return f"[{len(self.value)} x {self.sub_type.name if self.sub_type else '?'}]"
        if isinstance(self.value, str) and len(self.value) > 80:
            return f"<{len(self.value)} characters>"
        return list(self.value) if isinstance(self.value, tuple) else self.value


@dataclass(frozen=True)
class PlannedTensor:
    """One output tensor.

    Attributes
    ----------
    name : str
        GGUF tensor name.
    source : str
        Name of the checkpoint tensor it is made from.
    shape : tuple of int
        Output shape in row-major (numpy) order; GGUF stores it reversed.
    qtype : GGMLQuantizationType
        Output type.
    rows : tuple of int, optional
        ``(start, stop)`` slice along the first axis of the source (fused QKV split).
    temporal : int, optional
        Index along axis 2 of a Conv3d kernel ``[out, in, t, h, w]`` (patch embedding split).
    """

    name: str
    source: str
    shape: tuple[int, ...]
    qtype: QT
    rows: tuple[int, int] | None = None
    temporal: int | None = None

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        block, size = gguf.GGML_QUANT_SIZES[self.qtype]
        return self.n_elements // block * size

    def describe(self) -> dict[str, Any]:
        how = ""
        if self.rows is not None:
            how = f"rows {self.rows[0]}:{self.rows[1]}"
        elif self.temporal is not None:
            how = f"temporal slice {self.temporal}"
        return {"name": self.name, "shape": list(self.shape), "type": self.qtype.name,
                "source": self.source, "transform": how or "copy", "bytes": self.nbytes}


@dataclass
class FilePlan:
    """Everything needed to write one GGUF file."""

    kind: str  # "text" or "mmproj"
    arch: str
    file_name: str
    metadata: list[KV] = field(default_factory=list)
    tensors: list[PlannedTensor] = field(default_factory=list)

    def add(self, key: str, value: object, vtype: VT, sub_type: VT | None = None) -> None:
        self.metadata.append(KV(key, value, vtype, sub_type))

    def value(self, key: str) -> object:
        for kv in self.metadata:
            if kv.key == key:
                return kv.value
        raise KeyError(key)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.tensors:
            counts[t.qtype.name] = counts.get(t.qtype.name, 0) + 1
        return counts

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "arch": self.arch,
            "file": self.file_name,
            "n_tensors": len(self.tensors),
            "tensor_bytes": self.tensor_bytes,
            "types": self.type_counts(),
            "metadata": {kv.key: kv.summary() for kv in self.metadata},
            "tensors": [t.describe() for t in self.tensors],
        }


@dataclass
class ConversionPlan:
    """The text model and projector files planned for one checkpoint."""

    source: str
    layout: str
    config_layout: str
    input_dtypes: list[str]
    text: FilePlan
    mmproj: FilePlan
    notes: list[str] = field(default_factory=list)

    @property
    def files(self) -> list[FilePlan]:
        return [self.text, self.mmproj]

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tensor_layout": self.layout,
            "config_layout": self.config_layout,
            "input_dtypes": self.input_dtypes,
            "notes": self.notes,
            "files": [f.describe() for f in self.files],
        }

"""Torch-free, bounded-memory reading of (sharded) safetensors checkpoints.

The safetensors format is an 8-byte little-endian header length, a JSON header mapping tensor names to
``{"dtype", "shape", "data_offsets"}`` and the raw little-endian tensor bytes. numpy has no bfloat16, so
BF16 tensors are read as raw ``uint16`` words and widened to float32 by a 16-bit shift when a conversion
is needed. Tensors are read in row blocks with plain file reads (never a whole-file memory map), so the
resident memory of a conversion is bounded by the block size, not by the size of the model.
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speco3_base.errors import ConversionError

logger = logging.getLogger(__name__)

#: safetensors dtype name -> (bytes per element, numpy dtype used to hold the raw words)
DTYPES: dict[str, tuple[int, np.dtype]] = {
    "BF16": (2, np.dtype("<u2")),
    "F16": (2, np.dtype("<f2")),
    "F32": (4, np.dtype("<f4")),
}

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MAX_HEADER_BYTES = 100 * 1024 * 1024
DEFAULT_BLOCK_BYTES = 4 * 1024 * 1024  # small blocks: buffers are reused by malloc, no fresh page faults


def bf16_to_f32(words: np.ndarray) -> np.ndarray:
    """Widen raw bfloat16 words (``uint16``) to float32 exactly."""
    return (words.astype(np.uint32) << 16).view(np.float32)


@dataclass(frozen=True)
class TensorRef:
    """Location and layout of one tensor inside a safetensors shard.

    Attributes
    ----------
    name : str
        Tensor name as stored in the checkpoint.
    dtype : str
        safetensors dtype (``BF16``, ``F16`` or ``F32``).
    shape : tuple of int
        Tensor shape (row-major, as in PyTorch).
    path : Path
        Shard file.
    offset : int
        Absolute byte offset of the first element in ``path``.
    nbytes : int
        Size of the tensor data in bytes.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    path: Path
    offset: int
    nbytes: int

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][0]

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def row_len(self) -> int:
        """Length of the innermost dimension (1 for a scalar)."""
        return self.shape[-1] if self.shape else 1

    @property
    def n_rows(self) -> int:
        return self.n_elements // self.row_len if self.row_len else 0

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Read rows ``start:stop`` of the tensor seen as ``(n_rows, row_len)``, in the raw dtype.

        Raises
        ------
        ConversionError
            If the shard is shorter than its header promises.
        """
        count = (stop - start) * self.row_len
        nbytes = count * self.itemsize
        out = np.empty(count, dtype=DTYPES[self.dtype][1])
        with open(self.path, "rb") as fh:
            fh.seek(self.offset + start * self.row_len * self.itemsize)
            got = fh.readinto(out.data.cast("B"))
        if got != nbytes:
            raise ConversionError(
                f"{self.path.name}: tensor {self.name!r} is truncated (read {got} of {nbytes} bytes)"
            )
        return out.reshape(stop - start, self.row_len)

    def read(self) -> np.ndarray:
        """Read the whole tensor in its raw dtype and shape (use only for small tensors)."""
        return self.read_rows(0, self.n_rows).reshape(self.shape)

    def row_blocks(self, max_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[tuple[int, int]]:
        """Yield ``(start, stop)`` row ranges of at most ``max_bytes`` each (at least one row)."""
        rows_per_block = max(1, max_bytes // max(1, self.row_len * self.itemsize))
        for start in range(0, self.n_rows, rows_per_block):
            yield start, min(self.n_rows, start + rows_per_block)


def read_header(path: Path) -> tuple[dict, int]:
    """Parse the JSON header of one safetensors file.

    Returns
    -------
    header : dict
        The decoded header (including ``__metadata__`` when present).
    data_start : int
        Absolute offset of the data section.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            raw_len = fh.read(8)
            if len(raw_len) != 8:
                raise ConversionError(f"{path.name}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", raw_len)
            if n <= 1 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise ConversionError(f"{path.name}: not a safetensors file (header length {n} invalid)")
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as exc:
        raise ConversionError(f"{path}: cannot read shard ({exc.strerror or exc})") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConversionError(f"{path.name}: safetensors header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise ConversionError(f"{path.name}: safetensors header is not a JSON object")
    return header, 8 + n


def tensor_refs(path: Path) -> dict[str, TensorRef]:
    header, data_start = read_header(path)
    size = path.stat().st_size
    refs: dict[str, TensorRef] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = info["dtype"]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConversionError(f"{path.name}: malformed header entry for {name!r}") from exc
        if dtype not in DTYPES:
            raise ConversionError(
                f"{path.name}: tensor {name!r} has dtype {dtype}; supported are {', '.join(DTYPES)}"
            )
        nbytes = math.prod(shape) * DTYPES[dtype][0]
        if end - begin != nbytes or begin < 0:
            raise ConversionError(
                f"{path.name}: tensor {name!r} spans {end - begin} bytes but shape {list(shape)} "
                f"of {dtype} needs {nbytes}"
            )
        if data_start + end > size:
            raise ConversionError(
                f"{path.name}: file is truncated ({size} bytes; tensor {name!r} ends at {data_start + end})"
            )
        refs[name] = TensorRef(name, dtype, shape, path, data_start + begin, nbytes)
    return refs


class SafetensorsCheckpoint:
    """All tensors of a Hugging Face checkpoint folder, sharded (with an index) or single-file.

    Parameters
    ----------
    folder : Path
        Folder holding ``model.safetensors.index.json`` and its shards, or ``model.safetensors``.

    Raises
    ------
    ConversionError
        If no weights are found, a shard named by the index is missing, or a header is invalid.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        index = self.folder / INDEX_NAME
        self.tensors: dict[str, TensorRef] = {}
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConversionError(f"{index}: invalid index file ({exc})") from exc
            shards = sorted(set(weight_map.values()))
            missing = [s for s in shards if not (self.folder / s).is_file()]
            if missing:
                raise ConversionError(
                    f"{self.folder}: the index names {len(shards)} shard(s); missing: {', '.join(missing)}"
                )
            for shard in shards:
                self.tensors.update(tensor_refs(self.folder / shard))
            absent = sorted(n for n in weight_map if n not in self.tensors)
            if absent:
                raise ConversionError(
                    f"{self.folder}: {len(absent)} tensor(s) listed in the index are not in their shards, "
                    f"e.g. {absent[0]!r}"
                )
        else:
            shards = sorted(p.name for p in self.folder.glob("*.safetensors"))
            if not shards:
                found = sorted(p.name for p in self.folder.iterdir()) if self.folder.is_dir() else []
                raise ConversionError(
                    f"{self.folder}: no safetensors weights (expected {INDEX_NAME} or {SINGLE_NAME}); "
                    f"found: {', '.join(found[:12]) or 'nothing'}"
                )
            for shard in shards:
                for name, ref in tensor_refs(self.folder / shard).items():
                    if name in self.tensors:
                        raise ConversionError(f"{self.folder}: tensor {name!r} appears in two shards")
                    self.tensors[name] = ref
        self.shards = shards
        logger.debug("checkpoint %s: %d tensors in %d shard(s)", self.folder, len(self.tensors), len(shards))

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def __getitem__(self, name: str) -> TensorRef:
        return self.tensors[name]

    def names(self) -> list[str]:
        return list(self.tensors)

    @property
    def dtypes(self) -> set[str]:
        return {ref.dtype for ref in self.tensors.values()}

    @property
    def total_bytes(self) -> int:
        return sum(ref.nbytes for ref in self.tensors.values())

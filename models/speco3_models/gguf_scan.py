"""Bounded structural scan of a GGUF file, run before any other reader trusts it.

A GGUF file is a header (magic, version, tensor and key counts), key/value metadata, a table of tensor
descriptions and, after padding to the alignment, the tensor data. Every length in it is a 64-bit number read
from the file; a truncated, zero-filled or garbage file can claim strings of exabytes or billions of tensors. This
scan walks the structure with every count checked against the bytes actually left in the file, and checks that
each tensor's data (offset + size from its shape and type) lies inside the file, so that the reader used next
(`gguf.GGUFReader`) and llama.cpp only ever see a file whose layout is consistent. It raises
`ModelFileError(path, reason)` naming the first problem and its byte offset. It allocates nothing proportional
to a claimed size; it decodes scalars, strings and short arrays and only walks long arrays (the tokenizer's
150k strings), so it takes milliseconds even on multi-gigabyte files.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf.constants import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGMLQuantizationType,
    GGUFValueType,
)

from speco3_base.errors import ModelFileError

logger = logging.getLogger(__name__)

SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_KEY_LEN = 65536
MAX_ARRAY_DEPTH = 4
HEADER_SIZE = 24
#: Arrays longer than this are summarised by type and length instead of being decoded.
MAX_DECODED_ARRAY = 64

_SCALAR = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}


@dataclass(frozen=True)
class ScannedTensor:
    """Where one tensor's data lies (offsets relative to the start of the file)."""

    name: str
    shape: tuple[int, ...]
    type: GGMLQuantizationType
    offset: int
    nbytes: int


@dataclass(frozen=True)
class ScanResult:
    """Layout facts established by `scan_gguf`."""

    version: int
    n_tensors: int
    n_kv: int
    alignment: int
    data_offset: int
    file_size: int
    tensors: tuple[ScannedTensor, ...]
    data_end: int  # end of the last tensor's data
    metadata: dict[str, Any] = field(default_factory=dict)  # decoded values; long arrays as LargeArray


class _Cursor:
    """Reads little-endian values from a buffer, refusing to read past its end."""

    def __init__(self, buf, path: Path, size: int):
        self.buf, self.path, self.size, self.pos = buf, path, size, 0

    def fail(self, reason: str) -> ModelFileError:
        return ModelFileError(self.path, reason)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(
                f"truncated or corrupt GGUF: {what} at byte {self.pos} needs {n} bytes but the file has "
                f"{max(self.size - self.pos, 0)} left (file size {self.size})"
            )

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize("<" + fmt)
        self.need(n, what)
        value = struct.unpack_from("<" + fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def string(self, what: str, max_len: int | None = None) -> str:
        n = self.unpack("Q", f"length of {what}")
        if max_len is not None and n > max_len:
            raise self.fail(f"corrupt GGUF: {what} at byte {self.pos - 8} claims {n} bytes (limit {max_len})")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"corrupt GGUF: {what} at byte {self.pos - n} is not UTF-8") from exc

    def skip_string(self, what: str) -> None:
        n = self.unpack("Q", f"length of {what}")
        self.need(n, what)
        self.pos += n


def _value_type(raw: int, cur: _Cursor, key: str) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise cur.fail(f"corrupt GGUF: metadata key {key!r} has unknown value type {raw}") from None


@dataclass(frozen=True)
class LargeArray:
    """A metadata array too long to decode in a summary (e.g. the tokenizer's tokens)."""

    item_type: str
    length: int

    def __len__(self) -> int:
        return self.length

    def __str__(self) -> str:
        return f"<{self.length} × {self.item_type}>"


def _read_value(cur: _Cursor, vtype: GGUFValueType, key: str, depth: int = 0) -> Any:
    """Read one value: scalars and strings decoded, arrays decoded when short, else a `LargeArray`."""
    if vtype == GGUFValueType.STRING:
        return cur.string(f"string value of {key!r}")
    if vtype in _SCALAR:
        return cur.unpack(_SCALAR[vtype], f"value of {key!r}")
    if vtype != GGUFValueType.ARRAY:  # pragma: no cover - every GGUFValueType is handled above
        raise cur.fail(f"corrupt GGUF: metadata key {key!r} has unhandled type {vtype}")
    if depth >= MAX_ARRAY_DEPTH:
        raise cur.fail(f"corrupt GGUF: metadata key {key!r} nests arrays deeper than {MAX_ARRAY_DEPTH}")
    itype = _value_type(cur.unpack("I", f"array type of {key!r}"), cur, key)
    count = cur.unpack("Q", f"array length of {key!r}")
    decode = count <= MAX_DECODED_ARRAY and itype != GGUFValueType.ARRAY
    if itype in _SCALAR:
        fmt = _SCALAR[itype]
        n = count * struct.calcsize(fmt)
        cur.need(n, f"{count} array items of {key!r}")
        values = list(struct.unpack_from(f"<{count}{fmt}", cur.buf, cur.pos)) if decode else None
        cur.pos += n
        return values if decode else LargeArray(itype.name.lower(), count)
    min_item = 8 if itype == GGUFValueType.STRING else 12
    cur.need(count * min_item, f"{count} array items of {key!r}")
    if decode:
        return [_read_value(cur, itype, key, depth + 1) for _ in range(count)]
    if itype == GGUFValueType.STRING:  # walk the lengths only: 150k tokenizer strings in milliseconds
        buf, pos, size = cur.buf, cur.pos, cur.size
        unpack = struct.Struct("<Q").unpack_from
        for i in range(count):
            if pos + 8 > size:
                cur.pos = pos
                cur.need(8, f"length of item {i} of {key!r}")
            n = unpack(buf, pos)[0]
            pos += 8
            if pos + n > size:
                cur.pos = pos
                cur.need(n, f"item {i} of {key!r}")
            pos += n
        cur.pos = pos
    else:
        for _ in range(count):
            _read_value(cur, itype, key, depth + 1)
    return LargeArray(itype.name.lower(), count)


def _tensor_bytes(cur: _Cursor, name: str, shape: tuple[int, ...], ttype: GGMLQuantizationType) -> int:
    block, type_size = GGML_QUANT_SIZES[ttype]
    if shape and shape[0] % block:
        raise cur.fail(
            f"corrupt GGUF: tensor {name!r} of type {ttype.name} has a first dimension {shape[0]} that is not a "
            f"multiple of its block size {block}"
        )
    n = 1
    for d in shape:
        n *= d
    return n // block * type_size


def scan_gguf(path: str | os.PathLike[str]) -> ScanResult:
    """Check the structure of a GGUF file without trusting any of its lengths.

    Parameters
    ----------
    path : path-like
        The file.

    Returns
    -------
    ScanResult
        Version, counts, alignment, data offset and the byte range of every tensor.

    Raises
    ------
    ModelFileError
        Missing or unreadable file, wrong magic, unsupported version or byte order, a count or length that does
        not fit in the file, unknown value or tensor types, duplicate names, or tensor data outside the file.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ModelFileError(path, f"cannot read the file ({exc.strerror or exc})") from exc
    if not path.is_file():
        raise ModelFileError(path, "not a regular file")
    if size < HEADER_SIZE:
        raise ModelFileError(path, f"too small to be a GGUF file ({size} bytes; the header alone is {HEADER_SIZE})")
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _scan(buf, path, size)
    except OSError as exc:
        raise ModelFileError(path, f"cannot read the file ({exc.strerror or exc})") from exc


def _scan(buf, path: Path, size: int) -> ScanResult:
    cur = _Cursor(buf, path, size)
    magic = cur.unpack("I", "magic")
    if magic != GGUF_MAGIC:
        head = bytes(buf[:4])
        what = "all zero bytes" if not any(buf[:min(size, 4096)]) else f"starts with {head!r}"
        raise cur.fail(f"not a GGUF file (no 'GGUF' magic; the file {what})")
    version = cur.unpack("I", "version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and struct.unpack(">I", struct.pack("<I", version))[0] in SUPPORTED_VERSIONS:
            raise cur.fail("big-endian GGUF file; this build of llama.cpp reads little-endian files only")
        raise cur.fail(f"unsupported GGUF version {version} (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
    n_tensors = cur.unpack("Q", "tensor count")
    n_kv = cur.unpack("Q", "metadata count")
    left = size - cur.pos
    if n_kv * 13 > left:
        raise cur.fail(f"truncated or corrupt GGUF: header claims {n_kv} metadata entries, more than a {size}-byte file can hold")
    if n_tensors * 24 > left:
        raise cur.fail(f"truncated or corrupt GGUF: header claims {n_tensors} tensors, more than a {size}-byte file can hold")

    alignment = GGUF_DEFAULT_ALIGNMENT
    keys: set[str] = set()
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"name of metadata entry {i}", MAX_KEY_LEN)
        if key in keys:
            raise cur.fail(f"corrupt GGUF: metadata key {key!r} appears twice")
        keys.add(key)
        vtype = _value_type(cur.unpack("I", f"type of {key!r}"), cur, key)
        value = _read_value(cur, vtype, key)
        metadata[key] = value
        if key == "general.alignment":
            if vtype != GGUFValueType.UINT32 or value == 0 or value & (value - 1):
                raise cur.fail(f"corrupt GGUF: general.alignment must be a power-of-two uint32, got type {vtype.name}")
            alignment = value

    infos: list[tuple[str, tuple[int, ...], GGMLQuantizationType, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        name = cur.string(f"name of tensor {i}", MAX_KEY_LEN)
        if name in names:
            raise cur.fail(f"corrupt GGUF: tensor {name!r} appears twice")
        names.add(name)
        n_dims = cur.unpack("I", f"dimension count of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"corrupt GGUF: tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        shape = tuple(cur.unpack("Q", f"shape of {name!r}") for _ in range(n_dims))
        if any(d == 0 or d >= 2**40 for d in shape):
            raise cur.fail(f"corrupt GGUF: tensor {name!r} has an impossible shape {list(shape)}")
        raw_type = cur.unpack("I", f"type of {name!r}")
        try:
            ttype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise cur.fail(f"corrupt GGUF: tensor {name!r} has unknown type {raw_type}") from None
        if ttype not in GGML_QUANT_SIZES:
            raise cur.fail(f"corrupt GGUF: tensor {name!r} has unsupported type {ttype.name}")
        offset = cur.unpack("Q", f"data offset of {name!r}")
        infos.append((name, shape, ttype, offset))

    data_offset = cur.pos + (-cur.pos % alignment)
    if data_offset > size:
        raise cur.fail(f"truncated GGUF: the file ends ({size} bytes) before its tensor data starts ({data_offset})")
    tensors = []
    data_end = data_offset
    for name, shape, ttype, offset in infos:
        if offset % alignment:
            raise cur.fail(f"corrupt GGUF: tensor {name!r} data offset {offset} is not aligned to {alignment} bytes")
        nbytes = _tensor_bytes(cur, name, shape, ttype)
        start, end = data_offset + offset, data_offset + offset + nbytes
        if end > size:
            raise cur.fail(
                f"truncated GGUF: tensor {name!r} ({ttype.name} {list(shape)}) needs bytes {start}–{end} but the "
                f"file has only {size} bytes"
            )
        data_end = max(data_end, end)
        tensors.append(ScannedTensor(name, shape, ttype, start, nbytes))
    logger.debug("scanned %s: v%d, %d keys, %d tensors, data %d–%d", path, version, n_kv, n_tensors, data_offset, data_end)
    return ScanResult(version, n_tensors, n_kv, alignment, data_offset, size, tuple(tensors), data_end, metadata)

"""Streaming GGUF writer: header and tensor infos first, then tensor data block by block.

gguf's :class:`gguf.GGUFWriter` normally keeps every tensor in memory until the file is written. Here the
tensor infos are declared up front (sizes are known from the plan) and each tensor is handed to
``write_tensor_data`` as a lazy object whose ``tofile`` reads, converts and writes the source in row
blocks of a few tens of MB. Peak memory is therefore a few blocks, whatever the size of the model.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from speco3_base.errors import ConversionError
from speco3_base.fileio import Progress

from .plan import FilePlan, PlannedTensor
from .safetensors_io import DEFAULT_BLOCK_BYTES, SafetensorsCheckpoint, TensorRef, bf16_to_f32

logger = logging.getLogger(__name__)

_SAME = {("BF16", QT.BF16), ("F16", QT.F16), ("F32", QT.F32)}


def _to_f32(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return bf16_to_f32(raw)
    return raw.astype(np.float32, copy=False)


def encode(raw: np.ndarray, src_dtype: str, qtype: QT, name: str) -> np.ndarray:
    """Convert a block of raw source rows to the output type, as contiguous bytes-ready array.

    Raises
    ------
    ConversionError
        If values overflow the output type (F16 above 65504).
    """
    if (src_dtype, qtype) in _SAME:
        return np.ascontiguousarray(raw)
    f32 = _to_f32(raw, src_dtype)
    if qtype == QT.F32:
        return np.ascontiguousarray(f32)
    if qtype == QT.F16:
        with np.errstate(over="ignore"):
            out = f32.astype(np.float16)
        if not np.isfinite(out).all() and np.isfinite(f32).all():
            big = float(np.abs(f32).max())
            raise ConversionError(
                f"tensor {name}: values up to {big:.4g} overflow F16 (max 65504); convert with outtype bf16 or f32"
            )
        return out
    if qtype in (QT.BF16, QT.Q8_0):
        return gguf.quants.quantize(np.ascontiguousarray(f32), qtype)
    raise ConversionError(f"tensor {name}: output type {qtype.name} is not supported by the converter")


def _blocks(t: PlannedTensor, ref: TensorRef, block_bytes: int) -> Iterator[np.ndarray]:
    """Raw source blocks for one planned tensor, rows in output order."""
    if t.temporal is not None:  # Conv3d [out, in, t, h, w] -> Conv2d [out, in, h, w]; small tensor
        full = ref.read()
        yield np.ascontiguousarray(full[:, :, t.temporal]).reshape(-1, t.shape[-1])
        return
    if len(ref.shape) == 1:
        data = ref.read()
        if t.rows is not None:
            data = data[t.rows[0]:t.rows[1]]
        yield data.reshape(1, -1)
        return
    start, stop = t.rows if t.rows is not None else (0, ref.n_rows)
    # rows of the source seen as (n_rows, row_len); for >2-D tensors the first axis spans several rows
    per_first = ref.n_rows // ref.shape[0]
    start, stop = start * per_first, stop * per_first
    rows_per_block = max(1, block_bytes // max(1, ref.row_len * ref.itemsize))
    for a in range(start, stop, rows_per_block):
        yield ref.read_rows(a, min(stop, a + rows_per_block))


class _LazyTensor:
    """Duck-typed array for ``GGUFWriter.write_tensor_data``: only ``nbytes`` and ``tofile`` are used."""

    def __init__(self, t: PlannedTensor, ref: TensorRef, block_bytes: int, on_bytes: Callable[[int], None]):
        self.t, self.ref, self.block_bytes, self.on_bytes = t, ref, block_bytes, on_bytes
        self.nbytes = t.nbytes

    def byteswap(self, inplace: bool = False):  # pragma: no cover - little-endian only
        raise ConversionError("big-endian GGUF output is not supported")

    def _byte_range(self) -> tuple[int, int] | None:
        """``(offset, length)`` in the shard when the output is a verbatim byte range of the source."""
        t, ref = self.t, self.ref
        if (ref.dtype, t.qtype) not in _SAME or t.temporal is not None:
            return None
        if t.rows is None:
            return ref.offset, ref.nbytes
        per_row = ref.nbytes // ref.shape[0]
        return ref.offset + t.rows[0] * per_row, (t.rows[1] - t.rows[0]) * per_row

    def tofile(self, fh) -> None:
        span = self._byte_range()
        if span is not None:
            copy_range(self.ref.path, fh, *span, on_bytes=self.on_bytes)
            return
        written = 0
        for raw in _blocks(self.t, self.ref, self.block_bytes):
            out = encode(raw, self.ref.dtype, self.t.qtype, self.t.name)
            fh.write(out.data.cast("B"))
            written += out.nbytes
            self.on_bytes(out.nbytes)
        if written != self.nbytes:
            raise ConversionError(f"tensor {self.t.name}: wrote {written} bytes, planned {self.nbytes}")


def copy_range(src: Path, fh, offset: int, length: int, *, on_bytes: Callable[[int], None],
               step: int = 64 << 20) -> None:
    """Append ``length`` bytes of ``src`` from ``offset`` to the open output ``fh``.

    Uses ``os.copy_file_range`` (in-kernel, no user-space copy) where available, else reads into one
    reused buffer. ``fh`` is left positioned at its end.
    """
    fh.flush()
    out_fd, done = fh.fileno(), 0
    with open(src, "rb") as sf:
        in_fd = sf.fileno()
        if hasattr(os, "copy_file_range"):
            try:
                while done < length:
                    n = os.copy_file_range(in_fd, out_fd, min(step, length - done), offset + done)
                    if n <= 0:
                        break
                    done += n
                    on_bytes(n)
            except OSError as exc:  # e.g. EXDEV/EINVAL on some file systems: fall back to plain copies
                logger.debug("copy_file_range unavailable (%s), copying through a buffer", exc)
        if done < length:
            buf = bytearray(min(step, length - done))
            view = memoryview(buf)
            sf.seek(offset + done)
            os.lseek(out_fd, 0, os.SEEK_END)
            while done < length:
                n = sf.readinto(view[: min(len(buf), length - done)])
                if not n:
                    raise ConversionError(f"{src.name}: unexpected end of file at byte {offset + done}")
                _write_all(out_fd, view[:n])
                done += n
                on_bytes(n)
    fh.seek(0, os.SEEK_END)


def _write_all(fd: int, data: memoryview) -> None:
    while len(data):
        n = os.write(fd, data)
        data = data[n:]


def write_file(plan: FilePlan, ckpt: SafetensorsCheckpoint, path: Path, *, progress: Progress | None = None,
               block_bytes: int = DEFAULT_BLOCK_BYTES) -> Path:
    """Write one planned GGUF file, streaming tensor data; the file appears only when complete.

    Parameters
    ----------
    plan : FilePlan
        Metadata and tensors.
    ckpt : SafetensorsCheckpoint
        Source tensors.
    path : Path
        Destination file.
    progress : callable, optional
        ``progress(stage, bytes_done, bytes_total)`` with ``stage`` = ``plan.kind``.
    block_bytes : int
        Size of the row blocks read from the source.

    Returns
    -------
    Path
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    total = plan.tensor_bytes
    free = shutil.disk_usage(path.parent).free
    if free < total + (64 << 20):
        raise ConversionError(
            f"{path.parent}: not enough free disk space for {path.name} "
            f"(needs {total / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free)"
        )
    part = path.with_name(path.name + ".part")
    done = 0

    def on_bytes(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(plan.kind, done, total)

    writer = gguf.GGUFWriter(part, plan.arch)
    try:
        for kv in plan.metadata:
            writer.add_key_value(kv.key, kv.value, kv.vtype, kv.sub_type)
        for t in plan.tensors:
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes, raw_dtype=t.qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        if progress is not None:
            progress(plan.kind, 0, total)
        for t in plan.tensors:
            # gguf only calls tofile() on what it is given: _LazyTensor streams the tensor instead of an array
            writer.write_tensor_data(_LazyTensor(t, ckpt.tensors[t.source], block_bytes, on_bytes))  # type: ignore[arg-type]
        writer.close()
        os.replace(part, path)
    except BaseException:
        writer.close()
        part.unlink(missing_ok=True)
        raise
    logger.info("wrote %s (%d tensors, %.1f MiB)", path, len(plan.tensors), path.stat().st_size / 2**20)
    return path

"""Quantization of converted GGUF files with llama.cpp's ``llama_model_quantize``, in a child process.

The call blocks for minutes on a 7B model and aborts the process on a malformed file, so it runs in a
subprocess (``python -m speco3_converters.quantize``). llama.cpp logs one line per tensor
(``[  12/ 339] blk.0.attn_q.weight ...``); the parent reads them to report progress. The input is checked
(`speco3_models.gguf_check`) before llama.cpp sees it and the output is verified before it replaces ``dst``.

Memory: llama.cpp converts each tensor to F32 before quantizing it, in slabs of rows of at most ``max_buf_size``
bytes. Its default (8 GiB) takes a 7B model's 152,064 × 3,584 embedding in one slab: 2.2 GB of F32 plus the
output. `MAX_BUF_BYTES` bounds the slabs instead; rows are quantized independently, so the file is the same.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from gguf import GGMLQuantizationType as QT

from speco3_base.errors import ConversionError
from speco3_models.gguf_check import PROJECTOR_ARCH, TEXT_ARCH, read_gguf_summary

from .verify import verify_gguf

logger = logging.getLogger(__name__)

#: quantization name -> llama_ftype
FTYPES: dict[str, int] = {"Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "Q8_0": 7, "F16": 1}
_PROGRESS = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]")
_FLOAT_SOURCES = {QT.F32.name, QT.F16.name, QT.BF16.name}
#: Bytes of tensor rows (source, F32 copy, output) llama.cpp holds at once while quantizing.
MAX_BUF_BYTES = 256 << 20


def quantize(src: str | Path, dst: str | Path, qtype: str = "Q4_K_M", *,
             progress: Callable[[str, int, int], None] | None = None, n_threads: int | None = None,
             timeout: float | None = None, max_buf_bytes: int = MAX_BUF_BYTES) -> Path:
    """Quantize a text model (or a projector to Q8_0/F16) with llama.cpp, in a subprocess.

    Parameters
    ----------
    src : path-like
        F32/F16/BF16 GGUF written by the converter.
    dst : path-like
        Output file; written as ``dst.part`` and renamed after verification.
    qtype : {"Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16"}
        Target type mixture (llama.cpp's; K-quants fall back per tensor when a row length is not a
        multiple of 256).
    progress : callable, optional
        ``progress("quantize", tensors_done, tensors_total)``.
    n_threads : int, optional
        Threads for llama.cpp (default: all cores).
    timeout : float, optional
        Seconds before the child is killed (also while it writes no log line).
    max_buf_bytes : int
        Slab size of llama.cpp's quantizer (0: llama.cpp's default of 8 GiB); the output does not depend on it.

    Returns
    -------
    Path
        ``dst``.

    Raises
    ------
    ConversionError
        Unknown type, unsuitable input, or llama.cpp failed (its last log lines are included).
    ModelFileError
        The input is not a valid GGUF.
    """
    src, dst = Path(src), Path(dst)
    if qtype not in FTYPES:
        raise ConversionError(f"unknown quantization {qtype!r}; choose one of {', '.join(FTYPES)}")
    summary = read_gguf_summary(src)
    kind = {TEXT_ARCH: "text", PROJECTOR_ARCH: "mmproj"}.get(summary.arch)
    if kind is None:
        raise ConversionError(f"{src}: cannot quantize architecture {summary.arch!r} (expected qwen2vl or clip)")
    if kind == "mmproj" and qtype not in ("Q8_0", "F16"):
        raise ConversionError(f"{src}: a vision projector should stay F16 or Q8_0, not {qtype}")
    quantized = sorted(set(summary.tensor_types) - _FLOAT_SOURCES)
    if quantized:
        raise ConversionError(f"{src}: already quantized ({', '.join(quantized)}); quantize from the F16/BF16 file")
    verify_gguf(src, kind)
    dst.parent.mkdir(parents=True, exist_ok=True)
    part = dst.with_name(dst.name + ".part")
    cmd = [sys.executable, "-m", "speco3_converters.quantize", str(src), str(part), str(FTYPES[qtype]),
           str(n_threads or 0), str(max(0, int(max_buf_bytes)))]
    logger.info("quantizing %s -> %s (%s)", src.name, dst.name, qtype)
    tail: collections.deque[str] = collections.deque(maxlen=12)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def read_log() -> None:  # on its own thread, so that the wait below runs (and times out) meanwhile
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.rstrip())
            m = _PROGRESS.search(line)
            if m and progress is not None:
                progress("quantize", int(m.group(1)), int(m.group(2)))

    reader = threading.Thread(target=read_log, name="quantize-log", daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        reader.join()
        part.unlink(missing_ok=True)
        raise ConversionError(f"{src.name}: quantization to {qtype} did not finish within {timeout} s") from exc
    except BaseException:
        proc.kill()
        proc.wait()
        part.unlink(missing_ok=True)
        raise
    reader.join()  # the child has exited: its log ends
    if rc != 0 or not part.is_file():
        part.unlink(missing_ok=True)
        how = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
        raise ConversionError(f"{src.name}: llama.cpp quantization to {qtype} failed ({how}):\n" + "\n".join(tail))
    try:
        verify_gguf(part, kind, expect={"file_type": FTYPES[qtype]})
    except Exception:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dst)
    return dst


def _child(argv: list[str]) -> int:
    """Child entry point: ``SRC DST FTYPE NTHREADS [MAX_BUF_BYTES]``; llama.cpp's log goes to stderr."""
    import ctypes

    import llama_cpp

    src, dst, ftype, nthread = argv[0], argv[1], int(argv[2]), int(argv[3])
    max_buf = int(argv[4]) if len(argv) > 4 else 0

    @llama_cpp.llama_log_callback
    def _log(level, text, user_data):  # noqa: ARG001 - C callback signature
        sys.stderr.write(text.decode("utf-8", errors="replace"))
        sys.stderr.flush()

    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = nthread
    params.max_buf_size = max_buf
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        sys.stderr.write(f"llama_model_quantize returned {rc}\n")
    return 1 if rc != 0 else 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))

"""Process-wide glue to llama.cpp: backend initialisation, native log routing, device discovery, file checks.

Everything here is shared by all engines of the process. llama.cpp's logger is global (not thread-safe to
change), so it is installed once, under a lock, and never swapped back.

llama-cpp-python 0.3.36 binds neither the ggml device registry nor the ggml logger directly; the few device
functions needed to name the backend are bound here with ctypes from the ``libggml`` that llama-cpp-python ships.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from speco3.errors import EngineError, ModelFileError

logger = logging.getLogger(__name__)
native_logger = logging.getLogger("speco3.engine.llama_cpp_native")

_lock = threading.Lock()
_initialised = False
_log_callback = None  # keeps the ctypes callback alive for the life of the process
_partial: list[str] = []
_recent_problems: deque[str] = deque(maxlen=20)

# ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_WARN, _ERROR, _CONT = 3, 4, 5
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "IGPU", 3: "ACCEL"}


def import_llama():
    """Import llama-cpp-python's low-level modules or raise a clear `EngineError`."""
    try:
        import llama_cpp.llama_cpp as llama
        import llama_cpp.mtmd_cpp as mtmd
    except Exception as exc:  # ImportError, or OSError when the shared library does not load
        raise EngineError(
            f"llama-cpp-python is not usable here ({exc}); install it with `pip install llama-cpp-python` "
            "(see the README for CUDA/Metal/Vulkan builds)"
        ) from exc
    return llama, mtmd


def _on_native_log(level: int, text: bytes | None, _user_data) -> None:
    try:
        msg = text.decode("utf-8", errors="replace") if text else ""
        _partial.append(msg)
        if not msg.endswith("\n"):
            return
        line = "".join(_partial).rstrip()
        _partial.clear()
        if line:
            native_logger.debug("%s", line)
            if level in (_WARN, _ERROR):
                _recent_problems.append(line)
    except Exception:  # never let an exception cross into C
        pass


def ensure_backend() -> None:
    """Initialise llama.cpp once per process and route its native logging to Python at debug level."""
    global _initialised, _log_callback
    with _lock:
        if _initialised:
            return
        llama, mtmd = import_llama()
        _log_callback = llama.llama_log_callback(_on_native_log)
        llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
        for setter in (getattr(mtmd, "mtmd_log_set", None), getattr(mtmd, "mtmd_helper_log_set", None)):
            if setter is not None:
                setter(_log_callback, ctypes.c_void_p(0))
        llama.llama_backend_init()
        _initialised = True


def recent_native_problems(clear: bool = True) -> str:
    """The last warnings/errors llama.cpp logged (to explain a failed native call)."""
    text = " | ".join(_recent_problems)
    if clear:
        _recent_problems.clear()
    return text


@dataclass(frozen=True)
class Device:
    """A ggml backend device: registry name (``CPU``, ``CUDA``, ``Metal``, ``Vulkan``…), type and description."""

    backend: str
    name: str
    kind: str
    description: str


def list_devices() -> list[Device]:
    """Devices in ggml's backend registry (empty when the registry cannot be read)."""
    try:
        from llama_cpp import _ggml

        lib = _ggml.libggml
        vp = ctypes.c_void_p
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_get.argtypes, lib.ggml_backend_dev_get.restype = [ctypes.c_size_t], vp
        for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
            getattr(lib, fn).argtypes, getattr(lib, fn).restype = [vp], ctypes.c_char_p
        lib.ggml_backend_dev_type.argtypes, lib.ggml_backend_dev_type.restype = [vp], ctypes.c_int
        lib.ggml_backend_dev_backend_reg.argtypes, lib.ggml_backend_dev_backend_reg.restype = [vp], vp
        lib.ggml_backend_reg_name.argtypes, lib.ggml_backend_reg_name.restype = [vp], ctypes.c_char_p
        devices = []
        for i in range(lib.ggml_backend_dev_count()):
            dev = lib.ggml_backend_dev_get(i)
            reg = lib.ggml_backend_dev_backend_reg(dev)
            devices.append(
                Device(
                    backend=(lib.ggml_backend_reg_name(reg) or b"?").decode(errors="replace"),
                    name=(lib.ggml_backend_dev_name(dev) or b"?").decode(errors="replace"),
                    kind=DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "?"),
                    description=(lib.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
                )
            )
        return devices
    except Exception as exc:  # a build without the registry symbols: report CPU rather than fail
        logger.debug("cannot read the ggml device registry: %s", exc)
        return []


def backend_label(n_gpu_layers: int, devices: list[Device] | None = None) -> str:
    """Name the backend that runs the text model: ``CPU``, or e.g. ``CUDA (NVIDIA H200)``."""
    devices = list_devices() if devices is None else devices
    accel = [d for d in devices if d.kind in ("GPU", "IGPU", "ACCEL")]
    if n_gpu_layers == 0 or not accel:
        return "CPU"
    first = accel[0]
    return f"{first.backend} ({first.description or first.name})"


def default_threads() -> tuple[int, int]:
    """``(n_threads, n_threads_batch)``: about the physical cores for decoding, all logical cores for prefill."""
    try:
        logical = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        logical = os.cpu_count() or 1
    physical = logical // 2 if logical >= 4 else logical
    return max(1, physical), max(1, logical)


# --------------------------------------------------------------------------------------------------------------
# model files


def check_model_files(text_path: str | Path, mmproj_path: str | Path) -> None:
    """Check a text GGUF and its projector before llama.cpp sees them (a bad file would abort inside C).

    Uses the model store's ``speco3_models.gguf_check.check_pair`` when it is installed, otherwise a
    header-level check with `gguf.GGUFReader` (magic, parse, architecture, projector kind, embedding width).

    Raises
    ------
    ModelFileError
        Naming the file and what is wrong with it.
    """
    text_path, mmproj_path = Path(text_path), Path(mmproj_path)
    for path in (text_path, mmproj_path):
        if not path.is_file():
            raise ModelFileError(path, "file not found" if not path.exists() else "not a regular file")
    try:
        from speco3_models.gguf_check import check_pair
    except ImportError:
        check_pair = None
    if check_pair is not None:
        check_pair(text_path, mmproj_path)
        return
    text = _read_header(text_path)
    proj = _read_header(mmproj_path)
    if text.get("general.architecture") != "qwen2vl":
        raise ModelFileError(
            text_path,
            f"text model architecture is {text.get('general.architecture')!r}, expected 'qwen2vl' (Qwen2.5-VL)",
        )
    if proj.get("general.architecture") != "clip":
        raise ModelFileError(
            mmproj_path, f"projector architecture is {proj.get('general.architecture')!r}, expected 'clip' (mmproj)"
        )
    if not proj.get("clip.has_vision_encoder", False):
        raise ModelFileError(mmproj_path, "projector has no vision encoder")
    ptype = proj.get("clip.projector_type")
    if ptype not in ("qwen2.5vl_merger", "qwen2vl_merger"):
        raise ModelFileError(mmproj_path, f"projector type {ptype!r} is not a Qwen2/2.5-VL merger")
    width, hidden = proj.get("clip.vision.projection_dim"), text.get("qwen2vl.embedding_length")
    if width is not None and hidden is not None and int(width) != int(hidden):
        raise ModelFileError(
            mmproj_path, f"projector output width {width} does not match the text model's embedding width {hidden}"
        )


_HEADER_KEYS = (
    "general.architecture",
    "qwen2vl.embedding_length",
    "clip.has_vision_encoder",
    "clip.projector_type",
    "clip.vision.projection_dim",
)


def _read_header(path: Path) -> dict:
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise ModelFileError(path, f"not a GGUF file (starts with {magic!r})")
    try:
        import gguf

        reader = gguf.GGUFReader(path)
        values = {}
        for key in _HEADER_KEYS:
            field = reader.get_field(key)
            if field is not None:
                values[key] = field.contents()
        if not reader.tensors:
            raise ModelFileError(path, "GGUF file holds no tensors")
        size = path.stat().st_size
        for t in reader.tensors:
            if int(t.data_offset) + int(t.n_bytes) > size:
                raise ModelFileError(path, f"tensor {t.name} lies beyond the end of the file (truncated download?)")
        return values
    except ModelFileError:
        raise
    except Exception as exc:
        raise ModelFileError(path, f"corrupt or truncated GGUF ({type(exc).__name__}: {exc})") from exc

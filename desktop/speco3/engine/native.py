"""Process-wide glue to llama.cpp: backend initialisation, native log routing, device discovery, file checks.

Everything here is shared by all engines of the process. llama.cpp's logger is global (not thread-safe to
change), so it is installed once, under a lock, and never swapped back.

llama-cpp-python 0.3.36 binds neither the ggml device registry nor the ggml logger directly; the few device
functions needed to name the backend are bound here with ctypes from the ``libggml`` that llama-cpp-python ships.
A build with dynamically loaded backends (the Linux bundle, ``scripts/build-bundle.sh``) gets its backend modules
loaded here too, once, before the first model (`speco3.engine.backends`); `backend_notice` is then the one line
that says the model runs on the CPU and why no GPU device initialised.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from speco3.engine import backends
from speco3.engine.base import LoraAdapter
from speco3.errors import EngineError, ModelFileError

logger = logging.getLogger(__name__)
native_logger = logging.getLogger("speco3.engine.llama_cpp_native")

_lock = threading.Lock()
_initialised = False
_log_callback = None  # keeps the ctypes callback alive for the life of the process
_partial: list[str] = []
_recent_problems: deque[str] = deque(maxlen=20)
_modules: backends.ModuleLoad | None = None  # what ensure_backend loaded (None before it ran)

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
    """Initialise llama.cpp once per process and route its native logging to Python at debug level; in a build with
    dynamically loaded backends, load its modules (`speco3.engine.backends`) and log the CPU fallback notice."""
    global _initialised, _log_callback, _modules
    with _lock:
        if _initialised:
            return
        llama, mtmd = import_llama()
        _log_callback = llama.llama_log_callback(_on_native_log)
        llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
        for setter in (getattr(mtmd, "mtmd_log_set", None), getattr(mtmd, "mtmd_helper_log_set", None)):
            if setter is not None:
                setter(_log_callback, ctypes.c_void_p(0))
        _modules = _load_backend_modules()
        llama.llama_backend_init()
        _initialised = True
    devices = ", ".join(f"{d.backend}/{d.name} ({d.kind}, {d.description}, {d.free_bytes / 2**30:.1f} of "
                        f"{d.total_bytes / 2**30:.1f} GiB free)" for d in list_devices())
    if _modules.dynamic:
        logger.info("ggml backend modules loaded from %s: %s; CPU variant %s", _modules.folder,
                    ", ".join(f"{m.name} ({m.devices} devices)" if m.loaded else f"{m.name} (not loaded)"
                              for m in _modules.modules) or "no GPU module", _modules.cpu_variant or "unknown")
    notice = backend_notice()
    if notice:
        logger.warning("%s", notice)
    elif _modules.unused_line():
        logger.info("ggml backend modules: %s", _modules.unused_line())
    logger.info("llama.cpp backend ready: GPU offload %s; devices: %s; %s",
                "supported" if llama.llama_supports_gpu_offload() else "not supported", devices or "unknown",
                (llama.llama_print_system_info() or b"").decode(errors="replace").strip())


def _load_backend_modules() -> backends.ModuleLoad:
    from llama_cpp import _ggml

    return backends.load_modules(_ggml.libggml, Path(_ggml.libggml_base_path), recent_native_problems)


def backend_modules() -> backends.ModuleLoad | None:
    """What `ensure_backend` loaded (None before it ran): the GPU modules, with why each is unused, and the CPU
    variant; ``dynamic`` is False for a build with linked-in backends."""
    return _modules


def backend_notice() -> str | None:
    """The one-line CPU fallback notice of a build with dynamically loaded backends when no GPU device
    initialised (None otherwise, and before `ensure_backend`)."""
    return _modules.notice() if _modules is not None else None


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
    free_bytes: int = 0  # ggml_backend_dev_memory (the CPU device reports all RAM as free)
    total_bytes: int = 0


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
        size_p = ctypes.POINTER(ctypes.c_size_t)
        lib.ggml_backend_dev_memory.argtypes, lib.ggml_backend_dev_memory.restype = [vp, size_p, size_p], None
        devices = []
        for i in range(lib.ggml_backend_dev_count()):
            dev = lib.ggml_backend_dev_get(i)
            reg = lib.ggml_backend_dev_backend_reg(dev)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            devices.append(
                Device(
                    backend=(lib.ggml_backend_reg_name(reg) or b"?").decode(errors="replace"),
                    name=(lib.ggml_backend_dev_name(dev) or b"?").decode(errors="replace"),
                    kind=DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "?"),
                    description=(lib.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
                    free_bytes=int(free.value), total_bytes=int(total.value),
                )
            )
        return devices
    except Exception as exc:  # a build without the registry symbols: report CPU rather than fail
        logger.debug("cannot read the ggml device registry: %s", exc)
        return []


def backend_label(n_gpu_layers: int, devices: list[Device] | None = None) -> str:
    """Name the backend that runs the text model: ``CPU``, or the device, e.g. ``CUDA0 (NVIDIA H200)``,
    ``Vulkan0 (llvmpipe …)`` (ggml's device name where it names the backend, else the backend: ``Metal (Apple M3)``)."""
    devices = list_devices() if devices is None else devices
    accel = [d for d in devices if d.kind in ("GPU", "IGPU", "ACCEL")]
    if n_gpu_layers == 0 or not accel:
        return "CPU"
    first = accel[0]
    name = first.name if first.name.startswith(first.backend) else first.backend
    return f"{name} ({first.description})" if first.description else name


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

    The checks are the model store's (`speco3_models.gguf_check.check_pair`): structure, architecture,
    projector kind and the projector's output width against the text model's embedding width.

    Raises
    ------
    ModelFileError
        Naming the file and what is wrong with it.
    """
    from speco3_models.gguf_check import check_pair

    text_path, mmproj_path = Path(text_path), Path(mmproj_path)
    for path in (text_path, mmproj_path):
        if not path.is_file():
            raise ModelFileError(path, "file not found" if not path.exists() else "not a regular file")
    check_pair(text_path, mmproj_path)


def check_adapters(adapters: Sequence[LoraAdapter], text_sha256: str | None, model_name: str) -> None:
    """Check LoRA adapter GGUFs before llama.cpp sees them: each is a Qwen2.5-VL LoRA adapter and, when the text
    model's digest is known (an installed model), was made for that base (`speco3_models.adapters`).

    Raises
    ------
    ModelFileError
        A file is missing or not a LoRA adapter for this architecture.
    Speco3Error
        An adapter made for another base (the model store's `ModelStoreError`).
    """
    from speco3_models.adapters import check_base, read_adapter

    for a in adapters:
        check_base(read_adapter(a.path), text_sha256, model_name)

"""ggml's backend modules in a build with dynamically loaded backends (``GGML_BACKEND_DL``): load them, say why not.

A llama.cpp built with ``GGML_BACKEND_DL=ON`` links no backend in: every backend is a module next to ``libggml``
(``libggml-cuda.so``, ``libggml-vulkan.so``, and one ``libggml-cpu-<variant>.so`` per CPU generation with
``GGML_CPU_ALL_VARIANTS``), and ggml's registry is empty until something loads them. llama.cpp's own programs call
``ggml_backend_load_all``; llama-cpp-python never does, so such a build registers no backend and cannot load a
model. `load_modules` does it once per process, before the first model load (`speco3.engine.native.ensure_backend`):

- each GPU module is loaded on its own with ``ggml_backend_load`` (which, unlike ``ggml_backend_load_all`` in a
  release build, logs why a module does not load: the dynamic loader's message, e.g. a missing ``libcudart``), and
  its device count is read; a module that does not load or has no device is skipped, with the reason;
- then ``ggml_backend_load_all_from_path`` on the same folder picks the best CPU variant for this processor (ggml
  asks each variant for its score); the GPU modules already registered are not registered twice.

`ModuleLoad.notice` is the one line the app prints when no GPU device initialised and the model runs on the CPU
(`speco3.engine.native.backend_notice`). A build with linked-in backends (the default wheel, the per-backend
builds) already has a registry at start; nothing is loaded then and there is no notice.

ggml skips CPU-type Vulkan devices (Mesa's lavapipe) unless ``GGML_VK_VISIBLE_DEVICES`` names them: the CPU
backend is faster than a Vulkan device emulated on the same CPU. The notice says so when that is the reason.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: The file name suffix of a shared library on this platform (ggml's own ``backend_filename_extension``).
LIBRARY_SUFFIX = ".dll" if sys.platform == "win32" else ".so"
#: The prefix of a backend module's file name (ggml's ``backend_filename_prefix``).
MODULE_PREFIX = "ggml-" if sys.platform == "win32" else "libggml-"
#: Module stems that are not a backend: ggml's base library (the registry itself is ``libggml``).
NOT_A_BACKEND = frozenset({"base"})
#: Why a backend module commonly has no device, by module name (after ggml's own reason).
NO_DEVICE_HINT = {
    "vulkan": "no usable Vulkan device (ggml skips CPU-type devices such as lavapipe unless GGML_VK_VISIBLE_DEVICES "
              "names them)",
    "cuda": "no CUDA device (no NVIDIA GPU or driver)",
}
#: What a module's failed initialisation (``ggml_backend_init`` returned NULL) means, by module name.
INIT_FAILED_HINT = {
    "vulkan": "no Vulkan driver (the Vulkan loader found no ICD, so no Vulkan instance could be made)",
}
#: What a missing library means, by its name's start.
MISSING_LIBRARY_HINT = {
    "libcuda.so": "no NVIDIA driver (libcuda comes with it)",
    "libcudart": "the CUDA 13 runtime is not installed (the CUDA add-on package carries it)",
    "libcublas": "the CUDA 13 runtime (cuBLAS) is not installed (the CUDA add-on package carries it)",
    "libvulkan": "the Vulkan loader (libvulkan1) is not installed",
}


@dataclass(frozen=True)
class ModuleState:
    """One GPU backend module of the folder: its file, whether it loaded, its device count, and why it is unused."""

    file: str
    name: str  # the file's backend name: "cuda", "vulkan", …
    loaded: bool
    devices: int
    reason: str = ""  # empty when it loaded with at least one device


@dataclass(frozen=True)
class ModuleLoad:
    """What `load_modules` did: the folder (None: a build with linked-in backends, nothing loaded), the GPU modules,
    the CPU variant chosen (``zen4``, ``haswell``…; empty when unknown) and the backends registered afterwards."""

    folder: Path | None
    modules: tuple[ModuleState, ...] = ()
    cpu_variant: str = ""
    registered: tuple[str, ...] = field(default=())

    @property
    def dynamic(self) -> bool:
        return self.folder is not None

    def gpu_modules_in_use(self) -> list[ModuleState]:
        return [m for m in self.modules if m.loaded and m.devices > 0]

    def notice(self) -> str | None:
        """The one-line CPU fallback notice (None when a GPU module has a device, or nothing was loaded)."""
        if not self.dynamic or self.gpu_modules_in_use():
            return None
        why = "; ".join(f"{m.name}: {m.reason}" for m in self.modules) or "no GPU backend module in the bundle"
        cpu = f"CPU ({self.cpu_variant})" if self.cpu_variant else "CPU"
        return f"no GPU device initialised, running on the {cpu} — {why}"

    def unused_line(self) -> str | None:
        """When a GPU module has a device: one line naming it and why each other GPU module is unused (``running
        on vulkan; unused: cuda: no CUDA device (no NVIDIA GPU or driver)``); None otherwise."""
        in_use = self.gpu_modules_in_use()
        rest = [m for m in self.modules if m not in in_use]
        if not self.dynamic or not in_use or not rest:
            return None
        return (f"running on {', '.join(m.name for m in in_use)}; unused: "
                + "; ".join(f"{m.name}: {m.reason}" for m in rest))


def module_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """``(gpu_modules, cpu_modules)`` among the backend module files in ``folder`` (sorted by name)."""
    gpu: list[Path] = []
    cpu: list[Path] = []
    for path in sorted(folder.glob(f"{MODULE_PREFIX}*{LIBRARY_SUFFIX}")):
        name = module_name(path)
        if name in NOT_A_BACKEND:
            continue
        (cpu if name == "cpu" else gpu).append(path)
    return gpu, cpu


def module_name(path: Path) -> str:
    """The backend a module file provides: ``libggml-cuda.so`` → ``cuda``, ``libggml-cpu-zen4.so`` → ``cpu``."""
    stem = path.name.removeprefix(MODULE_PREFIX).removesuffix(LIBRARY_SUFFIX)
    return stem.split("-", 1)[0]


def _bind(lib: ctypes.CDLL) -> None:
    vp = ctypes.c_void_p
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_count.argtypes = []
    lib.ggml_backend_reg_get.argtypes, lib.ggml_backend_reg_get.restype = [ctypes.c_size_t], vp
    lib.ggml_backend_reg_name.argtypes, lib.ggml_backend_reg_name.restype = [vp], ctypes.c_char_p
    lib.ggml_backend_reg_dev_count.argtypes, lib.ggml_backend_reg_dev_count.restype = [vp], ctypes.c_size_t
    lib.ggml_backend_load.argtypes, lib.ggml_backend_load.restype = [ctypes.c_char_p], vp
    lib.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load_all_from_path.restype = None


def registered_backends(lib: ctypes.CDLL) -> list[str]:
    """The names of the backends in ggml's registry (``CPU``, ``Vulkan``…)."""
    _bind(lib)
    return [(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)) or b"?").decode(errors="replace")
            for i in range(lib.ggml_backend_reg_count())]


def load_modules(lib: ctypes.CDLL, folder: Path, native_problems: Callable[[], str]) -> ModuleLoad:
    """Load the backend modules of ``folder`` into ggml's registry (see module doc); a registry that already has
    backends (linked in) is left alone. ``native_problems`` returns, and clears, what ggml logged as warnings and
    errors since the last call (`speco3.engine.native.recent_native_problems`): the reason a module did not load."""
    _bind(lib)
    if lib.ggml_backend_reg_count() > 0:
        return ModuleLoad(None, registered=tuple(registered_backends(lib)))
    gpu, _cpu = module_files(folder)
    states = []
    for path in gpu:
        name = module_name(path)
        native_problems()  # only what this load logs
        reg = lib.ggml_backend_load(os.fsencode(path))
        if not reg:
            states.append(ModuleState(path.name, name, False, 0, explain_failure(native_problems(), path, name)))
            continue
        n = int(lib.ggml_backend_reg_dev_count(reg))
        hint = "" if n else NO_DEVICE_HINT.get(name, "the backend found no device")
        states.append(ModuleState(path.name, name, True, n, hint))
    lib.ggml_backend_load_all_from_path(os.fsencode(folder))
    native_problems()  # the silent retries of the modules that did not load say nothing useful
    return ModuleLoad(folder, tuple(states), cpu_variant_in_use(folder), tuple(registered_backends(lib)))


def explain_failure(logged: str, path: Path, name: str) -> str:
    """The dynamic loader's or the backend's own words for a module that did not load, with what they mean."""
    said = next((line for line in logged.split(" | ") if str(path) in line), "")
    if not said:
        return logged.strip() or "the module did not load (no reason logged)"
    tail = re.sub(r"\s+", " ", said.split(f"{path}: ", 1)[-1]).strip()
    if "ggml_backend_init returned NULL" in tail and name in INIT_FAILED_HINT:
        return f"{INIT_FAILED_HINT[name]} ({tail})"
    missing = re.match(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", tail)
    if missing:
        hint = next((h for start, h in MISSING_LIBRARY_HINT.items() if missing.group(1).startswith(start)), "")
        return f"{missing.group(1)} not found" + (f": {hint}" if hint else "")
    return tail


def cpu_variant_in_use(folder: Path) -> str:
    """The CPU variant module that this process has mapped (``zen4``, ``haswell``…), read from the dynamic
    loader's map of the process (Linux); empty elsewhere or when none is."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    prefix = re.escape(str(folder / f"{MODULE_PREFIX}cpu"))
    found = re.search(prefix + r"(?:-([\w.]+))?" + re.escape(LIBRARY_SUFFIX) + r"\s*$", maps, re.MULTILINE)
    if not found:
        return ""
    return found.group(1) or "cpu"


__all__ = ["ModuleLoad", "ModuleState", "explain_failure", "load_modules", "module_files", "module_name",
           "registered_backends"]

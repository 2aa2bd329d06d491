"""What goes into the PyInstaller bundle, shared by ``spec-o3.spec``, the build scripts and the packaging tests.

The spec file stays a thin recipe; every decision that can be checked without running a build lives here:

* the first-party packages and the modules the app imports by name (``importlib``), collected as hidden imports;
* package data (task library, model catalog, HTML templates) of the first-party packages;
* llama-cpp-python's shared libraries (``llama_cpp/lib``: libllama, libggml*, libmtmd), loaded with ``ctypes``
  from a path computed at run time, so PyInstaller cannot find them on its own;
* GPU driver libraries that must never be bundled (the user's driver provides them);
* modules left out on purpose (torch, transformers, matplotlib, test tools, other Qt bindings).

This module is imported by PyInstaller while it runs the spec (``packaging/`` is put on ``sys.path``) and by the
tests; it imports neither Qt nor llama_cpp at module level.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGING_DIR = Path(__file__).resolve().parent
ROOT = PACKAGING_DIR.parent

APP_NAME = "spec-o3"  # bundle folder, tarball prefix
GUI_EXE = "spec-o3-desktop"  # windowed executable (the app)
CLI_EXE = "spec-o3"  # console executable (same code, command line)
DISPLAY_NAME = "Spec-o3 Desktop"
BUNDLE_ID = "org.speco3.desktop"
LAUNCHER = PACKAGING_DIR / "launcher.py"
ICON_DIR = PACKAGING_DIR / "icons"
ICON_SVG = ICON_DIR / "spec-o3.svg"
ICON_SIZES: tuple[int, ...] = (16, 22, 24, 32, 48, 64, 128, 256, 512)

#: Import packages of this distribution and their source roots (the test kit, ``tests/support``, is not one).
SOURCE_ROOTS: dict[str, str] = {"speco3": "desktop", "speco3_base": "desktop", "speco3_models": "models",
                                "speco3_converters": "converters"}
FIRST_PARTY: tuple[str, ...] = tuple(SOURCE_ROOTS)

#: Modules the frozen app needs although no static ``import`` names them (ctypes bindings, lazy imports).
EXTRA_HIDDEN_IMPORTS: tuple[str, ...] = (
    "llama_cpp",
    "llama_cpp.llama_cpp",
    "llama_cpp.mtmd_cpp",
    "llama_cpp._ggml",
    "llama_cpp._ctypes_extensions",
    "platformdirs",
    "gguf",
)

#: Left out of the bundle on purpose. The packaging tests check that no first-party module imports these.
EXCLUDES: tuple[str, ...] = (
    "torch",
    "torchvision",
    "transformers",
    "tensorflow",
    "jax",
    "matplotlib",
    "specutils",
    "pandas",
    "tkinter",
    "IPython",
    "jupyter_client",
    "notebook",
    "pytest",
    "pytestqt",
    "_pytest",
    "importlinter",
    "PyQt5",
    "PyQt6",
    "PySide2",
    "llama_cpp.server",  # OpenAI-compatible web server: needs fastapi/uvicorn, never used offline
    # ASDF (astropy.table registers its reader when asdf-astropy is importable; its schemas are data files that
    # no hook collects, so a half-bundled asdf breaks every table read). The app reads FITS, never ASDF.
    "asdf",
    "asdf_astropy",
    "asdf_standard",
    "asdf_coordinates_schemas",
    "asdf_transform_schemas",
    "hf_xet",  # Xet transfer accelerator (11 MB); huggingface-hub falls back to plain HTTP downloads without it
)

#: Excluded packages that one first-party module may still import, because it is an optional bridge that tells the
#: user the package is missing (the bundle has no specutils: Spectrum.to_specutils says so; no fallback reader; no
#: matplotlib: the evaluate report has tables without figures and says so).
OPTIONAL_IMPORTERS: dict[str, tuple[str, ...]] = {"specutils": ("desktop/speco3/spectra/specutils_io.py",),
                                                  "matplotlib": ("desktop/speco3/evaluate/report.py",)}

#: Submodules of first-party packages that are development tools, not part of the app.
FIRST_PARTY_SKIP = re.compile(r"(^|\.)(tests?|conftest|benchmarks?|__main__)(\.|$)")

#: Shared-library names that belong to the GPU driver or the system loader, never to the bundle.
DRIVER_LIBRARY = re.compile(
    r"^(libcuda\.so|libnvidia-|libnvcuvid|libvulkan\.so|libOpenCL\.so|libmetal|nvcuda\.dll|nvml\.dll|"
    r"vulkan-1\.dll|OpenCL\.dll|libdxcore)",
    re.IGNORECASE,
)

#: ``CMAKE_ARGS`` for compiling llama-cpp-python per backend (the build scripts and READMEs repeat these; the
#: packaging tests check that they agree). Metal is on by default on Apple Silicon; ``GGML_NATIVE=OFF`` keeps
#: the CPU code portable (no ``-march=native`` of the build machine).
CMAKE_ARGS: dict[str, str] = {
    "cpu": "-DGGML_NATIVE=OFF",
    "cuda": "-DGGML_CUDA=on -DGGML_NATIVE=OFF",
    "vulkan": "-DGGML_VULKAN=on -DGGML_NATIVE=OFF",
    "metal": "-DGGML_METAL=on",
}

#: ggml backend libraries and the backend each one provides.
GGML_BACKENDS: dict[str, str] = {
    "ggml-cuda": "CUDA",
    "ggml-metal": "Metal",
    "ggml-vulkan": "Vulkan",
    "ggml-hip": "ROCm/HIP",
    "ggml-sycl": "SYCL",
    "ggml-opencl": "OpenCL",
    "ggml-blas": "BLAS",
    "ggml-cpu": "CPU",
}

_SHARED_LIBRARY = re.compile(r"\.(so(\.\d+)*|dylib|dll)$", re.IGNORECASE)
_METAL_FILES = re.compile(r"\.(metal|metallib)$", re.IGNORECASE)


class BundleError(RuntimeError):
    """The build environment cannot produce a working bundle (named cause)."""


def read_version(root: Path = ROOT) -> str:
    """The app version, read from ``desktop/speco3/__init__.py`` without importing the package."""
    text = (root / "desktop" / "speco3" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    if not match:
        raise BundleError("desktop/speco3/__init__.py defines no __version__")
    return match.group(1)


def package_dir(name: str) -> Path:
    """Folder of an importable package (without importing it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise BundleError(f"package {name!r} is not installed in the build environment")
    return Path(next(iter(spec.submodule_search_locations)))


def package_roots(root: Path = ROOT) -> dict[str, Path]:
    """Folder of each first-party import package."""
    return {package: root / folder / package for package, folder in SOURCE_ROOTS.items()}


def first_party_modules(root: Path = ROOT) -> list[str]:
    """Every first-party module found in the source tree (tests and benchmarks left out).

    The source tree, not ``pkgutil``, is the reference: a module that fails to import at build time must make the
    bundle's self-test fail, not silently vanish from the bundle.
    """
    roots = package_roots(root)
    modules: list[str] = []
    for package, folder in roots.items():
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [package, *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            if FIRST_PARTY_SKIP.search(name) or "__pycache__" in path.parts:
                continue
            modules.append(name)
    return modules


def hidden_imports(root: Path = ROOT) -> list[str]:
    """Modules PyInstaller must collect beyond what its import analysis of the launcher finds."""
    return sorted(set(first_party_modules(root)) | set(EXTRA_HIDDEN_IMPORTS))


def first_party_data(root: Path = ROOT) -> list[tuple[str, str]]:
    """Package data of the first-party packages as PyInstaller ``(source, destination folder)`` pairs.

    Everything in a package folder that is not Python source or bytecode is data (task library TOML/JSON,
    model catalog, templates, icons), mirroring ``[tool.setuptools.package-data]``.
    """
    roots = package_roots(root)
    pairs: list[tuple[str, str]] = []
    for package, folder in roots.items():
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or path.suffix in {".py", ".pyc", ".pyo"} or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(folder)
            if FIRST_PARTY_SKIP.search(".".join(rel.parts[:-1])):
                continue
            dest = Path(package, *rel.parts[:-1]).as_posix()
            pairs.append((str(path), dest))
    return pairs


def llama_cpp_files(lib_dir: Path | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """llama-cpp-python's native files as ``(binaries, datas)`` destined for ``llama_cpp/lib``.

    Parameters
    ----------
    lib_dir : Path, optional
        The ``llama_cpp/lib`` folder (default: the installed package's).

    Raises
    ------
    BundleError
        If llama-cpp-python is not installed or its folder holds no ``llama`` or ``mtmd`` library.
    """
    if lib_dir is None:
        lib_dir = package_dir("llama_cpp") / "lib"
    if not lib_dir.is_dir():
        raise BundleError(f"{lib_dir}: llama-cpp-python has no lib folder (broken install?)")
    binaries: list[tuple[str, str]] = []
    datas: list[tuple[str, str]] = []
    for path in sorted(lib_dir.iterdir()):
        if _SHARED_LIBRARY.search(path.name):
            binaries.append((str(path), "llama_cpp/lib"))
        elif _METAL_FILES.search(path.name):  # older Metal builds ship the shader source / library as files
            datas.append((str(path), "llama_cpp/lib"))
    names = {Path(src).name for src, _ in binaries}
    for needed in ("llama", "mtmd", "ggml", "ggml-base"):
        if not any(re.match(rf"^(lib)?{re.escape(needed)}(\.|$)", n) for n in names):
            raise BundleError(f"{lib_dir}: no {needed} library; reinstall llama-cpp-python")
    return binaries, datas


def llama_tools() -> list[tuple[str, str]]:
    """llama.cpp's ``llama-fit-params`` as a binary destined for ``llama-tools`` (the app runs it to fit the model
    to the machine, `speco3_models.fit_tool`), from ``scripts/build-llama-tools.sh``'s cache; empty (with a note)
    when it was not built: the app then uses its own estimate."""
    sys.path.insert(0, str(ROOT / "models"))
    try:
        from speco3_models.fit_tool import find_fit_params
    finally:
        sys.path.pop(0)
    tool = find_fit_params()
    if tool is None:
        print("bundle: llama-fit-params not found (run scripts/build-llama-tools.sh); the app will use its own "
              "memory estimate")
        return []
    return [(str(tool), "llama-tools")]


def ggml_backends(names: Iterable[str]) -> list[str]:
    """Backends provided by a set of library file names (``libggml-cuda.so`` → ``CUDA``; a CPU variant module of a
    build with dynamically loaded backends, ``libggml-cpu-haswell.so``, → ``CPU``), CPU last."""
    files = [Path(n).name for n in names]
    found: list[str] = []
    for lib, backend in GGML_BACKENDS.items():
        if any(re.match(rf"^(lib)?{re.escape(lib)}(\.|-|$)", n) for n in files):
            found.append(backend)
    return sorted(found, key=lambda b: (b == "CPU", b))


#: The GCC runtime of the build machine, never bundled on Linux: every distribution has it (libstdc++6, libgcc-s1
#: are in a minbase Debian root), and a bundled copy wins over the system's through the bootloader's
#: LD_LIBRARY_PATH, also for the system libraries the app loads at run time. Debian 13's Mesa (lavapipe, its
#: LLVM 19) needs a newer libstdc++ than Debian 12's, the build machine's: the bundled copy made its Vulkan driver
#: fail to load. The .deb depends on the system's packages instead (their sonames stay in `elf_needs`' external).
SYSTEM_RUNTIME = re.compile(r"^(libstdc\+\+\.so|libgcc_s\.so)")


def is_driver_library(name: str) -> bool:
    """True for a library that the GPU driver installs (bundling it would break other machines)."""
    return bool(DRIVER_LIBRARY.match(Path(name).name))


def drop_driver_libraries(toc: list[tuple]) -> list[tuple]:
    """Remove driver libraries from a PyInstaller binaries TOC, logging each one."""
    kept = []
    for entry in toc:
        if is_driver_library(entry[0]):
            log.warning("not bundling driver library %s (the user's GPU driver provides it)", entry[0])
            continue
        kept.append(entry)
    return kept


def drop_system_runtime(toc: list[tuple]) -> list[tuple]:
    """Remove the GCC runtime (`SYSTEM_RUNTIME`) from a PyInstaller binaries TOC (Linux), logging each one."""
    kept = []
    for entry in toc:
        if SYSTEM_RUNTIME.match(Path(entry[0]).name):
            log.warning("not bundling %s (the system's, which may be newer, is used)", entry[0])
            continue
        kept.append(entry)
    return kept


def cuda_runtime_libraries(cuda_path: str | None) -> list[tuple[str, str]]:
    """The redistributable CUDA runtime DLLs that a Windows CUDA build needs at run time.

    ggml-cuda.dll links cudart, cuBLAS and cuBLASLt. On a build machine they come from ``%CUDA_PATH%\\bin``;
    a user's laptop has only the driver (``nvcuda.dll``), so they are copied next to ``ggml-cuda.dll``.
    On Linux PyInstaller's dependency analysis finds the ``.so`` files itself (they are on the linker path).
    """
    if not cuda_path:
        return []
    bin_dir = Path(cuda_path) / "bin"
    # CUDA 13 moved the DLLs to bin\x64.
    candidates = [bin_dir, bin_dir / "x64"]
    pattern = re.compile(r"^(cudart64|cublas64|cublasLt64)_\d+\.dll$", re.IGNORECASE)
    found = []
    for folder in candidates:
        if folder.is_dir():
            found += [(str(p), "llama_cpp/lib") for p in sorted(folder.iterdir()) if pattern.match(p.name)]
    return found


#: Third-party test suites collected by broad hooks (astropy's collects every submodule). ``astropy.tests``
#: itself stays: ``astropy/__init__`` imports its test runner.
THIRD_PARTY_TESTS = re.compile(r"^(astropy|pyqtgraph|numpy)\.(.+\.)?tests(\.|$)")  # not jinja2.tests: real code
_KEEP_TEST_PACKAGE = re.compile(r"^astropy\.tests(\.|$)")


def drop_test_modules(pure: list[tuple]) -> list[tuple]:
    """Remove third-party test modules from the PYZ table of contents (``Analysis.pure``)."""
    return [e for e in pure if _KEEP_TEST_PACKAGE.match(e[0]) or not THIRD_PARTY_TESTS.match(e[0])]


def drop_test_data(datas: list[tuple]) -> list[tuple]:
    """Remove data files that live in third-party ``tests`` folders (FITS and WCS test files, reference images)."""
    kept = []
    for entry in datas:
        parts = Path(entry[0]).parts
        if parts and parts[0] in {"astropy", "pyqtgraph", "numpy"} and "tests" in parts[1:-1] and parts[1] != "tests":
            continue
        kept.append(entry)
    return kept


_SONAME = re.compile(r"(\.so\.\d+|\.\d+\.dylib)$")


def dedupe_identical_libraries(binaries: list[tuple], folder: str = "llama_cpp/lib") -> list[tuple]:
    """Turn byte-identical copies of a library in ``folder`` into symbolic links (Linux and macOS).

    A llama-cpp-python wheel cannot hold symbolic links, so ``libllama.so``, ``libllama.so.0`` and
    ``libllama.so.0.5.0`` arrive as three copies (a CUDA ``libggml-cuda`` is hundreds of MB each). The name with a
    single version number (the SONAME: ``libllama.so.0``, ``libllama.0.dylib``) stays a file, because the other
    libraries link against it; the others become links to it, so ``ctypes`` still finds ``libllama.so``.
    """
    import hashlib

    groups: dict[tuple[int, str], list[tuple]] = {}
    others: list[tuple] = []
    for entry in binaries:
        dest, src, typecode = entry[0], entry[1], entry[2]
        if typecode != "BINARY" or Path(dest).parent.as_posix() != folder or not Path(src).is_file():
            others.append(entry)
            continue
        digest = hashlib.sha256(Path(src).read_bytes()).hexdigest()
        groups.setdefault((Path(src).stat().st_size, digest), []).append(entry)
    result = list(others)
    for members in groups.values():
        if len(members) == 1:
            result += members
            continue
        names = sorted(members, key=lambda e: (not _SONAME.search(e[0]), len(e[0]), e[0]))
        keep = names[0]
        result.append(keep)
        for entry in names[1:]:
            result.append((entry[0], Path(keep[0]).name, "SYMLINK"))
    return result


def drop_duplicate_dlls(binaries: list[tuple], folder: str = "llama_cpp/lib") -> list[tuple]:
    """Keep one copy of a library that is collected both into ``folder`` and elsewhere (every platform).

    PyInstaller's dependency scan may also collect the CUDA runtime (found on ``PATH``) into the top-level folder;
    the copy next to ``ggml-cuda.dll`` is the one llama.cpp loads (cuBLASLt alone is about 500 MB). On Linux a
    second copy of ``libggml.so.0`` or ``libllama.so.0`` in ``_internal`` (first on the bootloader's
    LD_LIBRARY_PATH) is worse than size: the dynamic loader maps it beside the copy that ``ctypes`` opened by path,
    and the process has two ggml registries, one with the backend modules and one (libllama's) without.
    """
    in_folder = {Path(e[0]).name.lower() for e in binaries if Path(e[0]).parent.as_posix().lower() == folder}
    kept = []
    for entry in binaries:
        dest = Path(entry[0])
        if dest.parent.as_posix().lower() != folder and dest.name.lower() in in_folder and \
                _SHARED_LIBRARY.search(dest.name):
            log.info("dropping %s: the copy in %s is used", entry[0], folder)
            continue
        kept.append(entry)
    return kept


# -- Linux: what the built bundle needs from the system (the launcher's checks, the .deb's Depends) ---------------
_GLIBC = re.compile(r"\bGLIBC_(\d+(?:\.\d+)+)\b")
#: ggml's compile-time feature names (``llama_print_system_info``) and NumPy's baseline names, as /proc/cpuinfo
#: spells the flags.
CPU_FLAG_NAMES = {
    "SSE": "sse", "SSE2": "sse2", "SSE3": "pni", "SSSE3": "ssse3", "SSE41": "sse4_1", "SSE4_1": "sse4_1",
    "SSE42": "sse4_2", "SSE4_2": "sse4_2", "POPCNT": "popcnt", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c",
    "FMA": "fma", "FMA3": "fma", "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512F": "avx512f",
    "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
}
#: x86-64 micro-architecture levels (NumPy 2.4's baseline is ``X86_V2``) as the flags the launcher checks.
CPU_LEVELS = {
    "X86_V2": ("sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt"),
    "X86_V3": ("sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi2"),
}
#: The order the launcher lists them in (oldest first).
CPU_FLAG_ORDER = ("sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "avx", "f16c", "fma", "bmi2", "avx2",
                  "avx_vnni", "avx512f", "avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_int8")


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


@dataclass(frozen=True)
class ElfNeeds:
    """What the ELF files of a bundle ask of the system: sonames no file of the bundle provides, and the newest
    glibc symbol version any of them references; ``modules``: what only a GPU backend module needs (see
    `is_gpu_module`), per module file, not counted in ``external``."""

    external: tuple[str, ...]
    glibc: str
    files: int
    modules: tuple[tuple[str, tuple[str, ...]], ...] = ()


def is_gpu_module(path: Path) -> bool:
    """A GPU backend module of a build with dynamically loaded backends (``llama_cpp/lib/libggml-vulkan.so``,
    ``libggml-cuda.so``): the app loads it when it can and otherwise runs on the CPU and says why, so what only
    it needs from the system (the Vulkan loader, the NVIDIA driver) is no dependency of the package."""
    m = re.match(r"^libggml-([a-z]+)\.so$", path.name)
    return bool(m) and path.parent.name == "lib" and f"ggml-{m.group(1)}" in GGML_BACKENDS and \
        m.group(1) != "cpu"


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def elf_needs(bundle: Path, objdump: str = "objdump") -> ElfNeeds:
    """Read every ELF file's ``NEEDED`` entries and version references (``objdump -p``) under ``bundle``."""
    needed: list[str] = []
    module_needed: dict[str, list[str]] = {}
    newest = "2.2.5"
    files = [p for p in sorted(bundle.rglob("*")) if p.is_file() and not p.is_symlink() and is_elf(p)]
    provided = {p.name for p in bundle.rglob("*") if p.is_file() or p.is_symlink()}
    for path in files:
        out = subprocess.run([objdump, "-p", str(path)], capture_output=True, text=True, check=False).stdout
        into = module_needed.setdefault(path.name, []) if is_gpu_module(path) else needed
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "NEEDED" and parts[1] not in into:
                into.append(parts[1])
        for v in _GLIBC.findall(out):
            if _version_key(v) > _version_key(newest):
                newest = v
    external = tuple(n for n in needed if n not in provided)
    modules = tuple((name, tuple(n for n in names if n not in provided and n not in external))
                    for name, names in sorted(module_needed.items()))
    return ElfNeeds(external, newest, len(files), modules)


def build_glibc() -> str:
    """The C library version of the machine running this (the build machine), e.g. ``2.36``; ``2.2.5`` when it
    cannot be read (not glibc)."""
    import os

    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        text = ""
    m = re.search(r"(\d+\.\d+)", text)
    return m.group(1) if m else "2.2.5"


def glibc_floor(needs: ElfNeeds, built_on: str) -> str:
    """The glibc the bundle needs: the newest symbol version its files reference, but not older than the build
    machine's. PyInstaller bundles libraries of the build machine (Python's, its extensions' system libraries) that
    were built against that glibc and were only proven there: Ubuntu 22.04 (glibc 2.35) is refused with a message
    naming 2.36 for a bundle made on Debian 12, instead of whatever fails first at run time."""
    return max(needs.glibc, built_on, key=_version_key)


#: Qt plugins PyInstaller's PySide6 hook collects that the app must not carry on Linux: the GTK 3 platform theme
#: links GTK 3 (not on a bare system, and Qt's own style is what the app is tested with); Qt skips a theme plugin
#: it does not find.
UNWANTED_PLUGINS: tuple[str, ...] = ("PySide6/Qt/plugins/platformthemes/libqgtk3.so",)


def _needed(path: Path, objdump: str = "objdump") -> list[str]:
    out = subprocess.run([objdump, "-p", str(path)], capture_output=True, text=True, check=False).stdout
    return [p[1] for p in (line.split() for line in out.splitlines()) if len(p) == 2 and p[0] == "NEEDED"]


def prune_unwanted(bundle: Path) -> list[str]:
    """Remove `UNWANTED_PLUGINS` from a built bundle, with the libraries PyInstaller collected into ``_internal``
    only for them (needed by nothing else in the bundle). Returns the removed paths, relative to the bundle."""
    internal = bundle / "_internal"
    plugins = [internal / rel for rel in UNWANTED_PLUGINS if (internal / rel).is_file()]
    if not plugins:
        return []
    top = {p.name: p for p in internal.iterdir() if p.is_file() and is_elf(p)}
    cache: dict[Path, list[str]] = {}

    def closure(starts: Iterable[Path]) -> set[str]:
        todo, seen = list(starts), set()
        while todo:
            path = todo.pop()
            if path not in cache:
                cache[path] = _needed(path)
            for name in cache[path]:
                if name in top and name not in seen:
                    seen.add(name)
                    todo.append(top[name])
        return seen

    others = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p) and p not in plugins]
    keep = closure(others) | {p.name for p in others if p.parent == internal}
    drop = closure(plugins) - keep
    removed = []
    for path in plugins + [top[n] for n in sorted(drop)]:
        for link in internal.iterdir():  # names that point at a removed file
            if link.is_symlink() and link.resolve() == path.resolve():
                link.unlink()
        path.unlink()
        removed.append(str(path.relative_to(bundle)))
    return removed


def cpu_flags_required(lib_dir: Path, python: str = sys.executable) -> list[str]:
    """The instruction sets the bundle's code cannot run without, as /proc/cpuinfo names them: NumPy's baseline
    (``numpy.__cpu_baseline__``) and, unless the CPU backend is the set of variant modules ggml picks from at run
    time (``libggml-cpu-x64.so`` … : any x86-64), the features llama.cpp's CPU backend was compiled with."""
    code = ("import json, sys\n"
            "try:\n"
            "    from numpy._core._multiarray_umath import __cpu_baseline__ as flags\n"
            "except ImportError:\n"
            "    from numpy.core._multiarray_umath import __cpu_baseline__ as flags\n"
            "flags = list(flags)\n"
            "if sys.argv[1] == '1':\n"
            "    import llama_cpp\n"
            "    info = llama_cpp.llama_print_system_info().decode()\n"
            "    flags += [k.strip() for k, v in (p.split('=') for p in info.split('|') if '=' in p) "
            "if v.strip() == '1']\n"
            "print(json.dumps(flags))")
    variants = any(lib_dir.glob("libggml-cpu-x64*.so"))
    out = subprocess.run([python, "-c", code, "0" if variants else "1"], capture_output=True, text=True,
                         check=True).stdout
    names = set()
    for f in json.loads(out):
        names |= set(CPU_LEVELS.get(f.upper(), ())) | ({CPU_FLAG_NAMES[f.upper()]} if f.upper() in CPU_FLAG_NAMES else set())
    return [f for f in CPU_FLAG_ORDER if f in names]


#: Sonames whose Debian package the .deb depends on even when PyInstaller bundled the library (see debian_depends).
FONT_CONFIG_SONAMES: tuple[str, ...] = ("libfontconfig.so.1",)


def debian_recommends(needs: ElfNeeds) -> list[str]:
    """The Debian packages of what only the GPU backend modules need, where `speco3.syslibs.PACKAGES` knows one (the
    Vulkan loader, ``libvulkan1``); the driver's own libraries (`is_driver_library`: libcuda) and the CUDA runtime
    (the CUDA add-on's) are not looked up."""
    sys.path.insert(0, str(ROOT / "desktop"))
    try:
        from speco3 import syslibs
    finally:
        sys.path.pop(0)
    sonames = [n for _, names in needs.modules for n in names if n in syslibs.PACKAGES]
    return syslibs.debian_depends(sonames)[0]


def debian_depends(needs: ElfNeeds) -> list[str]:
    """The .deb's Depends: the distribution's package of every library the bundle needs from the system
    (`speco3.syslibs.PACKAGES`, the one table of them), libc6 with the glibc version the code needs, and a font.

    Raises
    ------
    BundleError
        For a needed soname the table does not know (add it to ``speco3.syslibs.PACKAGES``).
    """
    sys.path.insert(0, str(ROOT / "desktop"))
    try:
        from speco3 import syslibs
    finally:
        sys.path.pop(0)
    # PyInstaller bundles the build machine's libfontconfig, which still reads the system's /etc/fonts (the
    # fontconfig-config package that libfontconfig1 brings): without it Qt finds no font configuration.
    entries, unknown = syslibs.debian_depends([*needs.external, *FONT_CONFIG_SONAMES])
    if unknown:
        raise BundleError(f"no Debian package known for {', '.join(unknown)}: add it to speco3.syslibs.PACKAGES")
    # the C library first, with the version the code needs (also when no file names libc.so.6 directly)
    return [f"libc6 (>= {needs.glibc})"] + [e for e in entries if e != "libc6"] + [syslibs.FONTS.debian]


_LLAMA_LIBRARY = re.compile(r"^lib(ggml|llama|mtmd)[\w-]*\.so")


def llama_library_copies(bundle: Path, folder: str = "llama_cpp/lib") -> list[str]:
    """What breaks "one copy of each llama.cpp library" in a built bundle (empty when nothing does): a library of
    ``folder`` (libggml*, libllama, libmtmd) as two different files under one soname, or a file of that name
    elsewhere in the bundle. Two copies of libggml are two backend registries in one process: the modules load
    into the one ``ctypes`` opened, libllama uses the other, and finds no backend."""
    lib = bundle / "_internal" / folder
    problems: list[str] = []
    if not lib.is_dir():
        return [f"{lib}: missing"]
    by_soname: dict[str, set[Path]] = {}
    for path in lib.iterdir():
        if _LLAMA_LIBRARY.match(path.name) and path.exists():
            soname = re.sub(r"(\.so)(\.\d+)?(\.\d+)*$", r"\1", path.name)
            by_soname.setdefault(soname, set()).add(path.resolve())
    for soname, real in sorted(by_soname.items()):
        if len(real) > 1:
            problems.append(f"{soname}: {len(real)} different files in {folder} ({', '.join(sorted(p.name for p in real))})")
    names = {p.name for p in lib.iterdir()}
    for path in sorted((bundle / "_internal").rglob("lib*.so*")):
        # PyInstaller links the top-level name to the folder's file (the same file: one mapping), or copies it
        if path.parent != lib and path.name in names and _LLAMA_LIBRARY.match(path.name) and \
                path.resolve() != (lib / path.name).resolve():
            problems.append(f"{path.relative_to(bundle)}: a second copy of {folder}/{path.name}")
    return problems


def _main(argv: list[str]) -> int:
    """``python packaging/bundle_manifest.py linux-needs BUNDLE``: JSON of what the built bundle needs;
    ``... prune BUNDLE``: remove `UNWANTED_PLUGINS` and what only they needed; ``... single-copies BUNDLE``: exit
    status 1 naming each `llama_library_copies` problem."""
    if len(argv) != 2 or argv[0] not in ("linux-needs", "prune", "single-copies"):
        print("usage: bundle_manifest.py linux-needs|prune|single-copies BUNDLE_DIR", file=sys.stderr)
        return 2
    bundle = Path(argv[1])
    if argv[0] == "prune":
        for path in prune_unwanted(bundle):
            print(f"bundle: removed {path}")
        return 0
    if argv[0] == "single-copies":
        problems = llama_library_copies(bundle)
        for line in problems:
            print(f"bundle: {line}", file=sys.stderr)
        return 1 if problems else 0
    scanned = elf_needs(bundle)
    built_on = build_glibc()
    glibc = glibc_floor(scanned, built_on)
    needs = ElfNeeds(scanned.external, glibc, scanned.files, scanned.modules)  # libc6 (>= glibc) in Depends
    lib_dir = bundle / "_internal" / "llama_cpp" / "lib"
    print(json.dumps({"glibc": glibc, "glibc_symbols": scanned.glibc, "glibc_build_machine": built_on, "external": list(needs.external), "elf_files": needs.files,
                      "module_needs": dict(needs.modules), "depends": debian_depends(needs),
                      "recommends": debian_recommends(needs), "cpu_flags": cpu_flags_required(lib_dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

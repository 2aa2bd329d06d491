"""Installation self-test: ``spec-o3-desktop --self-test`` and ``spec-o3 self-test``.

Proves that an installation (a pip install or a PyInstaller bundle) has everything the app needs, offline and
without a display: package data, the FITS readers on a demo spectrum, whether the system has the libraries Qt's window
plugin needs (`speco3.syslibs`), the training-faithful renderer on a zoom,
the agent loop (driven by a *scripted* engine — a replay for this self-test, not a model), the local model store
and the llama.cpp runtime (backend, GPU offload, devices). Each check prints one ``PASS``/``FAIL`` line; the exit
status is non-zero when any check fails.

This module is Qt-free: the caller passes the renderer (``speco3.render.render_view``), so the checks run the
same way from the GUI entry point and from the command line.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speco3 import __version__, syslibs
from speco3.errors import Speco3Error

if TYPE_CHECKING:  # the checks import the app's layers when they run
    from speco3.agent.tool import RenderFn
    from speco3.spectra.model import Spectrum

logger = logging.getLogger(__name__)

#: The five SpecVI-Bench tasks the package must ship.
EXPECTED_TASKS = ("carbon", "cv", "gm", "ss", "wd")
#: Zoom window of the render and agent checks (rest frame, Å): Hα of the demo cataclysmic variable.
ZOOM = (6500.0, 6620.0)
#: ggml backend libraries (file name stem without ``lib``) and the backend each provides.
GGML_BACKEND_LIBS = {"ggml-cuda": "CUDA", "ggml-metal": "Metal", "ggml-vulkan": "Vulkan", "ggml-hip": "HIP",
                     "ggml-sycl": "SYCL", "ggml-opencl": "OpenCL", "ggml-blas": "BLAS", "ggml-cpu": "CPU"}
#: Qt platform plugins an installation must carry, by platform (file name stems).
QT_PLATFORMS = {"linux": ("qoffscreen", "qxcb"), "darwin": ("qoffscreen", "qcocoa"), "win32": ("qoffscreen", "qwindows")}
SCRIPT = (
    "<think>The full view shows a blue continuum with strong Balmer emission. I zoom on Hα to confirm.</think>\n"
    '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"label": "Zoom on Hα region", '
    f'"wavelength_range": [{ZOOM[0]:.0f}, {ZOOM[1]:.0f}]}}}}\n</tool_call>',
    "<think>Hα is in emission in the zoom.</think>\n<answer>\\boxed{YES}</answer> Self-test replay: "
    "scripted output, not a model judgement.",
)



class SelfTestError(Speco3Error):
    """A self-test check found a problem (the message says which and why)."""


@dataclass
class CheckResult:
    """One check: its name, whether it passed, a one-line detail and its duration."""

    name: str
    ok: bool
    detail: str
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name:<14} {self.detail} ({self.seconds:.2f} s)"


def _png_of(rendered: object) -> bytes:
    """PNG bytes from a renderer result (`RenderedImage` or bytes)."""
    png = getattr(rendered, "png", rendered)
    if not isinstance(png, bytes | bytearray):
        raise SelfTestError(f"the renderer returned {type(rendered).__name__}, not a PNG")
    return bytes(png)


def _inspect_png(png: bytes) -> tuple[int, int, int]:
    """``(width, height, line pixels)`` of a rendered plot; fails on a blank or non-PNG image."""
    import numpy as np
    from PIL import Image

    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        raise SelfTestError("the renderer output is not a PNG")
    with Image.open(io.BytesIO(png)) as img:
        rgb = img.convert("RGB")
    # The spectrum is drawn in blue (matplotlib's C0 at alpha 0.8): count clearly blue pixels.
    px = np.asarray(rgb, dtype=np.int16)
    r, g, b = px[..., 0], px[..., 1], px[..., 2]
    blue = int(np.count_nonzero((b > 150) & (b - r > 60) & (b - g > 20)))
    if blue < 50:
        raise SelfTestError(f"the {rgb.width}×{rgb.height} image has no visible spectrum line ({blue} blue pixels)")
    return rgb.width, rgb.height, blue


# -- the checks ---------------------------------------------------------------------------------------------
def check_environment() -> str:
    from speco3.config import cache_dir, config_dir, data_dir

    frozen = getattr(sys, "frozen", False)
    where = f"bundle {Path(sys.executable).parent}" if frozen else f"python {sys.executable}"
    for folder in (data_dir(), config_dir(), cache_dir()):
        probe = folder
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not os.access(probe, os.W_OK):
            raise SelfTestError(f"user folder {folder} cannot be created or written ({probe} is read-only)")
    return (f"Spec-o3 {__version__}, Python {platform.python_version()}, {platform.system()} {platform.machine()}, "
            f"{where}; data {data_dir()}")


def check_package_data() -> str:
    from speco3.agent.tasks import builtin_tasks
    from speco3_models import catalog

    tasks = builtin_tasks()
    missing = [t for t in EXPECTED_TASKS if t not in tasks]
    if missing:
        raise SelfTestError(f"built-in task library lacks {', '.join(missing)} (package data not installed?)")
    models = catalog.catalog()
    if not models:
        raise SelfTestError("the model catalog is empty (catalog.json not installed?)")
    fonts = resources.files("speco3") / "render" / "fonts"
    font_files = sorted(p.name for p in fonts.iterdir() if p.name.endswith(".ttf")) if fonts.is_dir() else []
    if len(font_files) < 2:
        raise SelfTestError(f"renderer fonts missing from {fonts} (found {font_files or 'none'})")
    return (f"{len(tasks)} tasks ({', '.join(sorted(tasks))}); catalog: {', '.join(m.name for m in models)}; "
            f"fonts: {', '.join(font_files)}")


def check_qt_plugins() -> str:
    """Qt platform plugins present as files (checked without importing Qt)."""
    plugins = syslibs.qt_plugins_dir()
    if plugins is None:
        root = syslibs.pyside_dir()
        raise SelfTestError("PySide6 is not installed" if root is None else f"no Qt plugin folder under {root}")
    folder = plugins / "platforms"
    stems = {p.name.split(".")[0].removeprefix("lib") for p in folder.iterdir()} if folder.is_dir() else set()
    wanted = QT_PLATFORMS.get(sys.platform, ("qoffscreen",))
    missing = [w for w in wanted if w not in stems]
    if missing:
        raise SelfTestError(f"Qt platform plugins missing in {folder}: {', '.join(missing)}")
    return f"{', '.join(sorted(stems))} in {folder}"


def check_display() -> str:
    """The platform plugin a window would use (the session's, not the self-test's offscreen) can load: the
    system has every library it needs (`speco3.syslibs`, the check the app makes before its window)."""
    check = syslibs.window_check(for_window=True)
    if check is None:
        return f"nothing to check on {sys.platform}" if not sys.platform.startswith("linux") else "headless"
    usable = check.usable
    if usable is None:
        raise SelfTestError(check.message().replace("\n", " "))
    if not usable.known:
        return f"a window would use {usable.platform} ({usable.file}); no ldd here to check its libraries"
    skipped = [c for c in check.tried if c is not usable]
    note = "".join(f"; {c.platform} cannot load (lacks {', '.join(c.missing)})" for c in skipped if c.file)
    where = usable.file.name if usable.file is not None else "?"  # a usable check has its file (PlatformCheck.ok)
    return f"a window would use {usable.platform} ({where}): every system library found{note}"


def check_demo_spectrum(workdir: Path, state: dict[str, Any]) -> str:
    from speco3.demo import CATALOGUE, demo_file_name, write_demo_spectrum
    from speco3.spectra import read_spectrum

    path = write_demo_spectrum(workdir / demo_file_name(0), CATALOGUE[0], 0)
    spectrum = read_spectrum(path)
    good = spectrum.good
    if spectrum.n_pixels < 1000 or good.sum() < 0.9 * spectrum.n_pixels:
        raise SelfTestError(f"{path.name}: {spectrum.n_pixels} pixels, {int(good.sum())} usable")
    wave = spectrum.wavelength
    if not (wave[0] < 4000 < 9000 < wave[-1]):
        raise SelfTestError(f"{path.name}: wavelength {wave[0]:.0f}–{wave[-1]:.0f} Å is not the LAMOST range")
    state["spectrum"] = spectrum
    return (f"{spectrum.name}: {spectrum.n_pixels} px, {wave[0]:.0f}–{wave[-1]:.0f} Å, "
            f"format {spectrum.meta.format}, z={spectrum.z:.5f}")


def check_render(spectrum: Spectrum, render: RenderFn) -> str:
    from speco3.imaging import prepare_image
    from speco3.spectra.view import View

    zw, zh, zblue = _inspect_png(_png_of(render(View(spectrum, ZOOM))))
    fw, fh, _ = _inspect_png(_png_of(render(View(spectrum, None))))
    if not (zw < fw and zh <= fh):
        raise SelfTestError(f"zoom {zw}×{zh} px is not smaller than the full view {fw}×{fh} px (size classes)")
    image = prepare_image(_png_of(render(View(spectrum, ZOOM))))
    return (f"zoom {ZOOM[0]:.0f}–{ZOOM[1]:.0f} Å: {zw}×{zh} px ({zblue} line px) → {image.grid[0]}×{image.grid[1]} "
            f"image tokens; full view {fw}×{fh} px")


def check_agent(spectrum: Spectrum, render: RenderFn) -> str:
    from speco3.agent.loop import run_to_verdict
    from speco3.agent.steps import Outcome, ToolStep
    from speco3.agent.tasks import builtin_tasks
    from speco3.engine.scripted import ScriptedEngine

    engine = ScriptedEngine(list(SCRIPT))
    steps, final = run_to_verdict(engine, spectrum, builtin_tasks()["cv"], lambda view: _png_of(render(view)))
    tools = [s for s in steps if isinstance(s, ToolStep)]
    if final.outcome is not Outcome.YES:
        raise SelfTestError(f"scripted episode ended {final.outcome.value}: {final.detail}")
    if len(tools) != 1 or not tools[0].ok or tools[0].image is None:
        raise SelfTestError(f"the zoom tool did not run as scripted ({[t.error for t in tools]})")
    images = sum(1 for p in engine.conversation if not isinstance(p, str))
    if images != 2:
        raise SelfTestError(f"the conversation holds {images} images, 2 expected (full view + zoom)")
    return (f"scripted replay (self-test, not a model): {final.turns} turns, {final.zooms} zoom "
            f"{tools[0].wavelength_range}, verdict {final.verdict}")


def check_model_store(hashes: bool = False) -> str:
    from speco3_models.store import ModelStore

    store = ModelStore()
    models = store.list()
    if not models:
        return f"no models installed in {store.root} (add one with `spec-o3 models import` or the Models dialog)"
    problems, lines = [], []
    for model in models:
        report = store.verify(model.name, hashes=hashes)
        lines.append(f"{model.name} ({model.quant}, {model.size / 2**30:.2f} GiB): {'ok' if report.ok else 'FAILED'}")
        if not report.ok:
            problems.append("; ".join(report.lines()[1:]))
    default = store.default_name()
    summary = f"{len(models)} installed in {store.root}, default {default}: " + ", ".join(lines)
    if problems:
        raise SelfTestError(summary + " — " + " | ".join(problems))
    return summary + (" (headers, sizes and sha256 checked)" if hashes else " (headers and sizes checked)")


def check_llama(require_gpu: bool = False) -> tuple[str, dict[str, Any]]:
    from speco3.engine import native

    llama, mtmd = native.import_llama()
    native.ensure_backend()
    for symbol in ("mtmd_init_from_file", "mtmd_helper_eval_chunk_single"):
        if not hasattr(mtmd, symbol):
            raise SelfTestError(f"llama-cpp-python lacks {symbol}: multimodal (mtmd) support is missing")
    import llama_cpp

    gpu = bool(llama.llama_supports_gpu_offload())
    devices = native.list_devices()
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    stems = {p.name.split(".")[0].removeprefix("lib") for p in lib_dir.iterdir()} if lib_dir.is_dir() else set()
    # a module of a build with dynamically loaded backends may be a variant: libggml-cpu-haswell.so
    built = [name for stem, name in GGML_BACKEND_LIBS.items() if any(s == stem or s.startswith(f"{stem}-")
                                                                    for s in stems)]
    system = (llama.llama_print_system_info() or b"").decode(errors="replace").strip()
    modules = native.backend_modules()
    notice = native.backend_notice()
    info = {"llama_cpp_python": llama_cpp.__version__, "gpu_offload": gpu, "system_info": system,
            "devices": [asdict(d) for d in devices], "backend": native.backend_label(-1, devices),
            "lib_dir": str(lib_dir), "backends_built": built, "backend_notice": notice,
            "backend_modules": None if modules is None or not modules.dynamic else {
                "folder": str(modules.folder), "cpu_variant": modules.cpu_variant,
                "gpu_modules": [asdict(m) for m in modules.modules], "registered": list(modules.registered)}}
    if not devices:
        raise SelfTestError("the ggml backend registry lists no device (broken llama.cpp build?)")
    if require_gpu and not gpu:
        raise SelfTestError("GPU offload required (--require-gpu) but " + (
            notice or "this llama.cpp build is CPU-only"))
    names = ", ".join(f"{d.backend}:{d.name} ({d.description})" for d in devices)
    gpu_text = "supported" if gpu else ("no GPU device found" if set(built) - {"CPU", "BLAS"} else "not built in")
    return (f"llama-cpp-python {llama_cpp.__version__}, backends built: {', '.join(built) or 'unknown'}; "
            f"runs on {info['backend']}; GPU offload {gpu_text}; devices: {names}"
            + (f"; NOTICE: {notice}" if notice else "")
            + (f"; {modules.unused_line()}" if modules is not None and modules.unused_line() else "")), info


# -- runner -------------------------------------------------------------------------------------------------
def _timed(name: str, fn: Callable[[], str | tuple[str, dict[str, Any]]]) -> CheckResult:
    """Run one check; a returned string (or ``(string, extra)``) passes, any exception fails."""
    t0 = time.perf_counter()
    try:
        value = fn()
    except Exception as exc:  # every failure becomes a FAIL line, never a crash
        logger.debug("self-test check %s failed", name, exc_info=True)
        return CheckResult(name, False, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0,
                           {"traceback": traceback.format_exc()})
    detail, extra = value if isinstance(value, tuple) else (value, {})
    return CheckResult(name, True, str(detail), time.perf_counter() - t0, extra)


def run_self_test(render: RenderFn, *, hashes: bool = False, require_gpu: bool = False,
                  on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Run every check and return the results (``on_result`` sees each one as it finishes).

    Parameters
    ----------
    render : callable
        ``View -> RenderedImage | bytes``: the app's renderer. Qt runs offscreen (``QT_QPA_PLATFORM`` is set to
        ``offscreen`` unless the caller already chose a platform or created the application).
    hashes : bool
        Also recompute the sha256 of installed model files (slow for multi-GB files).
    require_gpu : bool
        Fail the llama.cpp check when the build cannot offload to a GPU (checks CUDA/Metal/Vulkan bundles).
    """
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if sys.platform.startswith("linux") and not any(os.environ.get(v) for v in ("LC_ALL", "LC_CTYPE", "LANG")):
        os.environ["LC_ALL"] = "C.UTF-8"  # what Qt switches to anyway, without its warning (clean environments)
    results: list[CheckResult] = []
    state: dict[str, Any] = {}

    def record(name: str, fn: Callable[[], Any]) -> None:
        results.append(_timed(name, fn))
        if on_result is not None:
            on_result(results[-1])

    def needs_spectrum(fn: Callable[[Spectrum, RenderFn], str]) -> Callable[[], str]:
        def run() -> str:
            if "spectrum" not in state:
                raise SelfTestError("no demo spectrum to work on (see the demo spectrum check)")
            return fn(state["spectrum"], render)

        return run

    with tempfile.TemporaryDirectory(prefix="speco3-selftest-") as tmp:
        record("environment", check_environment)
        record("package data", check_package_data)
        record("qt plugins", check_qt_plugins)
        record("display", check_display)
        record("demo spectrum", lambda: check_demo_spectrum(Path(tmp), state))
        record("render", needs_spectrum(check_render))
        record("agent", needs_spectrum(check_agent))
        record("model store", lambda: check_model_store(hashes))
        record("llama.cpp", lambda: check_llama(require_gpu))
    return results


def main(argv: list[str] | None = None, *, render: RenderFn) -> int:
    """Command-line front end shared by ``spec-o3-desktop --self-test`` and ``spec-o3 self-test``.

    Options: ``--hashes`` (recompute model sha256), ``--require-gpu``, ``--json FILE`` (machine-readable report).
    Returns 0 when every check passed, 1 otherwise.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="spec-o3 self-test", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_and_report(args, render=render)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Self-test options (shared with the ``spec-o3 self-test`` sub-command)."""
    parser.add_argument("--hashes", action="store_true", help="also recompute sha256 of installed model files")
    parser.add_argument("--require-gpu", action="store_true", help="fail when llama.cpp cannot offload to a GPU")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


def run_and_report(args: argparse.Namespace, *, render: RenderFn) -> int:
    """Run the checks with parsed options, print one line per check and a summary; return the exit status."""
    out = sys.stdout
    report_file = None
    if out is None:  # windowed executable on Windows: no console, write the report to a file instead
        from speco3.config import cache_dir, ensure

        report_file = ensure(cache_dir()) / "self-test.txt"
        out = open(report_file, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    elif hasattr(out, "reconfigure") and (out.encoding or "").lower().replace("-", "") != "utf8":
        out.reconfigure(errors="backslashreplace")
    frozen = " (bundle)" if getattr(sys, "frozen", False) else ""
    print(f"Spec-o3 Desktop {__version__} self-test{frozen}", file=out, flush=True)
    t0 = time.perf_counter()
    results = run_self_test(render, hashes=getattr(args, "hashes", False),
                            require_gpu=getattr(args, "require_gpu", False),
                            on_result=lambda r: print(r.line(), file=out, flush=True))
    failed = [r.name for r in results if not r.ok]
    verdict = "PASS" if not failed else f"FAIL ({', '.join(failed)})"
    print(f"RESULT: {verdict} — {len(results)} checks in {time.perf_counter() - t0:.1f} s", file=out, flush=True)
    if getattr(args, "json", None):
        payload = {"version": __version__, "ok": not failed, "frozen": bool(getattr(sys, "frozen", False)),
                   "checks": [asdict(r) for r in results]}
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
    if report_file is not None:
        out.close()
    return 0 if not failed else 1

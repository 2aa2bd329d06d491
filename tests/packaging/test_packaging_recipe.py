"""The bundle recipe is consistent with the code it packs (no build needed; the build itself is opt-in, see
test_bundle_build.py)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_every_first_party_module_is_a_hidden_import(manifest, repo):
    hidden = set(manifest.hidden_imports())
    # Modules loaded by name at run time must be collected even though no static import names them.
    from speco3.cli import COMMAND_MODULES

    for name in [*COMMAND_MODULES, "speco3.selftest", "speco3.gui.app", "speco3.engine.llama",
                 "speco3_models.store", "speco3.render"]:
        assert name in hidden, name
    on_disk = {p for p in (repo / "desktop" / "speco3").rglob("*.py") if "__pycache__" not in p.parts}
    assert len([m for m in hidden if m.startswith("speco3.") or m == "speco3"]) >= len(on_disk) - 2  # __main__
    assert not [m for m in hidden if manifest.FIRST_PARTY_SKIP.search(m)]
    assert {"llama_cpp.llama_cpp", "llama_cpp.mtmd_cpp", "llama_cpp._ggml"} <= hidden


def test_no_first_party_module_imports_an_excluded_package(manifest, repo):
    excluded = set(manifest.EXCLUDES)
    offenders = []
    for folder in ("desktop", "models", "converters"):
        for path in (repo / folder).rglob("*.py"):
            rel = path.relative_to(repo).as_posix()
            for name in _imports(path):
                if rel in manifest.OPTIONAL_IMPORTERS.get(name.split(".")[0], ()):
                    continue  # an optional bridge that reports the missing package
                if name in excluded or name.split(".")[0] in excluded:
                    offenders.append(f"{path.relative_to(repo)} imports {name}")
    assert not offenders, "the bundle leaves these out: " + "; ".join(offenders)


def test_package_data_is_bundled_and_declared_for_wheels(manifest, repo):
    pairs = manifest.first_party_data()
    dests = {(Path(src).name, dest) for src, dest in pairs}
    for task in ("carbon", "cv", "gm", "ss", "wd"):
        assert (f"{task}.json", "speco3/agent/tasks") in dests
    assert ("catalog.json", "speco3_models") in dests
    assert ("DejaVuSans.ttf", "speco3/render/fonts") in dests
    assert ("report.html.jinja", "speco3/vetting/templates") in dests
    assert not [s for s, _ in pairs if s.endswith((".py", ".pyc"))]
    # The same files must reach a wheel: each matches a [tool.setuptools.package-data] pattern.
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli backport (test extra)
        import tomli as tomllib
    globs = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    undeclared = [s for s, _ in pairs if not any(fnmatch(Path(s).name, g) for g in globs)]
    assert not undeclared, f"data files a wheel would miss: {undeclared}"


def test_llama_cpp_libraries_are_found(manifest):
    pytest.importorskip("llama_cpp")
    binaries, _datas = manifest.llama_cpp_files()
    names = {Path(src).name for src, _ in binaries}
    assert all(dest == "llama_cpp/lib" for _, dest in binaries)
    suffix = {"win32": ".dll", "darwin": ".dylib"}.get(sys.platform, ".so")
    for lib in ("llama", "mtmd", "ggml", "ggml-base"):
        assert any(n.startswith((f"lib{lib}", lib)) and suffix in n for n in names), lib
    assert "CPU" in manifest.ggml_backends(names)


def test_the_modules_of_a_build_with_loadable_backends_are_named(manifest):
    """scripts/build-bundle.sh's llama_cpp/lib: the registry, CPU variant modules, Vulkan and CUDA modules."""
    names = ["libggml.so", "libggml-base.so.0", "libggml-cpu-x64.so", "libggml-cpu-zen4.so", "libggml-vulkan.so",
             "libggml-cuda.so", "libllama.so"]
    assert manifest.ggml_backends(names) == ["CUDA", "Vulkan", "CPU"]
    assert manifest.ggml_backends(["libggml.so", "libggml-base.so"]) == []


def test_llama_cpp_without_libraries_is_a_clear_error(manifest, tmp_path):
    with pytest.raises(manifest.BundleError, match="no lib folder"):
        manifest.llama_cpp_files(tmp_path / "missing")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libggml.so").write_bytes(b"\x7fELF")
    with pytest.raises(manifest.BundleError, match="no llama library"):
        manifest.llama_cpp_files(tmp_path / "lib")


def test_identical_library_copies_become_links_to_the_soname(manifest, tmp_path):
    blob, other = b"\x7fELF" + bytes(range(200)), b"\x7fELF other"
    toc = []
    for name in ("libllama.so", "libllama.so.0", "libllama.so.0.5.0"):
        (tmp_path / name).write_bytes(blob)
        toc.append((f"llama_cpp/lib/{name}", str(tmp_path / name), "BINARY"))
    (tmp_path / "libggml.so").write_bytes(other)
    toc += [("llama_cpp/lib/libggml.so", str(tmp_path / "libggml.so"), "BINARY"),
            ("libz.so.1", str(tmp_path / "libllama.so"), "BINARY")]  # same bytes, other folder: untouched
    out = {dest: (src, kind) for dest, src, kind in manifest.dedupe_identical_libraries(toc)}
    assert out["llama_cpp/lib/libllama.so.0"][1] == "BINARY"
    assert out["llama_cpp/lib/libllama.so"] == ("libllama.so.0", "SYMLINK")
    assert out["llama_cpp/lib/libllama.so.0.5.0"] == ("libllama.so.0", "SYMLINK")
    assert out["llama_cpp/lib/libggml.so"][1] == "BINARY"
    assert out["libz.so.1"][1] == "BINARY"
    assert len(out) == len(toc)


def test_driver_libraries_are_never_bundled(manifest):
    toc = [(n, f"/x/{n}", "BINARY") for n in ("libcuda.so.1", "libnvidia-ml.so.1", "libvulkan.so.1", "nvcuda.dll",
                                                "vulkan-1.dll", "libcudart.so.12", "libcublasLt.so.12",
                                                "llama_cpp/lib/libggml-cuda.so", "libQt6Gui.so.6")]
    kept = {e[0] for e in manifest.drop_driver_libraries(toc)}
    assert kept == {"libcudart.so.12", "libcublasLt.so.12", "llama_cpp/lib/libggml-cuda.so", "libQt6Gui.so.6"}


def test_windows_dlls_collected_twice_keep_the_llama_copy(manifest):
    toc = [("llama_cpp/lib/cublasLt64_12.dll", "C:/cuda/bin/cublasLt64_12.dll", "BINARY"),
           ("cublasLt64_12.dll", "C:/cuda/bin/cublasLt64_12.dll", "BINARY"),
           ("python311.dll", "C:/py/python311.dll", "BINARY"),
           ("llama_cpp/lib/ggml-cuda.dll", "C:/venv/ggml-cuda.dll", "BINARY")]
    assert [e[0] for e in manifest.drop_duplicate_dlls(toc)] == [
        "llama_cpp/lib/cublasLt64_12.dll", "python311.dll", "llama_cpp/lib/ggml-cuda.dll"]


def test_windows_cuda_runtime_is_taken_from_cuda_path(manifest, tmp_path):
    (tmp_path / "bin").mkdir()
    for name in ("cudart64_12.dll", "cublas64_12.dll", "cublasLt64_12.dll", "nvcc.exe", "cufft64_11.dll"):
        (tmp_path / "bin" / name).write_bytes(b"MZ")
    got = sorted(Path(s).name for s, _ in manifest.cuda_runtime_libraries(str(tmp_path)))
    assert got == ["cublas64_12.dll", "cublasLt64_12.dll", "cudart64_12.dll"]
    assert manifest.cuda_runtime_libraries(None) == []


def test_third_party_test_suites_are_dropped_but_astropy_runner_kept(manifest):
    pure = [(m, f"/x/{m}", "PYMODULE") for m in ("astropy.io.fits.tests.test_core", "astropy.tests.runner",
                                                  "astropy.io.fits", "speco3.selftest", "numpy.tests",
                                                  "jinja2.tests")]  # Jinja's "tests" are code it runs
    assert [e[0] for e in manifest.drop_test_modules(pure)] == ["astropy.tests.runner", "astropy.io.fits",
                                                                 "speco3.selftest", "jinja2.tests"]
    datas = [("astropy/io/fits/tests/data/a.fits", "/x", "DATA"), ("astropy/units/format/x.txt", "/x", "DATA"),
             ("astropy/tests/runner.cfg", "/x", "DATA")]
    assert [e[0] for e in manifest.drop_test_data(datas)] == ["astropy/units/format/x.txt",
                                                               "astropy/tests/runner.cfg"]


def test_spec_file_uses_the_manifest(packaging_dir, manifest):
    text = (packaging_dir / "spec-o3.spec").read_text()
    ast.parse(text)  # the spec is Python
    for needed in ("bm.hidden_imports()", "bm.EXCLUDES", "bm.llama_cpp_files()", "bm.drop_driver_libraries",
                   "bm.dedupe_identical_libraries", "bm.drop_duplicate_dlls", "bm.first_party_data()", "X utf8_mode=1", "COLLECT(",
                   "BUNDLE(", "name=bm.APP_NAME", "bm.GUI_EXE", "bm.CLI_EXE", "console=False", "console=True"):
        assert needed in text, needed
    assert manifest.read_version() == __import__("speco3").__version__


def test_launcher_picks_the_entry_point_by_name(packaging_dir, monkeypatch):
    import launcher

    monkeypatch.setattr(sys, "argv", ["/opt/spec-o3/spec-o3"])
    assert launcher._entry_name() in launcher.CLI_NAMES
    monkeypatch.setattr(sys, "argv", ["C:\\Spec-o3\\spec-o3.exe"])
    assert launcher._entry_name() in launcher.CLI_NAMES
    monkeypatch.setattr(sys, "argv", ["/opt/spec-o3/spec-o3-desktop"])
    assert launcher._entry_name() not in launcher.CLI_NAMES
    out = subprocess.run([sys.executable, str(packaging_dir / "launcher.py"), "--version"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "spec-o3-desktop" in out.stdout + out.stderr


def test_desktop_file_passes_desktop_file_validate(packaging_dir):
    validator = shutil.which("desktop-file-validate")
    if not validator:
        pytest.skip("desktop-file-validate (desktop-file-utils) is not installed")
    run = subprocess.run([validator, str(packaging_dir / "linux" / "spec-o3.desktop")], capture_output=True, text=True)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_desktop_file_and_icons(packaging_dir, manifest):
    from PIL import Image

    desktop = (packaging_dir / "linux" / "spec-o3.desktop").read_text()
    assert re.search(rf"^Exec={re.escape(manifest.GUI_EXE)} %F$", desktop, re.M)
    assert re.search(r"^Icon=spec-o3$", desktop, re.M)
    svg = manifest.ICON_SVG.read_text()
    assert 'viewBox="0 0 512 512"' in svg and "clip-path" not in svg  # Qt's SVG Tiny renderer ignores clipPath
    for size in manifest.ICON_SIZES:
        with Image.open(manifest.ICON_DIR / "png" / f"spec-o3-{size}.png") as img:
            assert img.size == (size, size) and img.mode == "RGBA"
            assert img.getpixel((size // 2, size // 2))[3] == 255  # opaque tile, transparent rounded corners
            assert img.getpixel((0, 0))[3] == 0
    with Image.open(manifest.ICON_DIR / "spec-o3.ico") as ico:
        assert {(16, 16), (32, 32), (256, 256)} <= set(ico.info["sizes"])


def test_backend_cmake_args_agree_everywhere(packaging_dir, manifest, repo):
    docs = {
        "build-linux.sh": ("cpu", "cuda", "vulkan"),
        "build-windows.ps1": ("cpu", "cuda", "vulkan"),
        "build-macos.sh": ("metal",),
        "README.md": ("cpu", "cuda", "vulkan", "metal"),
    }
    for name, backends in docs.items():
        text = (packaging_dir / name).read_text()
        for backend in backends:
            assert manifest.CMAKE_ARGS[backend] in text, f"{name}: {manifest.CMAKE_ARGS[backend]}"
    # the manual: the GPU how-to names every backend's CMAKE_ARGS, the offline-laptop page the import
    gpu = (repo / "docs" / "howto" / "gpu.md").read_text()
    for backend in ("cpu", "cuda", "vulkan", "metal"):
        assert manifest.CMAKE_ARGS[backend] in gpu, f"docs/howto/gpu.md: {manifest.CMAKE_ARGS[backend]}"
    for flag in ("-DGGML_CUDA=on", "-DGGML_VULKAN=on", "-DGGML_NATIVE=OFF"):
        assert flag in gpu, flag
    assert "spec-o3 models import" in (repo / "docs" / "getting-started" / "offline-model.md").read_text()


@pytest.mark.parametrize("script", ["build-linux.sh", "build-macos.sh", "linux/install.sh", "linux/uninstall.sh",
                                    "linux/build-appimage.sh"])
def test_shell_scripts_parse(packaging_dir, script):
    run = subprocess.run(["bash", "-n", str(packaging_dir / script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_llama_libraries_collected_twice_keep_the_llama_copy_on_linux(manifest):
    """A second libggml.so.0 in _internal (first on the bootloader's LD_LIBRARY_PATH) would be a second ggml
    registry in the process: only the llama_cpp/lib copy stays."""
    toc = [("llama_cpp/lib/libggml.so.0", "/v/llama_cpp/lib/libggml.so.0", "BINARY"),
           ("libggml.so.0", "/v/llama_cpp/lib/libggml.so.0", "BINARY"),
           ("libllama.so.0", "/v/llama_cpp/lib/libllama.so.0", "BINARY"),
           ("llama_cpp/lib/libllama.so.0", "/v/llama_cpp/lib/libllama.so.0", "BINARY"),
           ("libz.so.1", "/usr/lib/libz.so.1", "BINARY"),
           ("PySide6/Qt/lib/libQt6Core.so.6", "/v/PySide6/Qt/lib/libQt6Core.so.6", "BINARY")]
    assert [e[0] for e in manifest.drop_duplicate_dlls(toc)] == [
        "llama_cpp/lib/libggml.so.0", "llama_cpp/lib/libllama.so.0", "libz.so.1", "PySide6/Qt/lib/libQt6Core.so.6"]


def test_the_gcc_runtime_is_never_bundled(manifest):
    toc = [(n, f"/usr/lib/{n}", "BINARY") for n in ("libstdc++.so.6", "libgcc_s.so.1", "libgomp.so.1", "libz.so.1",
                                                     "libstdc++-a1b2c3.so.6.0.30")]  # a wheel's renamed copy
    assert [e[0] for e in manifest.drop_system_runtime(toc)] == ["libgomp.so.1", "libz.so.1",
                                                                 "libstdc++-a1b2c3.so.6.0.30"]

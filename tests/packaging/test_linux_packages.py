"""The Linux packaging pieces that run without a build: the launcher's glibc and CPU checks (real ``sh``, inputs
faked through its test variables), the entry-point dispatch, what a bundle needs from the system (``objdump`` on
real libraries), the .deb's Depends from ``speco3.syslibs``' table, and ``build-deb.sh`` on a stand-in bundle
(real ``dpkg-deb``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from speco3 import syslibs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux packages")

FLAGS_OK = "flags\t\t: fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt avx f16c fma bmi2 avx2\n"


@pytest.fixture
def bundle(tmp_path, packaging_dir) -> Path:
    """A stand-in bundle: the launcher as build-linux.sh writes it, a fake PyInstaller executable that prints how
    it was started, and the spec-o3 link."""
    b = tmp_path / "spec-o3"
    b.mkdir()
    text = (packaging_dir / "linux" / "launch.sh").read_text()
    text = text.replace("@GLIBC@", "2.34").replace("@CPU_FLAGS@", "sse4_2 avx2 fma").replace("@LABEL@", "cpu")
    (b / "spec-o3-desktop").write_text(text)
    (b / "spec-o3-desktop").chmod(0o755)
    (b / "spec-o3-desktop.bin").write_text('#!/bin/sh\necho "as=$SPECO3_LAUNCH_AS args=$*"\n')
    (b / "spec-o3-desktop.bin").chmod(0o755)
    (b / "spec-o3").symlink_to("spec-o3-desktop")
    return b


def run(exe: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **env})


def test_launcher_runs_the_app_or_the_command_line(bundle, tmp_path):
    cpu = tmp_path / "cpuinfo"
    cpu.write_text(FLAGS_OK)
    app = run(bundle / "spec-o3-desktop", "--demo", SPECO3_CHECK_GLIBC="2.36", SPECO3_CHECK_CPUINFO=str(cpu))
    assert app.returncode == 0 and app.stdout.strip() == "as=app args=--demo", app.stderr
    cli = run(bundle / "spec-o3", "self-test", SPECO3_CHECK_GLIBC="2.34", SPECO3_CHECK_CPUINFO=str(cpu))
    assert cli.returncode == 0 and cli.stdout.strip() == "as=cli args=self-test", cli.stderr
    # through a link elsewhere, as /usr/bin/spec-o3 -> /opt/spec-o3/spec-o3-desktop of the .deb
    usr_bin = tmp_path / "usr-bin"
    usr_bin.mkdir()
    (usr_bin / "spec-o3").symlink_to(bundle / "spec-o3-desktop")
    linked = run(usr_bin / "spec-o3", "--version", SPECO3_CHECK_GLIBC="2.40", SPECO3_CHECK_CPUINFO=str(cpu))
    assert linked.stdout.strip() == "as=cli args=--version", linked.stderr


def test_launcher_names_a_too_old_glibc(bundle):
    old = run(bundle / "spec-o3-desktop", SPECO3_CHECK_GLIBC="2.31")
    assert old.returncode == 70 and old.stdout == ""
    assert "needs glibc 2.34 or newer, and this system has glibc 2.31" in old.stderr
    none = run(bundle / "spec-o3", SPECO3_CHECK_GLIBC="none")
    assert none.returncode == 70 and "GNU C library (glibc) 2.34" in none.stderr and "musl" in none.stderr


def test_launcher_names_missing_instruction_sets(bundle, tmp_path):
    cpu = tmp_path / "cpuinfo"
    cpu.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt avx\n")
    res = run(bundle / "spec-o3-desktop", SPECO3_CHECK_GLIBC="2.36", SPECO3_CHECK_CPUINFO=str(cpu))
    assert res.returncode == 70 and res.stdout == ""
    assert "processor lacks the instruction set(s) avx2 fma" in res.stderr
    assert "compiled for: sse4_2 avx2 fma" in res.stderr


def test_launcher_reads_this_machine(bundle):
    """No test inputs: the real glibc (getconf) and /proc/cpuinfo; this machine runs what it builds."""
    flags = Path("/proc/cpuinfo").read_text()
    if not all(f in flags.split() for f in ("sse4_2", "avx2", "fma")):
        pytest.skip("this processor lacks the stand-in bundle's flags")
    res = run(bundle / "spec-o3-desktop", "x")
    assert res.returncode == 0 and res.stdout.strip() == "as=app args=x", res.stderr


def test_frozen_entry_point_follows_the_launcher(monkeypatch, packaging_dir):
    monkeypatch.syspath_prepend(str(packaging_dir))
    import launcher

    monkeypatch.setattr(sys, "argv", ["/opt/spec-o3/spec-o3-desktop.bin", "models", "list"])
    monkeypatch.setenv("SPECO3_LAUNCH_AS", "cli")
    assert launcher._entry_name() == "spec-o3"
    assert "SPECO3_LAUNCH_AS" not in os.environ  # not inherited by the app's child processes
    assert sys.argv == ["spec-o3", "models", "list"]  # usage lines name the command the user typed
    monkeypatch.setenv("SPECO3_LAUNCH_AS", "app")
    assert launcher._entry_name() == "spec-o3-desktop"
    monkeypatch.setattr(sys, "argv", ["/x/spec-o3"])  # no launcher (Windows, macOS): the name decides
    assert launcher._entry_name() == "spec-o3"


def test_what_real_libraries_need_from_the_system(manifest, tmp_path):
    """objdump on llama.cpp's real libraries: libggml* and libllama provide each other; the C/C++ runtime is
    external, and the newest glibc symbol version is read."""
    lib = manifest.package_dir("llama_cpp") / "lib"
    folder = tmp_path / "b" / "_internal" / "llama_cpp" / "lib"
    folder.mkdir(parents=True)
    for f in lib.iterdir():
        if f.name.endswith(".so") or ".so." in f.name:
            shutil.copy2(f, folder / f.name)
    needs = manifest.elf_needs(tmp_path / "b")
    assert needs.files >= 4
    assert "libc.so.6" in needs.external and "libstdc++.so.6" in needs.external
    assert not any(n.startswith(("libggml", "libllama")) for n in needs.external), needs.external
    major, minor = (int(x) for x in needs.glibc.split(".")[:2])
    assert (major, minor) >= (2, 14)
    depends = manifest.debian_depends(needs)
    assert depends[0].startswith("libc6 (>= ") and "libstdc++6" in depends and depends[-1] == "fonts-dejavu-core"


def test_debian_depends_from_the_syslibs_table(manifest):
    needs = manifest.ElfNeeds(("libxcb-icccm.so.4", "libglib-2.0.so.0", "libc.so.6", "libm.so.6"), "2.34", 3)
    assert manifest.debian_depends(needs) == [
        "libc6 (>= 2.34)", "libxcb-icccm4", "libglib2.0-0t64 | libglib2.0-0", "libfontconfig1", "fonts-dejavu-core"]
    assert syslibs.debian_depends(["libpng16.so.16"]) == (["libpng16-16t64 | libpng16-16"], [])
    with pytest.raises(manifest.BundleError, match="libnowhere.so.3"):
        manifest.debian_depends(manifest.ElfNeeds(("libnowhere.so.3",), "2.17", 1))


def test_mime_types_and_menu_entry_agree(packaging_dir):
    ns = {"m": "http://www.freedesktop.org/standards/shared-mime-info"}
    root = ET.parse(packaging_dir / "linux" / "spec-o3-mime.xml").getroot()
    types = {t.get("type"): [g.get("pattern") for g in t.findall("m:glob", ns)] for t in root.findall("m:mime-type", ns)}
    assert {"*.fits", "*.fit"} <= set(types["image/fits"]) and "*.fits.gz" in types["application/x-fits-gzip"]
    entry = (packaging_dir / "linux" / "spec-o3.desktop").read_text()
    mime_line = next(line for line in entry.splitlines() if line.startswith("MimeType="))
    assert set(types) <= set(mime_line.removeprefix("MimeType=").strip(";").split(";"))


def test_build_deb_on_a_stand_in_bundle(bundle, tmp_path, packaging_dir):
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed (not a Debian/Ubuntu machine)")
    needs = tmp_path / "needs.json"
    needs.write_text('{"depends": ["libc6 (>= 2.34)", "libxcb-icccm4", "libglib2.0-0t64 | libglib2.0-0"]}')
    out = subprocess.run(["bash", str(packaging_dir / "linux" / "build-deb.sh"), str(bundle), str(needs), "1.2.3",
                          "cpu", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    deb = Path(out.stdout.strip().splitlines()[-1])
    assert deb.name.startswith("spec-o3_1.2.3+cpu_") and deb.name.endswith(".deb")
    field = subprocess.run(["dpkg-deb", "--field", str(deb), "Depends", "Version", "Package"], capture_output=True,
                           text=True, check=True).stdout
    assert "Depends: libc6 (>= 2.34), libxcb-icccm4, libglib2.0-0t64 | libglib2.0-0" in field
    assert "Version: 1.2.3+cpu" in field
    listing = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    for path in ("./opt/spec-o3/spec-o3-desktop", "./opt/spec-o3/spec-o3-desktop.bin",
                 "./usr/bin/spec-o3 -> /opt/spec-o3/spec-o3-desktop", "./usr/share/applications/spec-o3.desktop",
                 "./usr/share/mime/packages/spec-o3.xml", "./usr/share/icons/hicolor/256x256/apps/spec-o3.png",
                 "./usr/share/icons/hicolor/scalable/apps/spec-o3.svg", "./usr/share/doc/spec-o3/copyright"):
        assert path in listing, path
    assert "root/root" in listing and "./opt/spec-o3/install.sh" not in listing
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "--control", str(deb), str(control)], check=True)
    postrm = (control / "postrm").read_text()
    assert "~/.local/share/spec-o3" in postrm and "update-mime-database" in postrm
    assert os.access(control / "postinst", os.X_OK)


def test_glibc_floor_is_the_build_machines(manifest):
    """Ubuntu 22.04 (glibc 2.35) is refused by a bundle built on Debian 12 (2.36) even when no file references a
    2.36 symbol: the launcher's need is the newer of the two."""
    needs = manifest.ElfNeeds(("libc.so.6",), "2.34", 3)
    assert manifest.glibc_floor(needs, "2.36") == "2.36"
    assert manifest.glibc_floor(manifest.ElfNeeds((), "2.38", 1), "2.36") == "2.38"
    assert manifest.glibc_floor(needs, "2.4") == "2.34"  # numeric, not text order
    assert manifest._version_key(manifest.build_glibc()) >= (2, 17)  # this machine's, read with confstr


def test_launcher_refuses_ubuntu_2204_naming_236(bundle, packaging_dir):
    text = (packaging_dir / "linux" / "launch.sh").read_text()
    (bundle / "spec-o3-desktop").write_text(text.replace("@GLIBC@", "2.36").replace("@CPU_FLAGS@", "sse4_2")
                                            .replace("@LABEL@", "dl"))
    res = run(bundle / "spec-o3", "--version", SPECO3_CHECK_GLIBC="2.35")
    assert res.returncode == 70 and res.stdout == ""
    assert "this dl build of Spec-o3 Desktop cannot run on this machine: it needs glibc 2.36 or newer, and this " \
           "system has glibc 2.35" in res.stderr


def test_gpu_modules_needs_are_recommendations(manifest, tmp_path):
    """What only a GPU backend module needs (the Vulkan loader, the NVIDIA driver, the CUDA runtime of the add-on)
    is no Depends: the app runs on the CPU without it and says why; the Vulkan loader becomes a Recommends."""
    lib = manifest.package_dir("llama_cpp") / "lib"
    folder = tmp_path / "b" / "_internal" / "llama_cpp" / "lib"
    folder.mkdir(parents=True)
    real = next(p for p in sorted(lib.iterdir()) if p.name.startswith("libggml-base.so"))
    # a real ELF file standing in for the Vulkan module: objdump reads its NEEDED entries (libc, libstdc++, ...)
    shutil.copy2(real, folder / "libggml-vulkan.so")
    shutil.copy2(real, folder / "libggml-base.so.0")
    assert manifest.is_gpu_module(folder / "libggml-vulkan.so")
    assert manifest.is_gpu_module(folder / "libggml-cuda.so")
    assert not manifest.is_gpu_module(folder / "libggml-cpu-haswell.so")
    assert not manifest.is_gpu_module(folder / "libggml-base.so.0")
    needs = manifest.elf_needs(tmp_path / "b")
    assert needs.files == 2 and "libc.so.6" in needs.external
    assert dict(needs.modules) == {"libggml-vulkan.so": ()}  # the same needs as the base: nothing of its own
    with_vulkan = manifest.ElfNeeds(needs.external, needs.glibc, 2,
                                    (("libggml-vulkan.so", ("libvulkan.so.1",)),
                                     ("libggml-cuda.so", ("libcudart.so.13", "libcuda.so.1"))))
    assert manifest.debian_recommends(with_vulkan) == ["libvulkan1"]
    assert not any("vulkan" in d or "cuda" in d for d in manifest.debian_depends(with_vulkan))


def test_one_copy_of_each_llama_library(manifest, tmp_path):
    b = tmp_path / "spec-o3"
    lib = b / "_internal" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (lib / "libggml.so.0").write_bytes(b"\x7fELF registry")
    (lib / "libggml.so").symlink_to("libggml.so.0")
    (lib / "libllama.so.0").write_bytes(b"\x7fELF llama")
    (lib / "libllama.so").symlink_to("libllama.so.0")
    (b / "_internal" / "libz.so.1").write_bytes(b"\x7fELF z")
    (b / "_internal" / "libllama.so.0").symlink_to("llama_cpp/lib/libllama.so.0")  # PyInstaller's link: one file
    assert manifest.llama_library_copies(b) == []
    (lib / "libllama.so.0.5.0").write_bytes(b"\x7fELF llama")  # same bytes, another file: another copy when loaded
    (b / "_internal" / "libggml.so.0").write_bytes(b"\x7fELF registry")
    assert manifest.llama_library_copies(b) == [
        "libllama.so: 2 different files in llama_cpp/lib (libllama.so.0, libllama.so.0.5.0)",
        "_internal/libggml.so.0: a second copy of llama_cpp/lib/libggml.so.0"]
    res = subprocess.run([sys.executable, str(manifest.PACKAGING_DIR / "bundle_manifest.py"), "single-copies", str(b)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "a second copy of llama_cpp/lib/libggml.so.0" in res.stderr


def test_build_addon_packs_the_cuda_module_and_runtime_without_libcuda(tmp_path, packaging_dir):
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed (not a Debian/Ubuntu machine)")
    lib = tmp_path / "addon" / "_internal" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    for name in ("libggml-cuda.so", "libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"):
        (lib / name).write_bytes(b"\x7fELF " + name.encode())
    script = packaging_dir / "linux" / "build-addon.sh"
    out = subprocess.run(["bash", str(script), str(tmp_path / "addon"), "1.2.3", "dl", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    deb, tarball = (Path(p) for p in out.stdout.split())
    assert deb.name.startswith("spec-o3-cuda_1.2.3+dl_") and tarball.name.startswith("spec-o3-cuda-addon-1.2.3-")
    field = subprocess.run(["dpkg-deb", "--field", str(deb), "Package", "Depends"], capture_output=True, text=True,
                           check=True).stdout
    assert "Package: spec-o3-cuda" in field and "Depends: spec-o3 (= 1.2.3+dl)" in field
    listing = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True).stdout
    for name in ("libggml-cuda.so", "libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"):
        assert f"./opt/spec-o3/_internal/llama_cpp/lib/{name}" in listing, name
    import tarfile
    with tarfile.open(tarball) as tar:
        assert "spec-o3/_internal/llama_cpp/lib/libcublasLt.so.13" in tar.getnames()
    # the driver's library is refused, a missing runtime library named
    (lib / "libcuda.so.1").write_bytes(b"\x7fELF driver")
    bad = subprocess.run(["bash", str(script), str(tmp_path / "addon"), "1.2.3", "dl", str(tmp_path / "out2")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "libcuda" in bad.stderr
    (lib / "libcuda.so.1").unlink()
    (lib / "libcublasLt.so.13").unlink()
    bad = subprocess.run(["bash", str(script), str(tmp_path / "addon"), "1.2.3", "dl", str(tmp_path / "out3")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "libcublasLt.so.13 missing" in bad.stderr

"""`speco3.syslibs` against the real installed Qt: ldd's answer on the real plugins, the soname → package table
checked against dpkg, and the real app entry point with a platform plugin whose library is really missing (a copy of
``libqxcb.so`` whose DT_NEEDED entry names a library this machine lacks) — exit 1, the message, the log file, the
self-test, and real Qt refusing the same plugin."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from speco3 import selftest, syslibs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux-only (ldd, Qt's xcb plugin)")

GLIBC = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libresolv.so.2"}


def _plugins() -> Path:
    plugins = syslibs.qt_plugins_dir()
    assert plugins is not None, "PySide6 is installed in the test environment"
    return plugins


def _ldd_text(path: Path) -> str:
    return subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout


def _ldconfig_sonames() -> set[str]:
    out = subprocess.run([shutil.which("ldconfig") or "/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines()[1:] if line.strip()}


def _system_sonames(report: syslibs.LddReport, qt_lib: Path) -> list[str]:
    """Sonames ldd resolved outside PySide6 (the system's), glibc itself left out."""
    return [s for s, p in report.found.items()
            if s not in GLIBC and not s.startswith("ld-linux") and qt_lib not in Path(p).resolve().parents]


@pytest.mark.parametrize("plugin", ["platforms/libqxcb.so", "platforms/libqwayland.so"])
def test_parse_real_ldd_output(plugin):
    path = _plugins() / plugin
    text = _ldd_text(path)
    report = syslibs.parse_ldd(text)
    lines = [ln for ln in text.splitlines() if "=>" in ln]
    assert len(report.found) + len(report.missing) == len({ln.split()[0] for ln in lines})
    assert {ln.split()[0] for ln in lines if "not found" in ln} == set(report.missing)
    for soname, where in report.found.items():
        assert Path(where).exists(), (soname, where)
    known = _ldconfig_sonames()
    assert not set(report.missing) & known, "ldd's missing libraries are unknown to ldconfig too"
    assert "libQt6Gui.so.6" in report.found  # PySide6's own Qt, through the plugin's RUNPATH
    assert syslibs.ldd(path) == report


@pytest.mark.parametrize("plugin", sorted({f for files in syslibs.PLATFORM_FILES.values() for f in files}))
def test_table_covers_every_system_library_the_plugins_need(plugin):
    """Every system soname the real plugins (and the Qt libraries they load) need has a package in the table."""
    path = _plugins() / plugin
    report = syslibs.parse_ldd(_ldd_text(path))
    qt_lib = (_plugins().parent / "lib").resolve()
    needed = _system_sonames(report, qt_lib) + list(report.missing)
    assert needed, plugin
    assert [s for s in needed if s not in syslibs.PACKAGES] == []


def test_debian_names_agree_with_dpkg():
    """The table's Debian names are the packages dpkg says own the libraries Qt resolved here."""
    if shutil.which("dpkg") is None:
        pytest.skip("no dpkg: not a Debian/Ubuntu machine")
    qt_lib = (_plugins().parent / "lib").resolve()
    found: dict[str, str] = {}
    for f in syslibs.setup_files(wayland=True):
        report = syslibs.parse_ldd(_ldd_text(f))
        found |= {s: report.found[s] for s in _system_sonames(report, qt_lib)}
    assert len(found) > 20
    wrong = {}
    for soname, where in sorted(found.items()):
        real = Path(where).resolve()
        candidates = [str(real), str(real).replace("/usr/lib/", "/lib/", 1), str(Path(where))]
        owner = ""
        for c in candidates:
            proc = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
            if proc.returncode == 0:
                owner = proc.stdout.split(":", 1)[0]
                break
        if owner and owner != syslibs.PACKAGES[soname].debian:
            wrong[soname] = (owner, syslibs.PACKAGES[soname].debian)
    assert wrong == {}


def test_packages_and_commands():
    sonames = ["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libglib-2.0.so.0", "libgthread-2.0.so.0"]
    assert syslibs.packages(sonames, "debian") == (["libxcb-icccm4", "libxcb-keysyms1", "libglib2.0-0"], [])
    assert syslibs.packages(sonames, "fedora")[0] == ["xcb-util-wm", "xcb-util-keysyms", "glib2"]
    assert syslibs.packages(sonames, "arch")[0] == ["xcb-util-wm", "xcb-util-keysyms", "glib2"]
    assert syslibs.packages(["libnowhere.so.3"], "debian") == ([], ["libnowhere.so.3"])
    assert syslibs.install_command(["a", "b"], "debian", root=False) == "sudo apt-get install a b"
    assert syslibs.install_command(["a"], "arch", root=True) == "pacman -S --needed a"
    advice = syslibs.install_advice(["libxcb-icccm.so.4", "libQt6XcbQpa.so.6", "libnowhere.so.3"], "fedora")
    assert "dnf install xcb-util-wm" in advice and "reinstall it" in advice and "libnowhere.so.3" in advice
    everywhere = syslibs.install_advice(["libxcb-icccm.so.4"], None)
    assert "apt-get install libxcb-icccm4" in everywhere and "pacman -S --needed xcb-util-wm" in everywhere


def test_family_from_os_release():
    assert syslibs.family('ID=ubuntu\nID_LIKE=debian\n') == "debian"
    assert syslibs.family('ID="rocky"\nID_LIKE="rhel centos fedora"\n') == "fedora"
    assert syslibs.family("ID=manjaro\nID_LIKE=arch\n") == "arch"
    assert syslibs.family("ID=alpine\n") is None
    if Path("/etc/os-release").is_file() and shutil.which("apt-get"):
        assert syslibs.family() == "debian"


def test_platforms_qt_will_try():
    assert syslibs.platforms_to_try({}) == ["xcb"]
    assert syslibs.platforms_to_try({"XDG_SESSION_TYPE": "x11"}) == ["xcb"]
    assert syslibs.platforms_to_try({"XDG_SESSION_TYPE": "wayland"}) == ["wayland", "xcb"]
    assert syslibs.platforms_to_try({"QT_QPA_PLATFORM": "wayland;xcb:nograb"}) == ["wayland", "xcb"]
    assert syslibs.platforms_to_try({"QT_QPA_PLATFORM": "offscreen"}) == ["offscreen"]
    assert syslibs.platforms_to_try({"QT_QPA_PLATFORM": "offscreen"}, for_window=True) == ["xcb"]
    assert syslibs.window_check({"QT_QPA_PLATFORM": "offscreen"}) is None
    typo = syslibs.window_check({"QT_QPA_PLATFORM": "xbc"})
    assert typo is not None and typo.usable is None and 'no "xbc" platform plugin' in typo.message()


# -- a plugin whose library is really missing ----------------------------------------------------------------------
def _broken_plugin_dir(tmp_path: Path) -> tuple[Path, str]:
    """``tmp/plugins/platforms/libqxcb.so``: the real plugin, one DT_NEEDED entry renamed to a soname of the table
    that this machine lacks (same or shorter length, NUL-padded in .dynstr), ``tmp/lib`` → PySide6's Qt libraries
    (the plugin's RUNPATH is $ORIGIN/../../lib). Returns the QT_PLUGIN_PATH folder and the missing soname."""
    real = _plugins() / "platforms" / "libqxcb.so"
    data = real.read_bytes()
    present = _ldconfig_sonames()
    absent = [s for s in syslibs.PACKAGES if s not in present]
    report = syslibs.parse_ldd(_ldd_text(real))
    for original in report.found:
        key = b"\0" + original.encode() + b"\0"
        if data.count(key) != 1:
            continue
        fits = [s for s in absent if len(s) <= len(original)]
        if fits:
            missing = fits[0]
            new = b"\0" + missing.encode().ljust(len(original), b"\0") + b"\0"
            break
    else:  # every library of the table is installed here: a name no package has (the "unknown" path)
        original = "libxcb-icccm.so.4"
        missing = "libxcb-icccm.so.9"
        key, new = b"\0" + original.encode() + b"\0", b"\0" + missing.encode() + b"\0"
    plugins = tmp_path / "plugins"
    (plugins / "platforms").mkdir(parents=True)
    (plugins / "platforms" / "libqxcb.so").write_bytes(data.replace(key, new))
    (tmp_path / "lib").symlink_to(_plugins().parent / "lib")
    return plugins, missing


@pytest.fixture
def broken_env(tmp_path):
    plugins, missing = _broken_plugin_dir(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(QT_PLUGIN_PATH=str(plugins), XDG_SESSION_TYPE="x11", DISPLAY=":99",
               SPECO3_LOG_DIR=str(tmp_path / "logs"), HOME=str(tmp_path / "home"))
    return env, missing


def test_real_qt_cannot_load_the_broken_plugin(broken_env):
    """The stand-in is real for Qt too: QGuiApplication fails on it, naming the library (no display needed)."""
    env, missing = broken_env
    env = dict(env, QT_QPA_PLATFORM="xcb", QT_DEBUG_PLUGINS="1")
    proc = subprocess.run([sys.executable, "-c", "from PySide6.QtGui import QGuiApplication; QGuiApplication([])"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"{missing}: cannot open shared object file" in proc.stderr


def test_app_explains_and_exits_1(broken_env, tmp_path):
    env, missing = broken_env
    exe = Path(sys.executable).with_name("spec-o3-desktop")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "speco3.gui.app"]
    proc = subprocess.run(cmd + ["--demo"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "cannot open its window" in out and missing in out and "libqxcb.so" in out
    assert "Could not load the Qt platform plugin" not in out  # Qt never started
    pkg = syslibs.PACKAGES.get(missing)
    if pkg is not None:
        assert f"apt-get install {pkg.debian}" in out
    else:
        assert "apt-file search" in out
    log = (tmp_path / "logs" / "spec-o3.log").read_text(encoding="utf-8")
    assert "cannot open its window" in log and missing in log


def test_self_test_reports_it(broken_env, monkeypatch):
    env, missing = broken_env
    for key in ("QT_PLUGIN_PATH", "XDG_SESSION_TYPE"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # as the self-test runs; the check is about a window
    result = selftest._timed("display", selftest.check_display)
    assert not result.ok and missing in result.detail and "libqxcb.so" in result.detail


def test_self_test_passes_with_the_real_plugin(monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
    monkeypatch.delenv("QT_PLUGIN_PATH", raising=False)
    monkeypatch.delenv("QT_QPA_PLATFORM_PLUGIN_PATH", raising=False)
    result = selftest._timed("display", selftest.check_display)  # setup.sh installed what Qt needs
    assert result.ok, result.detail
    assert "a window would use xcb (libqxcb.so): every system library found" in result.detail


def test_setup_entry_points_after_setup(capsys, monkeypatch):
    """What scripts/setup.sh reads, on a machine it has set up: ``packages`` names nothing more to install (it did),
    ``hint`` says nothing, and ``check`` passes for an X11 window."""
    monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    assert syslibs.setup_needs(wayland=False) == ([], False)
    assert syslibs.main(["packages"]) == 0
    assert capsys.readouterr().out.strip() == ""
    assert syslibs.main(["hint"]) == 0
    assert capsys.readouterr().out == ""
    assert syslibs.main(["check"]) == 0
    assert "can load" in capsys.readouterr().out

"""The system libraries that the Qt of the installed PySide6 needs, found without importing Qt.

PySide6's wheels bring Qt itself, but Qt's platform plugins (``libqxcb.so`` for X11, ``libqwayland.so`` for
Wayland) link against libraries the distribution must provide (libxcb-icccm, libxcb-keysyms, libxkbcommon-x11,
libEGL, ...). When one is missing, Qt aborts the process (SIGABRT) with a generic hint. This module asks the dynamic
linker (``ldd``, which resolves the plugin's whole dependency tree, PySide6's own Qt libraries included) which
libraries are "not found", and maps their sonames to package names on Debian/Ubuntu, Fedora and Arch
(`PACKAGES`, the one table of them).

Used by ``spec-o3-desktop`` before it creates the QApplication (`window_problem`: exit 1 with the missing
libraries and the install command instead of an abort), by the self-test (the "display" check) and by
``scripts/setup.sh`` (``python -m speco3.syslibs packages``: the Debian packages to install; ``... hint``: the
command for the system's package manager). Stdlib only, no Qt import (import-linter contract).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: PySide6 extension modules whose libraries' needs count too: the app imports QtCore, QtGui and QtWidgets, and
#: QtWidgets' dependency tree holds the other two (one ldd instead of three at each start).
APP_QT_MODULES = ("QtWidgets",)
#: Platforms that need no display server and nothing beyond what Qt's own libraries need.
HEADLESS = frozenset({"offscreen", "minimal"})
#: Plugin files (under ``plugins/``) each windowing platform loads besides Qt's libraries: the platform plugin
#: first, then the integrations Qt loads at run time (setup installs what all of them need).
PLATFORM_FILES = {
    "xcb": ("platforms/libqxcb.so", "xcbglintegrations/libqxcb-glx-integration.so",
            "xcbglintegrations/libqxcb-egl-integration.so"),
    "wayland": ("platforms/libqwayland.so", "wayland-shell-integration/libxdg-shell.so",
                "wayland-graphics-integration-client/libqt-plugin-wayland-egl.so"),
}


@dataclass(frozen=True)
class Package:
    """The package that ships a library, by distribution family."""

    debian: str  # Debian, Ubuntu (apt)
    fedora: str  # Fedora, RHEL (dnf)
    arch: str  # Arch, Manjaro (pacman)

    def name(self, fam: str) -> str:
        """The package name for the distribution family ``fam`` (``debian``, ``fedora`` or ``arch``)."""
        return {"debian": self.debian, "fedora": self.fedora, "arch": self.arch}[fam]


_GLVND = ("libglvnd-glx", "libglvnd")
#: soname → package, for every system library Qt's X11/Wayland plugins and QtCore/QtGui/QtWidgets link against.
PACKAGES: dict[str, Package] = {
    "libxcb.so.1": Package("libxcb1", "libxcb", "libxcb"),
    "libxcb-cursor.so.0": Package("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxcb-icccm.so.4": Package("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-keysyms.so.1": Package("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxcb-image.so.0": Package("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-render-util.so.0": Package("libxcb-render-util0", "xcb-util-renderutil", "xcb-util-renderutil"),
    "libxcb-util.so.1": Package("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb-glx.so.0": Package("libxcb-glx0", "libxcb", "libxcb"),
    "libxcb-randr.so.0": Package("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-render.so.0": Package("libxcb-render0", "libxcb", "libxcb"),
    "libxcb-shape.so.0": Package("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-shm.so.0": Package("libxcb-shm0", "libxcb", "libxcb"),
    "libxcb-sync.so.1": Package("libxcb-sync1", "libxcb", "libxcb"),
    "libxcb-xfixes.so.0": Package("libxcb-xfixes0", "libxcb", "libxcb"),
    "libxcb-xinerama.so.0": Package("libxcb-xinerama0", "libxcb", "libxcb"),
    "libxcb-xinput.so.0": Package("libxcb-xinput0", "libxcb", "libxcb"),
    "libxcb-xkb.so.1": Package("libxcb-xkb1", "libxcb", "libxcb"),
    "libX11.so.6": Package("libx11-6", "libX11", "libx11"),
    "libX11-xcb.so.1": Package("libx11-xcb1", "libX11-xcb", "libx11"),
    "libXau.so.6": Package("libxau6", "libXau", "libxau"),
    "libXdmcp.so.6": Package("libxdmcp6", "libXdmcp", "libxdmcp"),
    "libSM.so.6": Package("libsm6", "libSM", "libsm"),
    "libICE.so.6": Package("libice6", "libICE", "libice"),
    "libxkbcommon.so.0": Package("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    "libxkbcommon-x11.so.0": Package("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    "libEGL.so.1": Package("libegl1", "libglvnd-egl", "libglvnd"),
    "libGL.so.1": Package("libgl1", *_GLVND),
    "libGLX.so.0": Package("libglx0", *_GLVND),
    "libGLdispatch.so.0": Package("libglvnd0", "libglvnd", "libglvnd"),
    "libOpenGL.so.0": Package("libopengl0", "libglvnd-opengl", "libglvnd"),
    "libdrm.so.2": Package("libdrm2", "libdrm", "libdrm"),
    "libwayland-client.so.0": Package("libwayland-client0", "libwayland-client", "wayland"),
    "libwayland-cursor.so.0": Package("libwayland-cursor0", "libwayland-cursor", "wayland"),
    "libwayland-egl.so.1": Package("libwayland-egl1", "libwayland-egl", "wayland"),
    "libfontconfig.so.1": Package("libfontconfig1", "fontconfig", "fontconfig"),
    "libfreetype.so.6": Package("libfreetype6", "freetype", "freetype2"),
    "libpng16.so.16": Package("libpng16-16", "libpng", "libpng"),
    "libexpat.so.1": Package("libexpat1", "expat", "expat"),
    "libbrotlidec.so.1": Package("libbrotli1", "libbrotli", "brotli"),
    "libbrotlicommon.so.1": Package("libbrotli1", "libbrotli", "brotli"),
    "libglib-2.0.so.0": Package("libglib2.0-0", "glib2", "glib2"),
    "libgthread-2.0.so.0": Package("libglib2.0-0", "glib2", "glib2"),
    "libpcre2-8.so.0": Package("libpcre2-8-0", "pcre2", "pcre2"),
    "libffi.so.8": Package("libffi8", "libffi", "libffi"),
    "libdbus-1.so.3": Package("libdbus-1-3", "dbus-libs", "dbus"),
    "libsystemd.so.0": Package("libsystemd0", "systemd-libs", "systemd-libs"),
    "libcap.so.2": Package("libcap2", "libcap", "libcap"),
    "libgcrypt.so.20": Package("libgcrypt20", "libgcrypt", "libgcrypt"),
    "libgpg-error.so.0": Package("libgpg-error0", "libgpg-error", "libgpg-error"),
    "liblzma.so.5": Package("liblzma5", "xz-libs", "xz"),
    "liblz4.so.1": Package("liblz4-1", "lz4-libs", "lz4"),
    "libzstd.so.1": Package("libzstd1", "libzstd", "zstd"),
    "libz.so.1": Package("zlib1g", "zlib", "zlib"),
    "libbsd.so.0": Package("libbsd0", "libbsd", "libbsd"),
    "libmd.so.0": Package("libmd0", "libmd", "libmd"),
    "libstdc++.so.6": Package("libstdc++6", "libstdc++", "gcc-libs"),
    "libgcc_s.so.1": Package("libgcc-s1", "libgcc", "gcc-libs"),
    "libgomp.so.1": Package("libgomp1", "libgomp", "gcc-libs"),
    # the Vulkan loader: only the Vulkan backend module of a build with loadable backends needs it (a .deb
    # recommends it; without it the app runs on the CPU and says so)
    "libvulkan.so.1": Package("libvulkan1", "vulkan-loader", "vulkan-icd-loader"),
    # the C library itself (every binary; the Linux bundle's .deb names it with the version its code needs)
    "libc.so.6": Package("libc6", "glibc", "glibc"),
    "libm.so.6": Package("libc6", "glibc", "glibc"),
    "libdl.so.2": Package("libc6", "glibc", "glibc"),
    "libpthread.so.0": Package("libc6", "glibc", "glibc"),
    "librt.so.1": Package("libc6", "glibc", "glibc"),
    "libutil.so.1": Package("libc6", "glibc", "glibc"),
    "libresolv.so.2": Package("libc6", "glibc", "glibc"),
    "ld-linux-x86-64.so.2": Package("libc6", "glibc", "glibc"),
}
#: Debian packages renamed by the 64-bit time_t transition (Debian 13, Ubuntu 24.04 and later): a .deb that must
#: install on Debian 12 / Ubuntu 22.04 too depends on "new | old" (`debian_depends`).
DEBIAN_RENAMED = {"libglib2.0-0": "libglib2.0-0t64", "libpng16-16": "libpng16-16t64"}
#: Fonts: Qt draws no text without any font file; not a library, so setup checks for it separately.
FONTS = Package("fonts-dejavu-core", "dejavu-sans-fonts", "ttf-dejavu")
FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "~/.local/share/fonts", "~/.fonts")
#: Package-manager commands, by distribution family.
MANAGERS = {"debian": "apt-get install", "fedora": "dnf install", "arch": "pacman -S --needed"}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")
_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+(/\S+)")


@dataclass(frozen=True)
class LddReport:
    """What ``ldd FILE`` said: the libraries it resolved (soname → path) and those it could not find."""

    found: dict[str, str]
    missing: tuple[str, ...]


def parse_ldd(text: str) -> LddReport:
    """Parse ``ldd`` output; each missing soname once, in the order ldd listed them."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for line in text.splitlines():
        m = _NOT_FOUND.match(line)
        if m:
            if m.group(1) not in missing:
                missing.append(m.group(1))
            continue
        m = _FOUND.match(line)
        if m:
            found[m.group(1)] = m.group(2)
    return LddReport(found, tuple(missing))


def ldd(path: Path, env: Mapping[str, str] | None = None) -> LddReport | None:
    """Run ``ldd`` on ``path`` (with ``env``, so ``LD_LIBRARY_PATH`` counts as it will for Qt).

    Returns None when there is no ``ldd`` (non-glibc systems) or it cannot read the file: nothing is known then.
    """
    exe = shutil.which("ldd")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, str(path)], capture_output=True, text=True, timeout=30,
                              env=dict(env) if env is not None else None)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 and "=>" not in proc.stdout:  # "not a dynamic executable" and the like
        return None
    return parse_ldd(proc.stdout)


# -- where Qt is and what it will load -------------------------------------------------------------------------
def pyside_dir() -> Path | None:
    """The installed PySide6 package folder, found without importing it."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def qt_plugins_dir() -> Path | None:
    """PySide6's Qt plugin folder (``PySide6/Qt/plugins`` in wheels, ``PySide6/plugins`` in some layouts)."""
    root = pyside_dir()
    if root is None:
        return None
    return next((c for c in (root / "Qt" / "plugins", root / "plugins") if c.is_dir()), None)


def plugin_search_dirs(env: Mapping[str, str]) -> list[Path]:
    """Folders holding platform plugins, in the order Qt's plugin loader searches them: each ``QT_PLUGIN_PATH``
    entry's ``platforms``, then PySide6's own (``QT_QPA_PLATFORM_PLUGIN_PATH`` is tried before these, see
    `plugin_files`)."""
    dirs = [Path(p) / "platforms" for p in env.get("QT_PLUGIN_PATH", "").split(os.pathsep) if p]
    builtin = qt_plugins_dir()
    if builtin is not None:
        dirs.append(builtin / "platforms")
    return dirs


def platforms_to_try(env: Mapping[str, str], *, for_window: bool = False) -> list[str]:
    """The platform plugins Qt will try, in order, as ``QGuiApplication`` chooses them on Linux.

    ``QT_QPA_PLATFORM`` when set (a ``;``-separated list; ``name:options``), else by the session:
    ``XDG_SESSION_TYPE=wayland`` tries ``wayland`` then falls back to ``xcb``, anything else is ``xcb``.
    ``for_window``: ignore a headless ``QT_QPA_PLATFORM`` (the self-test runs offscreen but reports what a window
    would use).
    """
    names = [p.split(":", 1)[0].strip() for p in env.get("QT_QPA_PLATFORM", "").split(";")]
    names = [n for n in names if n]
    if names and not (for_window and set(names) <= HEADLESS):
        return names
    if env.get("XDG_SESSION_TYPE", "").lower() == "wayland":
        return ["wayland", "xcb"]
    return ["xcb"]


def plugin_files(platform: str, env: Mapping[str, str]) -> list[Path]:
    """The plugin files Qt would try for ``platform``, in order: the one in ``QT_QPA_PLATFORM_PLUGIN_PATH`` (loaded
    directly; when it fails Qt goes on), then the first in `plugin_search_dirs` (the plugin loader keeps the first
    file that offers the platform's key)."""
    name = f"libq{platform}.so"
    direct = env.get("QT_QPA_PLATFORM_PLUGIN_PATH")
    files = [Path(direct) / name] if direct and (Path(direct) / name).is_file() else []
    first = next((d / name for d in plugin_search_dirs(env) if (d / name).is_file()), None)
    return files + ([first] if first is not None else [])


@dataclass(frozen=True)
class PlatformCheck:
    """One platform plugin: where it is (None: no such plugin) and the sonames it needs but cannot find.

    ``known`` is False when nothing could be checked (no ``ldd``): the app then lets Qt try.
    """

    platform: str
    file: Path | None
    missing: tuple[str, ...] = ()
    known: bool = True
    available: tuple[str, ...] = ()  # when there is no such plugin: the platforms there are

    @property
    def ok(self) -> bool:
        return self.file is not None and not self.missing


def qt_module_files() -> list[Path]:
    """PySide6's extension modules the app imports (their ldd covers QtCore/QtGui/QtWidgets' own needs)."""
    root = pyside_dir()
    if root is None:
        return []
    return [f for m in APP_QT_MODULES for f in sorted(root.glob(f"{m}.*.so"))[:1]]


def missing_for(files: Iterable[Path], env: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], bool]:
    """Sonames the dynamic linker cannot find for any of ``files`` (ordered, unique), and whether ldd answered
    for all of them."""
    missing: list[str] = []
    known = True
    for f in files:
        report = ldd(f, env)
        if report is None:
            known = False
            continue
        missing += [s for s in report.missing if s not in missing]
    return tuple(missing), known


def check_platform(platform: str, env: Mapping[str, str]) -> PlatformCheck:
    """Can Qt load ``platform``'s plugin here? (each candidate file with the Qt modules, checked with ldd).

    The first candidate that loads is the one Qt ends up with; when none does, the result names the first file
    and every library the candidates lack.
    """
    files = plugin_files(platform, env)
    if not files:
        return PlatformCheck(platform, None, available=tuple(available_platforms(env)))
    missing: list[str] = []
    for file in files:
        lacks, known = missing_for([file, *qt_module_files()], env)
        if not lacks:
            return PlatformCheck(platform, file, (), known)
        missing += [s for s in lacks if s not in missing]
    return PlatformCheck(platform, files[0], tuple(missing))


@dataclass(frozen=True)
class WindowCheck:
    """The platforms Qt will try and what each lacks; ``usable`` is the one Qt will end up with (None: none)."""

    tried: tuple[PlatformCheck, ...]

    @property
    def usable(self) -> PlatformCheck | None:
        return next((c for c in self.tried if c.ok or (c.file is not None and not c.known)), None)

    @property
    def missing(self) -> tuple[str, ...]:
        out: list[str] = []
        for c in self.tried:
            out += [s for s in c.missing if s not in out]
        return tuple(out)

    def message(self, program: str = "spec-o3-desktop") -> str:
        """One explanation: which plugin cannot load, which libraries are missing, the command that installs them
        (empty when a platform is usable)."""
        if self.usable is not None:
            return ""
        lines = []
        for c in self.tried:
            if c.file is None:
                lines.append(f"Qt has no \"{c.platform}\" platform plugin (available: "
                             f"{', '.join(c.available) or 'none'}; check QT_QPA_PLATFORM).")
            else:
                lines.append(f"Qt's \"{c.platform}\" platform plugin ({c.file}) cannot load: the system lacks "
                             f"{', '.join(c.missing)}.")
        missing = self.missing
        text = f"{program} cannot open its window. " + " ".join(lines)
        if missing:
            text += "\n" + install_advice(missing, family())
        return text


def available_platforms(env: Mapping[str, str]) -> list[str]:
    """The platform names of every plugin file Qt could find."""
    names: set[str] = set()
    direct = [Path(env["QT_QPA_PLATFORM_PLUGIN_PATH"])] if env.get("QT_QPA_PLATFORM_PLUGIN_PATH") else []
    for d in direct + plugin_search_dirs(env):
        if d.is_dir():
            names |= {p.name[4:-3] for p in d.glob("libq*.so")}
    return sorted(names)


def window_check(env: Mapping[str, str] | None = None, *, for_window: bool = False) -> WindowCheck | None:
    """Check the platform plugins Qt is about to try (Linux only; None elsewhere or for a headless platform)."""
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux"):
        return None
    names = platforms_to_try(env, for_window=for_window)
    if set(names) <= HEADLESS:
        return None
    return WindowCheck(tuple(check_platform(n, env) for n in names))


def window_problem(env: Mapping[str, str] | None = None, program: str = "spec-o3-desktop") -> str:
    """The message to show instead of Qt's abort, or "" when the platform Qt will use can load."""
    check = window_check(env)
    return check.message(program) if check is not None else ""


# -- packages and commands -----------------------------------------------------------------------------------------
def family(os_release: str | None = None) -> str | None:
    """``debian``, ``fedora`` or ``arch`` from ``/etc/os-release`` (``ID`` and ``ID_LIKE``); None otherwise."""
    if os_release is None:
        try:
            os_release = Path("/etc/os-release").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    ids: list[str] = []
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids += value.strip().strip('"').lower().split()
    for fam, members in (("debian", {"debian", "ubuntu"}), ("fedora", {"fedora", "rhel", "centos"}),
                         ("arch", {"arch", "manjaro"})):
        if members & set(ids):
            return fam
    return None


def packages(sonames: Iterable[str], fam: str) -> tuple[list[str], list[str]]:
    """``(package names, sonames without a known package)`` for the distribution family ``fam``."""
    names: list[str] = []
    unknown: list[str] = []
    for s in sonames:
        pkg = PACKAGES.get(s)
        if pkg is None:
            unknown.append(s)
            continue
        name = pkg.name(fam)
        if name not in names:
            names.append(name)
    return names, unknown


def debian_depends(sonames: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(Depends entries, sonames without a known package)``: the Debian package of each soname once, as
    ``"new | old"`` for the packages the time_t transition renamed (`DEBIAN_RENAMED`), so one .deb installs on
    Debian 12 and 13 and Ubuntu 22.04 and later."""
    names, unknown = packages(sonames, "debian")
    return [f"{DEBIAN_RENAMED[n]} | {n}" if n in DEBIAN_RENAMED else n for n in names], unknown


def install_command(names: Iterable[str], fam: str, *, root: bool | None = None) -> str:
    """The command line that installs ``names`` (with ``sudo`` unless running as root)."""
    root = (os.geteuid() == 0) if root is None else root
    return ("" if root else "sudo ") + MANAGERS[fam] + " " + " ".join(names)


def install_advice(sonames: Iterable[str], fam: str | None) -> str:
    """How to install the packages that provide ``sonames``: the command of the family ``fam`` (`family`), or all
    three families' when it is None."""
    sonames = list(sonames)
    lines = []
    unknown: list[str] = []
    for f in ([fam] if fam else list(MANAGERS)):
        names, unknown = packages(sonames, f)
        if names:
            lines.append(f"Install them with:  {install_command(names, f)}" if fam else
                         f"  {f}: {install_command(names, f)}")
    if not fam and lines:
        lines.insert(0, "Install them with your package manager:")
    qt_own = [s for s in unknown if s.startswith(("libQt6", "libpyside6", "libshiboken6", "libicu"))]
    other = [s for s in unknown if s not in qt_own]
    if qt_own:
        lines.append(f"{', '.join(qt_own)} belong to PySide6 itself: reinstall it "
                     "(pip install --force-reinstall PySide6-Essentials).")
    if other:
        lines.append(f"No package is known here for {', '.join(other)}: your package manager's file search "
                     "(apt-file search, dnf provides, pacman -F) names it.")
    return "\n".join(lines)


def setup_files(wayland: bool) -> list[Path]:
    """What setup checks: the X11 plugin and its GL integrations, the Qt modules the app imports, and with
    ``wayland`` the Wayland plugin and its shell and EGL integrations."""
    plugins = qt_plugins_dir()
    files = list(qt_module_files())
    if plugins is not None:
        for platform in ("xcb", "wayland") if wayland else ("xcb",):
            files += [plugins / rel for rel in PLATFORM_FILES[platform] if (plugins / rel).is_file()]
    return files


def fonts_present(dirs: Iterable[str] = FONT_DIRS) -> bool:
    """True when any TrueType/OpenType font file exists where fontconfig looks by default."""
    for d in dirs:
        base = Path(d).expanduser()
        if base.is_dir() and any(p.suffix.lower() in (".ttf", ".otf", ".ttc")
                                 for p in base.rglob("*") if p.is_file()):
            return True
    return False


def setup_needs(wayland: bool) -> tuple[list[str], bool]:
    """``(missing sonames, fonts missing)`` for this installation (what setup must get from the system)."""
    missing, _known = missing_for(setup_files(wayland))
    return list(missing), not fonts_present()


def main(argv: list[str] | None = None) -> int:
    """``python -m speco3.syslibs packages|hint|check [--wayland]`` (used by scripts/setup.sh).

    ``packages``: the Debian/Ubuntu package names to install, on one line (empty when nothing is missing);
    ``hint``: what is missing and this system's install command (all three families' when unknown; nothing when
    nothing is missing);
    ``check``: exit 1 with the app's message when the platform Qt would use for a window cannot load.
    """
    parser = argparse.ArgumentParser(prog="python -m speco3.syslibs", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("packages", "hint", "check"))
    parser.add_argument("--wayland", action="store_true", help="also what the Wayland plugin needs")
    args = parser.parse_args(argv)
    if args.action == "check":
        check = window_check(for_window=True)
        message = check.message() if check is not None else ""
        print(message or "the Qt platform plugin a window would use can load", file=sys.stderr if message else
              sys.stdout)
        return 1 if message else 0
    if qt_plugins_dir() is None:
        print("syslibs: PySide6 is not installed; nothing to check", file=sys.stderr)
        return 0
    missing, no_fonts = setup_needs(args.wayland)
    if args.action == "packages":
        names, unknown = packages(missing, "debian")
        if no_fonts:
            names.append(FONTS.debian)
        if unknown:
            print(install_advice(unknown, "debian"), file=sys.stderr)
        print(" ".join(names))
        return 0
    if not missing and not no_fonts:  # nothing to say
        return 0
    fam = family()
    what = ", ".join(missing + (["a font (none installed)"] if no_fonts else []))
    print(f"Qt needs system libraries that are not installed: {what}.")
    lines = install_advice(missing, fam).splitlines() if missing else []
    if no_fonts:
        for f in [fam] if fam else list(MANAGERS):
            lines.append(f"  fonts ({f}): {install_command([FONTS.name(f)], f)}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

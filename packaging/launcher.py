"""Entry script frozen by PyInstaller: one script, two executables.

The bundle holds ``spec-o3-desktop`` (windowed on Windows/macOS) and ``spec-o3`` (a console executable on
Windows, a symbolic link to ``spec-o3-desktop`` elsewhere). Both run this script; the name the program was
started as picks the entry point, so the command line (``spec-o3 models import …``)
works from the bundle exactly as from a pip install. On Linux ``spec-o3-desktop`` is a shell launcher
(``packaging/linux/launch.sh``: glibc and CPU checks) that runs the frozen executable ``spec-o3-desktop.bin``
with ``SPECO3_LAUNCH_AS`` (``cli`` or ``app``) saying which entry point it was started as.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

CLI_NAMES = {"spec-o3"}


LAUNCH_AS = "SPECO3_LAUNCH_AS"  # set by the Linux shell launcher; removed here so that child processes do not see it


def _entry_name() -> str:
    """Name the executable was started as: ``argv[0]`` keeps a symbolic link's name, ``sys.executable`` not; the
    Linux launcher says it in ``SPECO3_LAUNCH_AS``."""
    launched_as = os.environ.pop(LAUNCH_AS, "")
    if launched_as:
        name = "spec-o3" if launched_as == "cli" else "spec-o3-desktop"
        if sys.argv:
            sys.argv[0] = name  # usage lines and --version name the command the user typed, not the .bin
        return name
    for candidate in (sys.argv[0] if sys.argv else "", sys.executable):
        base = candidate.replace("\\", "/").rsplit("/", 1)[-1]  # either separator, whatever the platform
        name = os.path.splitext(base)[0].lower()
        if name:
            return name
    return ""


def main() -> int:
    """Run the GUI or the command line, by the name of the running executable."""
    multiprocessing.freeze_support()  # a frozen child process must not start the app again
    if _entry_name() in CLI_NAMES:
        from speco3.cli import main as entry
    else:
        from speco3.gui.app import main as entry
    return int(entry() or 0)


if __name__ == "__main__":
    sys.exit(main())

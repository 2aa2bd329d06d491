"""Entry point of ``spec-o3-desktop``: ``spec-o3-desktop [FOLDER] [--store STORE] [--demo] [--version]``.

Without arguments the app reopens the archive used last (and resumes the vetting session there); on a fresh
machine it shows the start screen, which offers the demo archive. ``--demo`` writes the demo archive once into
``data_dir()/demo`` and opens it. ``--store STORE`` vets in that store (a night's ``spec-o3 vet ARCHIVE --out
STORE``): FOLDER with it, else the archive the store names. The hidden option ``--screenshot-tour DIR`` drives a scripted session on
the demo archive and saves screenshots (used by the Xvfb test); ``SPECO3_DEMO_AUTORUN=1`` does the same into
``./screenshots``. ``--self-test [--json FILE] [--require-gpu] [--hashes]`` checks the installation offscreen,
without a window, and exits non-zero on any failure (`speco3.selftest`). On Linux, when the platform plugin Qt
would load for the window lacks system libraries, the app says which and how to install them and exits 1 before
Qt starts (`speco3.syslibs.window_problem`), instead of Qt's abort.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from speco3 import __version__, syslibs

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spec-o3-desktop",
                                     description="Inspect FITS spectra and vet candidates with Spec-o3, offline.")
    parser.add_argument("folder", nargs="?", help="archive folder to open (FITS spectra, searched recursively)")
    parser.add_argument("--store", metavar="STORE",
                        help="vet in this vetting store (e.g. the night's 'spec-o3 vet FOLDER --out STORE'): its "
                        "verdicts in the table, your decisions written to it; without FOLDER, the archive it names")
    parser.add_argument("--demo", action="store_true", help="open the embedded demo archive (written on first use)")
    parser.add_argument("--version", action="version", version=f"spec-o3-desktop {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("--self-test", action="store_true",
                        help="check this installation offline (no window; --json FILE, --require-gpu) and exit")
    parser.add_argument("--screenshot-tour", metavar="DIR", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    import multiprocessing

    multiprocessing.freeze_support()  # the archive index reads files in a process pool (frozen bundles too)
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--self-test" in argv:  # installation self-test: offscreen, no window; options of its own
        return _self_test([a for a in argv if a != "--self-test"])
    args = build_parser().parse_args(argv)
    from speco3.applog import install_thread_hook, setup_logging

    setup_logging("spec-o3-desktop", verbose=args.verbose, console_level=logging.INFO)
    install_thread_hook()
    if args.folder and not Path(args.folder).is_dir():
        print(f"spec-o3-desktop: {args.folder}: not a folder", file=sys.stderr)
        return 2
    if args.store and not args.folder and not Path(args.store).is_file():
        print(f"spec-o3-desktop: {args.store}: no such vetting store (give the archive folder too to start a new "
              "one there)", file=sys.stderr)
        return 2
    problem = syslibs.window_problem()  # Linux: a platform plugin that cannot load would make Qt abort (SIGABRT)
    if problem:
        log.error("%s", problem)
        return 1
    os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
    import pyqtgraph as pg
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Spec-o3 Desktop")
    app.setApplicationVersion(__version__)
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    from speco3.gui.crash import install_excepthook
    from speco3.gui.main_window import MainWindow

    install_excepthook()

    window = MainWindow()
    window.show()
    shots = args.screenshot_tour or ("screenshots" if os.environ.get("SPECO3_DEMO_AUTORUN") == "1" else None)
    if shots:
        from speco3.gui.screenshot_tour import ScreenshotTour

        tour = ScreenshotTour(window, Path(shots))  # a child of the window; this frame holds it until app.exec() ends
        tour.start()
    elif args.demo:
        window.open_demo()
    elif args.folder:
        window.open_archive(args.folder, store=args.store)
    elif args.store:
        window.open_store(args.store)
    elif window.settings.last_archive and Path(window.settings.last_archive).is_dir():
        window.open_archive(window.settings.last_archive)
    return app.exec()


def _self_test(argv: list[str]) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from speco3 import selftest
    from speco3.render import render_view

    return selftest.main(argv, render=render_view)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

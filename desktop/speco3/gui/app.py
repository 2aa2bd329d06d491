"""Entry point of ``spec-o3-desktop`` (placeholder window until the desktop issue lands)."""

from __future__ import annotations

import argparse
import sys

from speco3 import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spec-o3-desktop")
    parser.add_argument("--version", action="version", version=f"spec-o3-desktop {__version__}")
    parser.parse_args(argv)
    from PySide6.QtWidgets import QApplication, QLabel

    app = QApplication.instance() or QApplication(sys.argv[:1])
    label = QLabel(f"Spec-o3 Desktop {__version__}")
    label.show()
    return app.exec()

"""Uncaught exceptions in the app: to the log file and to a dialog that says where the log is; the log folder.

`install_excepthook` replaces ``sys.excepthook`` (Qt calls it for exceptions raised in slots and event handlers)
so that an unexpected error is written to the log with its traceback and shown once in a dialog, instead of
only on a console nobody sees. The dialog is not shown again while one is open (an error in a paint event would
otherwise open one per repaint).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from types import TracebackType

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QApplication, QMessageBox

from speco3.applog import log_path, log_uncaught
from speco3.config import ensure, log_dir

log = logging.getLogger(__name__)

_showing = False


def error_text(exc_type, exc) -> str:
    return (f"An unexpected error occurred: {exc_type.__name__}: {exc}\n\n"
            f"The details are in the log file:\n{log_path()}\n\n(Help → Open log folder)")


def show_error(exc_type, exc, tb) -> QMessageBox | None:
    """Log the exception and show it in a modeless dialog (returned; None without a QApplication)."""
    global _showing
    log_uncaught(exc_type, exc, tb)
    if QApplication.instance() is None or _showing:
        return None
    _showing = True
    box = QMessageBox(QMessageBox.Icon.Critical, "Spec-o3 Desktop: unexpected error", error_text(exc_type, exc))
    box.setTextFormat(Qt.TextFormat.PlainText)  # the error quotes whatever the failing code was given
    box.addButton("Open log folder", QMessageBox.ButtonRole.ActionRole).clicked.connect(open_log_folder)
    box.addButton(QMessageBox.StandardButton.Close)
    box.finished.connect(_closed)
    box.setModal(False)
    box.show()
    return box


def _closed(_result: int = 0) -> None:
    global _showing
    _showing = False


class _ExceptHook:
    """``sys.excepthook`` while the app runs: `show_error`, else the hook it replaced (``previous``)."""

    def __init__(self, previous: Callable[[type[BaseException], BaseException, TracebackType | None], object]):
        self.previous = previous
        self.boxes: list[QMessageBox] = []  # the dialogs shown, kept alive while shown

    def __call__(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            self.previous(exc_type, exc, tb)
            return
        try:
            box = show_error(exc_type, exc, tb)
            if box is not None:
                self.boxes.append(box)
        except Exception:  # never raise from the hook itself
            self.previous(exc_type, exc, tb)


def install_excepthook() -> None:
    """Route uncaught exceptions of the GUI thread to `show_error` (KeyboardInterrupt keeps Python's handling)."""
    sys.excepthook = _ExceptHook(sys.excepthook)


def open_log_folder() -> bool:
    """Open the log folder in the platform's file manager."""
    folder = ensure(log_dir())
    ok = QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
    if not ok:
        log.warning("could not open the log folder %s", folder)
    return ok

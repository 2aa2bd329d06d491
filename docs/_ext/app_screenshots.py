"""Screenshots of the app made by the app itself, offscreen at 1366×768, for the manual.

Run by the Sphinx extension `speco3_docs` at build time (``python app_screenshots.py OUTDIR``) and, with
``--front-page FILE``, to make the README's one picture. It drives `speco3.gui.screenshot_tour.ScreenshotTour` (the
scripted walk on the demo archive) and adds the manual's own steps after it: the task editor, the queue after a
batch pre-screen ordered by the triage box, and the Export menu. Every folder the app writes (data, settings, cache, log) is a fresh temporary one, so a build
never reads or changes the user's models, settings or stores, and the agent run is the labelled scripted demo
session (no model is installed there).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1366, 768


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outdir", help="folder for the PNG files (created)")
    parser.add_argument("--front-page", metavar="FILE", help="also copy the agent-verdict shot (the README's picture) to FILE")
    args = parser.parse_args(argv)
    out = Path(args.outdir).resolve()
    with tempfile.TemporaryDirectory(prefix="speco3-docs-shots-") as tmp:
        for var, sub in (("SPECO3_DATA_DIR", "data"), ("SPECO3_CONFIG_DIR", "config"),
                         ("SPECO3_CACHE_DIR", "cache"), ("SPECO3_LOG_DIR", "log")):
            os.environ[var] = str(Path(tmp) / sub)
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
        code = _tour(out)
    if code == 0 and args.front_page:
        shutil.copyfile(out / "04-agent-verdict.png", args.front_page)
    return code


def _tour(out: Path) -> int:
    import pyqtgraph as pg
    from PySide6.QtGui import QPainter
    from PySide6.QtWidgets import QApplication

    from speco3.gui.main_window import MainWindow
    from speco3.gui.screenshot_tour import ScreenshotTour

    class ManualTour(ScreenshotTour):
        """The app's screenshot tour, then the manual's extra pictures."""

        def __init__(self, window: MainWindow, folder: Path) -> None:
            super().__init__(window, folder, timeout_s=600.0)  # a step (the batch) may be slow on a busy machine
            self.steps += [("task editor", self._task_editor), ("batch pre-screen", self._batch),
                           ("pre-screen done", self._batch_done), ("triage order", self._triage),
                           ("export menu", self._export_menu)]

        def _task_editor(self) -> bool:
            w = self.window
            w.decision.cheat.setVisible(False)
            dialog = w.open_task_editor(w.tasks.get("cv"))
            dialog.resize(1100, 700)
            QApplication.processEvents()
            dialog.grab().save(str(self.folder / "07-task-editor.png"))
            dialog.close()
            return True

        def _batch(self) -> bool:
            self.window.start_batch()  # Agent → Batch pre-screen: the scripted demo session on the whole queue
            return True

        def _batch_done(self) -> bool:
            return not self.window.agent._jobs  # every queued spectrum has its verdict

        def _triage(self) -> bool:
            box = self.window.archive.triage
            box.setCurrentIndex(box.findData("p_yes"))
            self.shot("08-triage-order")
            return True

        def _export_menu(self) -> bool:
            """The window with its Export menu open (a popup is a window of its own: drawn onto the grab)."""
            bar = self.window.menuBar()
            action = next(a for a in bar.actions() if a.text().replace("&", "") == "Export")
            menu = action.menu()
            menu.popup(bar.mapToGlobal(bar.actionGeometry(action).bottomLeft()))
            QApplication.processEvents()
            picture = self.window.grab()
            painter = QPainter(picture)
            painter.drawPixmap(self.window.mapFromGlobal(menu.pos()), menu.grab())
            painter.end()
            menu.hide()
            picture.save(str(self.folder / "09-export-menu.png"))
            return True

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Spec-o3 Desktop")
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    window = MainWindow()
    window.resize(WIDTH, HEIGHT)
    side = window.main_splitter.widget(2).minimumWidth()
    archive = max(300, int(0.3 * WIDTH))
    window.main_splitter.setSizes([archive, max(400, WIDTH - archive - side), side])
    window.show()
    tour = ManualTour(window, out)
    tour.start()
    code = app.exec()
    error = out / "tour-error.txt"
    if error.is_file():
        print(f"app_screenshots: {error.read_text().strip()}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())

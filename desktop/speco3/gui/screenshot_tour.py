"""The screenshot tour: a scripted walk through the app on the demo archive (hidden ``--screenshot-tour DIR``).

Steps: start screen → open the demo archive → select the first CV → run the agent (the labelled scripted demo
session when no model is installed) and capture it mid-stream → final verdict → click the first zoom → decide YES
with the keyboard → quit. Each screenshot is ``QWidget.grab()`` of the main window (what the X server shows).
A step that does not happen in time writes ``tour-error.txt`` and exits with status 1. (The installation
self-test is a different thing: `speco3.selftest`.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QApplication

log = logging.getLogger(__name__)


class ScreenshotTour(QObject):
    """See module doc."""

    def __init__(self, window, folder: Path, timeout_s: float = 120.0):
        super().__init__(window)
        self.window = window
        self.folder = Path(folder)
        self.timeout_s = timeout_s
        self.steps: list[tuple[str, Callable[[], bool]]] = [
            ("start screen", self._start),
            ("open the demo archive", self._open_demo),
            ("archive indexed", self._indexed),
            ("agent streaming", self._streaming),
            ("verdict", self._verdict),
            ("zoom clicked", self._zoom),
            ("decided by key", self._decide),
        ]
        self._i = 0
        self._t0 = time.perf_counter()
        self._timer = QTimer(self, interval=100)
        self._timer.timeout.connect(self._tick)
        app = QApplication.instance()
        if app is not None:  # (always: the tour runs in the app)
            app.setProperty("speco3_no_dialogs", True)

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._timer.start()

    def shot(self, name: str) -> Path:
        QApplication.processEvents()
        path = self.folder / f"{name}.png"
        self.window.grab().save(str(path))
        log.info("screenshot %s", path)
        return path

    def _tick(self) -> None:
        if self._i >= len(self.steps):
            self._timer.stop()
            self.window.close()
            QApplication.exit(0)
            return
        name, fn = self.steps[self._i]
        try:
            done = fn()
        except Exception as exc:  # report, do not hang
            log.exception("self-test step %s failed", name)
            self._fail(f"{name}: {type(exc).__name__}: {exc}")
            return
        if done:
            log.info("self-test: %s", name)
            self._i += 1
            self._t0 = time.perf_counter()
        elif time.perf_counter() - self._t0 > self.timeout_s:
            self._fail(f"{name}: not reached in {self.timeout_s:.0f} s")

    def _fail(self, text: str) -> None:
        (self.folder / "tour-error.txt").write_text(text + "\n")
        self._timer.stop()
        self.window.close()
        QApplication.exit(1)

    # -- steps ---------------------------------------------------------------------------------------------------
    def _start(self) -> bool:
        self.shot("01-start-screen")
        return True

    def _open_demo(self) -> bool:
        self.window.open_demo()
        return True

    def _indexed(self) -> bool:
        w = self.window
        if w.index is None or w.table_model.loaded_rows() == 0 or w.vetting.spectrum is None:
            return False
        w.agent_panel.task_box.setCurrentIndex(max(0, w.agent_panel.task_box.findData("cv")))
        w.vetting.go_to(0)
        w.viewer.smooth_more()
        self.shot("02-archive-and-viewer")
        w.run_agent()
        return w.agent.interactive_job is not None

    def _streaming(self) -> bool:
        if self.window.agent_panel._live_chars < 150:  # some reasoning has streamed in
            return False
        self.shot("03-agent-streaming")
        return True

    def _verdict(self) -> bool:
        if self.window.agent.interactive_job is not None or not self.window.agent_panel.verdict.text():
            return False
        self.shot("04-agent-verdict")
        return True

    def _zoom(self) -> bool:
        panel = self.window.agent_panel
        if not panel.zoom_windows():
            raise RuntimeError("the agent session produced no zoom")
        item = panel.zooms.item(0)
        panel.zooms.itemClicked.emit(item)
        self.shot("05-zoom-clicked")
        return True

    def _decide(self) -> bool:
        w = self.window
        target = w.archive.table
        target.setFocus()
        for key in (Qt.Key.Key_2, Qt.Key.Key_Return):  # flag "wrong redshift", accept the suggestion
            QApplication.sendEvent(target, QKeyEvent(QKeyEvent.Type.KeyPress, key, Qt.KeyboardModifier.NoModifier))
        w.decision.cheat.setVisible(True)
        self.shot("06-decided-cheat-sheet")
        return True

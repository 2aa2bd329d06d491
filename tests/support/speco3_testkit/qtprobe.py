"""Qt probes shared by the GUI tests and ``benchmarks/bench_gui.py``."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject


class PaintCounter(QObject):
    """Counts the paint events a widget receives (on a plot's viewport: one per frame in which the plot is drawn)."""

    def __init__(self, widget):
        super().__init__(widget)
        self.n = 0
        widget.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.Paint:
            self.n += 1
        return False

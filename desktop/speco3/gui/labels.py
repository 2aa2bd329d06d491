"""Labels that lay their text out once: `WrapLabel` (a word-wrapped QLabel) and `MarkerLabel` (a plot label)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QStaticText
from PySide6.QtWidgets import QGraphicsItem, QLabel


class MarkerLabel(QGraphicsItem):
    """A marker's label, placed by the viewer in the view box's pixel coordinates.

    Pixel coordinates cost nothing when the view pans or zooms (pyqtgraph's ``InfLineLabel`` recomputes its place
    in Python on every transform change of every label). ``format`` is the text, ``anchor`` the wavelength it is at
    to, ``orthoPos`` where its anchor sits as a fraction of the view height from the bottom (as ``InfLineLabel``).
    The text is a `QStaticText`, laid out once: a `QGraphicsSimpleTextItem` lays its text out again on every paint
    (a twentieth of a millisecond each, twenty labels a frame).
    """

    def __init__(self, text: str, color: tuple[int, int, int], anchor: float = 0.0, fill=None):
        super().__init__()
        self._color = QColor(*color)
        self._font = QFont()
        self._static = QStaticText()
        self._static.setTextFormat(Qt.TextFormat.PlainText)
        self._rect = QRectF()
        self.anchor = anchor
        self.orthoPos = 1.0
        self.anchor_end = anchor  # where a band ends (telluric labels); a line's label has anchor_end == anchor
        self._fill = fill
        self.setZValue(20)
        self.setFormat(text)

    def setFormat(self, text: str) -> None:
        self.format = text
        self.prepareGeometryChange()
        self._static.setText(text)
        self._static.prepare(font=self._font)
        size = self._static.size()
        self._rect = QRectF(0.0, 0.0, size.width(), max(size.height(), QFontMetricsF(self._font).height()))
        self.update()

    def boundingRect(self) -> QRectF:
        return self._rect

    def paint(self, painter, option, widget=None) -> None:
        if self._fill is not None:
            painter.fillRect(self._rect, self._fill)
        painter.setFont(self._font)
        painter.setPen(self._color)
        painter.drawStaticText(0, 0, self._static)


class WrapLabel(QLabel):
    """A word-wrapped `QLabel` whose height at a width is laid out once per text (and font).

    Whenever anything in the window changes size hints, Qt's layouts ask every word-wrapped label in them (hidden
    pages of a `QStackedWidget` included) its height for a width, many times over, and `QLabel` lays rich text out
    anew for every question: the start page's paragraph and the viewer's header were a quarter of the GUI
    thread's time in a spectrum switch. The answers depend only on the text, the width and the font.
    """

    def __init__(self, text: str = ""):
        super().__init__(text)
        self._heights: dict[int, int] = {}

    def setText(self, text: str) -> None:
        if text != self.text():  # the same text: nothing to lay out again
            self._heights.clear()
            super().setText(text)

    def heightForWidth(self, width: int) -> int:
        height = self._heights.get(width)
        if height is None:
            height = self._heights[width] = super().heightForWidth(width)
        return height

    def changeEvent(self, event) -> None:
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._heights.clear()
        super().changeEvent(event)

"""The flux axis by hand (issue #44): keys zoom and move it, Shift+drag in the plot or a drag over the axis sets it,
and it stays through wavelength zooms until the automatic range comes back (a key, or reset zoom)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

pytestmark = pytest.mark.gui


def _drag(widget, start: QPoint, end: QPoint, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
    """A left-button drag as the window system delivers it (press, moves with the button held, release). It waits
    out the double-click interval first: a press that soon after the last drag's press is a double click to Qt,
    and no drag (on an idle machine the drags followed each other within it)."""
    left, none = Qt.MouseButton.LeftButton, Qt.MouseButton.NoButton
    QTest.qWait(QApplication.styleHints().mouseDoubleClickInterval() + 50)

    def send(kind, pos, button, buttons):
        p = QPointF(pos)
        QApplication.sendEvent(widget, QMouseEvent(kind, p, QPointF(widget.mapToGlobal(pos)), button, buttons, modifiers))

    send(QEvent.Type.MouseButtonPress, start, left, left)
    for k in range(1, 11):
        send(QEvent.Type.MouseMove, start + (end - start) * (k / 10), none, left)
    send(QEvent.Type.MouseButtonRelease, end, left, none)


def test_keys_set_a_manual_y_range_that_survives_x_zoom_until_reset(shown_viewer):
    v = shown_viewer()
    auto = v.y_range()
    assert v.y_manual is None and auto[0] < 99 and auto[1] > 101  # the data are 100 ± 1
    v.zoom_y(0.5)
    lo, hi = v.y_range()
    assert v.y_manual == (lo, hi) and hi - lo == pytest.approx((auto[1] - auto[0]) / 2)
    v.pan_y(0.25)
    assert v.y_range()[0] == pytest.approx(lo + (hi - lo) / 4)
    manual = v.y_range()
    v.zoom(0.25)  # a wavelength zoom keeps the vetter's y-range
    assert v.y_range() == pytest.approx(manual)
    assert "y-range set by hand" in v.describe()
    v.auto_y_range()
    assert v.y_manual is None and v.y_range() != pytest.approx(manual)
    v.zoom_y(3.0)
    v.reset_zoom()  # R: the whole spectrum and the automatic range
    assert v.y_manual is None and v.y_range() == pytest.approx(auto)


def test_dragging_moves_wavelength_only_shift_drag_and_the_axis_move_flux(shown_viewer, qtbot):
    v = shown_viewer()
    viewport = v.plot.viewport()
    y0, x0 = v.y_range(), v.x_range()
    mid = QPoint(viewport.width() // 2, viewport.height() // 2)
    _drag(viewport, mid, mid + QPoint(80, 60))
    assert v.x_range() != pytest.approx(x0) and v.y_range() == pytest.approx(y0, abs=1e-6) and v.y_manual is None
    _drag(viewport, mid, mid + QPoint(0, 60), Qt.KeyboardModifier.ShiftModifier)
    assert v.y_manual is not None and v.y_range()[0] > y0[0]  # dragged down: the view moved up
    v.auto_y_range()
    axis = v.plot.getPlotItem().getAxis("left")
    at = v.plot.mapFromScene(axis.mapToScene(QPointF(axis.width() / 2, axis.height() / 2)))  # over its tick labels
    _drag(viewport, at, at + QPoint(0, -60))
    assert v.y_manual is not None and v.y_range()[0] < y0[0]


def test_the_keys_are_bound_and_listed(make_window, demo_archive, open_and_wait, qtbot):
    w = make_window()
    open_and_wait(w, demo_archive)
    auto = w.viewer.y_range()
    qtbot.keyClick(w.archive.table, Qt.Key.Key_Equal, Qt.KeyboardModifier.ControlModifier)
    assert w.viewer.y_manual is not None and w.viewer.y_range()[1] - w.viewer.y_range()[0] < auto[1] - auto[0]
    qtbot.keyClick(w.archive.table, Qt.Key.Key_Up, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(w.archive.table, Qt.Key.Key_R, Qt.KeyboardModifier.ShiftModifier)
    assert w.viewer.y_manual is None and w.viewer.y_range() == pytest.approx(auto)
    assert "Flux axis: zoom in" in w.decision.cheat.text()

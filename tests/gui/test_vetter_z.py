"""The vetter's own z in the app (issue #44 item 2): dragging a line marker moves every marker and sets the z; the key
Z measures it from the centroid of the line in view; a confidence without a z and a z that is not a number are
refused with a reason, nothing stored."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from test_viewer_y_range import _drag

pytestmark = pytest.mark.gui

GALAXY_Z = 0.0612  # the demo archive's first galaxy (Hα, [N II], [O III] … in emission)
H_ALPHA = 6564.61


def _galaxy(w, qtbot) -> None:
    m = w.table_model
    row = next(r for r in range(m.rowCount()) if m.entry(r).cls == "GALAXY" and abs(m.entry(r).redshift - GALAXY_Z) < 1e-6)
    w.vetting.go_to(row)
    assert w.viewer.line_z() == pytest.approx(GALAXY_Z)


def _hover(widget, pos: QPoint) -> None:
    none = Qt.MouseButton.NoButton
    QTest.qWait(30)
    QApplication.sendEvent(widget, QMouseEvent(QEvent.Type.MouseMove, QPointF(pos), QPointF(widget.mapToGlobal(pos)),
                                               none, none, Qt.KeyboardModifier.NoModifier))
    QTest.qWait(30)


def _marker(w, name: str):
    return next(item for item in w.viewer._line_items if item.label.format == name)


def test_dragging_a_marker_moves_them_all_and_sets_the_vetters_z(make_window, demo_archive, open_and_wait, qtbot, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    _galaxy(w, qtbot)
    v = w.viewer
    v.zoom_to(6500 * (1 + GALAXY_Z), 6640 * (1 + GALAXY_Z))
    qtbot.wait(50)
    ha, hb = _marker(w, "Hα"), _marker(w, "Hβ")
    hb_before = hb.value()
    viewport = v.plot.viewport()
    at = v.plot.mapFromScene(v.vb.mapViewToScene(QPointF(ha.value(), sum(v.y_range()) / 2)))
    _hover(viewport, at)  # as the mouse comes over the marker: it takes the drag (else the plot pans)
    assert ha.mouseHovering
    _drag(viewport, at, at + QPoint(60, 0))
    z = v.line_z()
    assert z > GALAXY_Z + 1e-3  # dragged to the red: a larger z
    assert ha.value() == pytest.approx(H_ALPHA * (1 + z), abs=0.01)  # the dragged marker sits at the new z
    assert hb.value() == pytest.approx(hb_before * (1 + z) / (1 + GALAXY_Z), rel=1e-6)  # and the others followed
    assert v.z_box.value() == pytest.approx(z)
    assert w.decision.fit()[0] == pytest.approx(z, abs=1e-5)
    assert f"your z = {z:.5f} from dragging Hα" in w.statusBar().currentMessage()
    key(w, Qt.Key.Key_Y)
    d = w.vetting.store.decisions("cv")[0]
    assert d.vetter_z == pytest.approx(z, abs=1e-5)


def test_key_z_measures_the_line_in_view(make_window, demo_archive, open_and_wait, qtbot, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    _galaxy(w, qtbot)
    v = w.viewer
    v.set_line_z(0.0620)  # markers off the line (Hα still in the window below): the measurement puts them back
    v.zoom_to(6535 * (1 + GALAXY_Z), 6600 * (1 + GALAXY_Z))  # Hα alone ([N II] 6585 stays out)
    qtbot.wait(50)
    key(w, Qt.Key.Key_Z)
    message = w.statusBar().currentMessage()
    z = w.decision.fit()[0]
    assert z == pytest.approx(GALAXY_Z, abs=3e-4), message  # the synthetic line sits at the catalogue z
    assert v.line_z() == pytest.approx(z) and message.startswith(f"your z = {z:.5f}: Hα centred at")
    v.zoom_to(5000, 5010)  # no marker in view
    key(w, Qt.Key.Key_Z)
    assert w.statusBar().currentMessage().startswith("no line marker in view")
    assert w.decision.fit()[0] == pytest.approx(z)  # unchanged


def test_a_confidence_without_a_z_and_a_z_that_is_no_number_are_refused(make_window, demo_archive, open_and_wait,
                                                                        qtbot, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    first = w.vetting.entry.key
    address = w.vetting.session.shown.key  # the store's key of it
    w.decision.fit_conf.setCurrentIndex(4)  # confidence 3, no z
    key(w, Qt.Key.Key_Y)
    assert w.statusBar().currentMessage() == ("a redshift confidence (3) needs the redshift it is about: give your z "
                                              "too: nothing decided")
    assert w.vetting.store.decisions("cv") == [] and w.vetting.entry.key == first  # not stored, not moved on
    w.decision.fit_z.setText("0.3.1")
    key(w, Qt.Key.Key_Y)
    assert w.statusBar().currentMessage() == "your z '0.3.1' is not a number: nothing decided"
    assert w.vetting.store.decisions("cv") == []
    w.decision.fit_z.setText("0,0003")  # a decimal comma is read
    key(w, Qt.Key.Key_Y)
    d = w.vetting.store.decisions("cv")[0]
    assert (d.vetter_z, d.z_conf) == (0.0003, 3)
    # the notes changed on a decided spectrum store the decision again: its z and confidence stay with it
    key(w, Qt.Key.Key_Left)
    key(w, Qt.Key.Key_4)
    d = w.vetting.store.decision(address, "cv")
    assert d.flags == ["interesting"] and (d.vetter_z, d.z_conf) == (0.0003, 3)

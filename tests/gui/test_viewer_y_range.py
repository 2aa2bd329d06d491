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


def test_the_lamost_qso_of_the_issue_keeps_its_oiii_peak(qtbot, tmp_path):
    """Issue #44's case, built as a LAMOST LRS file (tests/data holds no LAMOST QSO): a QSO at z = 0.308 whose
    [O III] 5008 peak at 6558 Å observed (15.55, its neighbours 13.7 and 13.6) is the spectrum's maximum. The
    automatic y-range holds it at full view, zoomed on the line, smoothed, and in the rest frame."""
    import numpy as np
    from astropy.io import fits

    from speco3.demo import DemoObject, write_demo_spectrum
    from speco3.gui.viewer import SpectrumViewer
    from speco3.spectra import read_spectrum

    path = write_demo_spectrum(tmp_path / "spec-58000-QSO_sp01-001.fits", DemoObject("galaxy", "QSO", "", 0.308,
                                                                                     10.0, ""), 0)
    with fits.open(path, mode="update") as hdul:  # the QSO's flux and errors in the file's own columns
        row = hdul["COADD"].data
        w = row["WAVELENGTH"][0].astype(float)
        rng = np.random.default_rng(44)
        flux = 3.0 + 0.4 * np.exp(-0.5 * ((w - 6380) / 1500) ** 2)  # a blue-ish continuum
        flux += 4.0 * np.exp(-0.5 * ((w - 4862.68 * 1.3094) / 35.0) ** 2)  # broad Hβ
        for rest, amp in ((4960.30, 3.4), (5008.24, 10.2)):  # [O III] 4960, 5008: narrow, 3:1
            flux += amp * np.exp(-0.5 * ((w - rest * 1.3094) / 4.0) ** 2)
        flux += rng.normal(0, 0.06, w.size)
        peak = int(np.argmin(np.abs(w - 6558.0)))
        flux[peak], flux[peak - 1], flux[peak + 1] = 15.55, 13.7, 13.6
        row["FLUX"][0] = flux.astype(np.float32)
        row["IVAR"][0] = np.full(w.size, 1 / 0.06**2, dtype=np.float32)
        row["ANDMASK"][0] = 0
    s = read_spectrum(path)
    assert s.meta.survey == "LAMOST" and s.meta.cls == "QSO" and s.z == pytest.approx(0.308)
    top = float(np.nanmax(np.where(s.good, s.flux, np.nan)))
    assert top == pytest.approx(15.55) and abs(s.wavelength[np.nanargmax(np.where(s.good, s.flux, np.nan))] - 6558) < 1
    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    viewer.resize(900, 450)
    viewer.show()
    viewer.set_spectrum(s)
    qtbot.waitExposed(viewer)
    assert viewer.y_range()[1] >= 15.55  # the whole spectrum
    viewer.zoom_to(6450, 6650)
    assert viewer.y_range()[1] >= 15.55 and viewer.y_range()[0] < 3.2  # zoomed on the line
    viewer.smooth_more()  # 3 px: the smoothed peak is lower, and still inside
    smoothed = float(np.nanmax(viewer._y[(viewer._x > 6540) & (viewer._x < 6575)]))
    assert viewer.y_range()[1] >= smoothed > 13
    viewer.set_smoothing_index(0)
    viewer.toggle_frame()  # the rest frame: the same pixels
    viewer.reset_zoom()
    assert viewer.frame == "rest" and viewer.y_range()[1] >= 15.55

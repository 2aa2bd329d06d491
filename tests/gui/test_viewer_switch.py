"""A spectrum switch in the viewer: drawn downsampled yet complete, overlays following, one paint, no re-layout.

Real spectra: the demo archive (LAMOST LRS, 3909 px) and a Keck ESI quasar spectrum (PHL 957, 21,059 px).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from speco3.gui.lines import TELLURIC_BANDS, air_to_vac, display_range, mask_runs
from speco3.spectra import read_spectrum
from speco3_testkit.qtprobe import PaintCounter

pytestmark = pytest.mark.gui

HIGHRES = Path(__file__).resolve().parents[1] / "data" / "spectra" / "generic" / "PH957_f.fits"


@pytest.fixture
def viewer(qtbot):
    from speco3.gui.viewer import SpectrumViewer

    v = SpectrumViewer()
    qtbot.addWidget(v)
    v.resize(900, 450)
    v.show()
    qtbot.waitExposed(v)
    return v


def _drawn(viewer) -> tuple[np.ndarray, np.ndarray]:
    curve = viewer.curve.curve  # the PlotCurveItem: what is stroked
    return np.asarray(curve.xData), np.asarray(curve.yData)


def test_highres_spectrum_is_drawn_downsampled_with_every_peak(viewer, qtbot):
    s = read_spectrum(HIGHRES)
    assert s.n_pixels > 20_000
    viewer.set_spectrum(s)
    qtbot.wait(10)
    x, y = _drawn(viewer)
    width = viewer.vb.width() * viewer.devicePixelRatioF()
    assert x.size <= 2 * width + 8 < s.n_pixels  # peak downsampling: a max and a min per device pixel, not 21,059
    assert np.nanmax(y) == np.nanmax(viewer._y)  # the strongest spike is drawn to its top
    assert np.nanmin(y) == np.nanmin(viewer._y)
    # zoomed on the narrow emission line near 6085 Å (a few pixels wide): clipped to the view, drawn to its top
    lo, hi = 6000.0, 6200.0
    viewer.vb.setXRange(lo, hi, padding=0)
    qtbot.wait(10)
    sel = (viewer._x >= lo) & (viewer._x <= hi)
    peak = float(np.nanmax(viewer._y[sel]))
    x, y = _drawn(viewer)
    in_view = (x >= lo) & (x <= hi)
    assert float(np.nanmax(y[in_view])) == peak
    assert x.size < s.n_pixels  # clipped to the view
    lo_y, hi_y = viewer.y_range()
    assert lo_y < peak < hi_y


def test_switch_moves_masks_tellurics_and_labels_to_the_new_spectrum(viewer, qtbot, demo_master):
    first = read_spectrum(sorted(demo_master.glob("*.fits*"))[0])
    second = read_spectrum(HIGHRES)
    viewer.set_spectrum(first)
    for s in (second, first):
        viewer.set_spectrum(s)
        qtbot.wait(10)
        lo, hi = viewer.x_range()
        assert lo <= float(np.nanmin(s.wavelength)) and float(np.nanmax(s.wavelength)) <= hi
        good = np.isfinite(viewer._y)
        assert viewer.y_range() == pytest.approx(display_range(viewer._y[good]))
        factor = (1.0 + s.z) if viewer.frame == "rest" else 1.0  # tellurics are observed-frame
        runs = mask_runs(~s.good)
        assert len(viewer.mask_bars.opts["x0"]) == len(runs)
        if runs:
            assert viewer.mask_bars.opts["x1"][0] == pytest.approx(s.wavelength[min(runs[0][1], s.n_pixels - 1)])
        bands = np.array([(a, b) for a, b, _name in TELLURIC_BANDS])
        if s.medium == "vacuum":
            bands = air_to_vac(bands)
        assert np.allclose(viewer.telluric_bars.opts["x0"], bands[:, 0] / factor)
        assert [label.anchor for label in viewer._telluric_labels] == pytest.approx(list(bands[:, 0] / factor))
        assert any(label.isVisible() for label in viewer._telluric_labels)
        for item, line in zip(viewer._line_items, viewer._lines, strict=True):
            assert item.label.format == line.name
            assert item.value() == pytest.approx(item.label.anchor)
            assert item.value() == pytest.approx(line.wavelength * (1.0 + s.z), rel=1e-3)  # air/vacuum: 0.03 %


def test_one_paint_per_switch_and_no_relayout(viewer, qtbot, demo_master):
    spectra = [read_spectrum(p) for p in sorted(demo_master.glob("*.fits*"))[:8]] + [read_spectrum(HIGHRES)]
    for s in spectra:  # the flux axis takes its widest labels once
        viewer.set_spectrum(s)
        qtbot.wait(5)
    painted = PaintCounter(viewer.plot.viewport())
    resized = []
    viewer.vb.sigResized.connect(lambda *a: resized.append(1))
    widths = set()
    for s in spectra:
        before = painted.n
        viewer.set_spectrum(s)
        qtbot.wait(20)  # the event loop paints the new frame
        assert painted.n - before == 1, s.name
        widths.add(viewer.plot.getPlotItem().getAxis("left").width())
    assert not resized  # no switch re-laid out the plot
    assert len(widths) == 1


def test_marker_label_keeps_the_text_items_geometry(qtbot):
    from PySide6.QtWidgets import QGraphicsSimpleTextItem

    from speco3.gui.labels import MarkerLabel

    for text in ("Hα", "[O III] 5007", "⊕ H₂O"):
        label = MarkerLabel(text, (20, 120, 50))
        assert label.boundingRect() == QGraphicsSimpleTextItem(text).boundingRect()
    label.setFormat("Ca II 8542")
    assert label.format == "Ca II 8542"
    assert label.boundingRect() == QGraphicsSimpleTextItem("Ca II 8542").boundingRect()


def test_wrap_label_answers_as_qlabel_and_forgets_on_new_text(qtbot):
    from PySide6.QtWidgets import QLabel

    from speco3.gui.labels import WrapLabel

    texts = ["<b>spec-1.fits</b> · LAMOST DR9 · STAR G2 · z = 0.00012 · S/N 25.0 · observed frame · wavelengths in air",
             "<b>a much longer name for a spectrum file.fits</b> · " + "word " * 40]
    ours, ref = WrapLabel(texts[0]), QLabel(texts[0])
    for label in (ours, ref):
        label.setWordWrap(True)
        qtbot.addWidget(label)
    for text in texts:
        ours.setText(text)
        ref.setText(text)
        for width in (120, 300, 640, 300):
            assert ours.heightForWidth(width) == ref.heightForWidth(width), (text[:20], width)
    assert ours.heightForWidth(120) > ours.heightForWidth(640)


def test_noise_level_is_drawn_and_an_unknown_redshift_is_said(viewer, qtbot):
    """The 1σ line from the inverse variance is drawn (downsampled like the flux); a DESI coadd read without its
    redrock file has no redshift, and the header says so instead of showing z = 0."""
    data = Path(__file__).resolve().parents[1] / "data" / "spectra"
    s = read_spectrum(data / "lamost" / "spec-55859-F5902_sp01-001.fits.gz")
    viewer.set_spectrum(s)
    qtbot.wait(10)
    sx, sy = np.asarray(viewer.sigma.curve.xData), np.asarray(viewer.sigma.curve.yData)
    good = s.good & (s.ivar > 0)
    expected = 1 / np.sqrt(s.ivar[good])
    assert sx.size > 100 and np.nanmax(sy) == pytest.approx(expected.max(), rel=1e-6)
    assert "z = " in viewer.header.text() and "unknown" not in viewer.header.text()
    assert "LAMOST LAMOST" not in viewer.header.text() and "LAMOST" in viewer.header.text()
    desi = read_spectrum(data / "desi" / "coadd-5-169-thru20210419.fits")
    assert desi.meta.redshift is None
    viewer.set_spectrum(desi)
    assert "z unknown (lines at z = 0)" in viewer.header.text() and "z = 0.00000" not in viewer.header.text()


def test_plot_menu_modes_do_not_break_on_the_shaded_bands(viewer, qtbot, demo_master):
    """The plot's context menu applies downsampling, FFT mode and alpha to every item it lists, the mask and
    telluric bars included (they raised AttributeError)."""
    viewer.set_spectrum(read_spectrum(sorted(Path(demo_master).rglob("*.fits*"))[0]))
    pi = viewer.plot.getPlotItem() if hasattr(viewer.plot, "getPlotItem") else viewer.plot
    for update in (pi.updateDownsampling, pi.updateSpectrumMode, pi.updateAlpha, pi.updateLogMode):
        update()
    pi.ctrl.alphaSlider.setValue(500)
    pi.updateAlpha()
    assert 0.0 < viewer.mask_bars.opacity() < 1.0

"""A spectrum whose masked pixels are scattered through it still draws its flux at full view (new-user trial).

pyqtgraph's peak downsampling takes each bin's max and min; a NaN left at a masked pixel made every bin NaN, so a
file with every tenth pixel masked showed no line at all until zoomed in, and its mask shading (merged down to a
few hundred runs) covered the whole plot.
"""

from __future__ import annotations

import numpy as np
import pytest

from speco3.gui.lines import mask_runs
from speco3.gui.viewer import SpectrumViewer, finite_curve
from speco3.spectra.model import Spectrum

pytestmark = pytest.mark.gui


def test_finite_curve_keeps_gaps_at_masked_pixels():
    x = np.arange(8, dtype=float)
    y = np.array([1, 2, np.nan, 4, 5, np.nan, np.nan, 8], dtype=float)
    curve = finite_curve(x, y)
    xs, ys, connect = curve["x"], curve["y"], curve["connect"]
    assert xs.tolist() == [0, 1, 3, 4, 7] and ys.tolist() == [1, 2, 4, 5, 8]
    assert connect.tolist() == [True, False, True, False, False]  # no line across a masked pixel


def test_scattered_masked_pixels_draw_at_full_view(qtbot):
    n = 21000
    w = np.linspace(3700, 9100, n)
    flux = 100 + 10 * np.sin(w / 40)
    mask = np.zeros(n, dtype=bool)
    mask[::10] = True  # every tenth pixel bad
    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    viewer.resize(700, 400)
    viewer.show()
    viewer.set_spectrum(Spectrum(w, flux, np.ones(n), mask))
    qtbot.waitExposed(viewer)
    qtbot.wait(50)
    x, y = viewer.curve.getData()  # what is drawn: peak-downsampled at this width
    assert y is not None and x is not None
    assert len(y) < n  # downsampled: the case that lost the line
    assert np.isfinite(y).mean() > 0.99
    assert np.nanmin(y) > 85 and np.nanmax(y) < 115
    # the shading marks the masked pixels, not the whole spectrum
    runs = mask_runs(mask)
    assert len(runs) == mask.sum()
    covered = sum(e - s for s, e in runs)
    assert covered < 0.2 * n

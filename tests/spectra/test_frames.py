"""The one shift between the rest and the observed frame (`speco3.spectra.to_frame`), and that the places that move
wavelengths between frames agree with it."""

from __future__ import annotations

import numpy as np
import pytest

from speco3.evaluate.training import rest_window
from speco3.spectra import Spectrum, SpectrumMeta, View, to_frame
from speco3.vetting.records import Evidence, RolloutRecord, model_evidence


def test_rest_and_observed_are_inverse_with_one_plus_z():
    assert to_frame(6563.0, 0.5, "rest", "observed") == pytest.approx(9844.5)
    assert to_frame(9844.5, 0.5, "observed", "rest") == pytest.approx(6563.0)
    assert to_frame(6563.0, 0.5, "rest", "rest") == 6563.0
    assert to_frame(6563.0, 0.5, "observed", "observed") == 6563.0
    x = np.array([4000.0, 5000.0, 9000.0])
    assert np.allclose(to_frame(to_frame(x, 1.7, "rest", "observed"), 1.7, "observed", "rest"), x)
    assert to_frame(x, 0.0, "observed", "rest") is not None and np.array_equal(to_frame(x, 0.0, "observed", "rest"), x)


def test_spectrum_rest_wavelength_and_view_use_the_same_shift():
    wl = np.linspace(4000, 9000, 50)
    s = Spectrum(wavelength=wl, flux=np.ones_like(wl), meta=SpectrumMeta(redshift=0.25))
    assert np.array_equal(s.rest_wavelength(), to_frame(wl, 0.25, "observed", "rest"))
    assert np.array_equal(View(s, frame="rest").frame_wavelength(), s.rest_wavelength())


def test_evidence_round_trip_model_windows_to_tool_ranges():
    """A model zoom window (rest frame) kept as evidence (observed, 0.1 Å) comes back to the tool's whole Å."""
    z = 0.1383
    ev = model_evidence([RolloutRecord(idx=0, outcome="answer", windows=[[6529, 6609, "Hα"]])], z)
    assert ev == [Evidence(round(6529 * (1 + z), 1), round(6609 * (1 + z), 1), "Hα")]
    assert rest_window(ev[0], z) == (6529, 6609)

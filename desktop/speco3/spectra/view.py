"""A `View`: what part of a spectrum to draw and how. Pure data, no Qt.

The agent's zoom tool builds Views; ``speco3.render`` turns them into PNG bytes. The data selection follows the
training renderer (docs/design.md §3): non-finite points (and values beyond ±`VALUE_LIMIT`) dropped, sorted by wavelength, rest frame λ/(1+z) with the
catalogue redshift, flux drawn as stored (bad pixels are not masked in the model's view), and the points inside
the requested range (partial overlap is fine).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speco3.spectra.model import Frame, Spectrum, within_limits


@dataclass(frozen=True, eq=False)
class View:
    """A full or zoomed view of a spectrum.

    Parameters
    ----------
    spectrum : Spectrum
    wavelength_range : (float, float) or None
        Range in Å in ``frame``; None for the full view.
    frame : {"rest", "observed"}
        Rest frame uses the catalogue redshift.
    title : str or None
        Plot title; None gives ``"Spectrum: <file name>"`` (or ``"Spectrum"`` without a file name).
    """

    spectrum: Spectrum
    wavelength_range: tuple[float, float] | None = None
    frame: Frame = "rest"
    title: str | None = None

    @property
    def is_zoom(self) -> bool:
        return self.wavelength_range is not None

    @property
    def display_title(self) -> str:
        if self.title is not None:
            return self.title
        name = self.spectrum.meta.file_name
        return f"Spectrum: {name}" if name else "Spectrum"

    def frame_wavelength(self) -> np.ndarray:
        s = self.spectrum
        return s.rest_wavelength() if self.frame == "rest" else s.wavelength

    def all_data(self) -> tuple[np.ndarray, np.ndarray]:
        """All finite points in this frame, sorted by wavelength (as the training renderer prepared them); points
        beyond ±`VALUE_LIMIT` count as non-finite."""
        x = self.frame_wavelength()
        y = self.spectrum.flux
        ok = within_limits(x, y)
        x, y = x[ok], y[ok]
        order = np.argsort(x, kind="stable")
        return x[order], y[order]

    def data_range(self) -> tuple[float, float] | None:
        """(min, max) wavelength of the finite data in this frame, or None when there is none."""
        x, _ = self.all_data()
        if x.size == 0:
            return None
        return float(x[0]), float(x[-1])

    def data(self) -> tuple[np.ndarray, np.ndarray]:
        """The points this view shows: (wavelength, flux)."""
        x, y = self.all_data()
        if self.wavelength_range is None:
            return x, y
        lo, hi = self.wavelength_range
        sel = (x >= lo) & (x <= hi)
        return x[sel], y[sel]

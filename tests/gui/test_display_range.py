"""The viewer's automatic y-range never cuts a real feature: narrow lines, steep red ends (issue #15).

Only isolated one-pixel spikes (cosmic rays, hot or dead pixels) and noisy ends are left out. The real spectra are
from tests/data (SDSS, DESI, a brown dwarf); the carbon star is the demo archive's (tests/data holds none).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from speco3.demo import CATALOGUE, write_demo_spectrum
from speco3.gui.lines import boxcar, despike, display_range, vac_to_air
from speco3.spectra import read_spectrum
from speco3.spectra.model import Spectrum
from speco3_testkit.testdata import SPECTRA

pytestmark = pytest.mark.gui


def _flat(n=3909, seed=3):
    rng = np.random.default_rng(seed)
    return 100 + rng.normal(0, 2, n)


def test_two_pixel_line_next_to_a_one_pixel_spike():
    flux = _flat()
    flux[2000], flux[2001] = 260.0, 170.0  # a line two pixels wide, lopsided (peak 1.6x its neighbour's excess)
    flux[2003] = 5000.0  # a cosmic ray two pixels away
    flux[2500] = -3000.0  # a dead pixel
    lo, hi = display_range(flux)
    assert 260 <= hi < 300  # the whole line, and not the spike
    assert 80 < lo < 95
    flux[2002], flux[2003] = 5000.0, 100.0  # the spike now touches the line: still the line's top and no more
    assert 260 <= display_range(flux)[1] < 300


@pytest.mark.parametrize("fwhm", [1.5, 2.0, 3.0])
def test_despike_never_touches_a_sampled_line(fwhm):
    x = np.arange(400, dtype=float)
    for phase in np.linspace(0, 1, 11):
        flux = 10 + 500 * np.exp(-4 * np.log(2) * ((x - 200 - phase) / fwhm) ** 2)
        assert np.array_equal(despike(flux), flux), phase


def test_noisy_ends_are_left_out_but_a_rising_red_end_is_not():
    flux = _flat()
    rng = np.random.default_rng(5)
    flux[:60] += rng.normal(0, 3000, 60)  # a ragged blue end
    lo, hi = display_range(flux)
    assert lo > 85 and hi < 115
    flux[-100:] = np.linspace(100, 400, 100) + rng.normal(0, 2, 100)  # the flux climbs steeply at the red end
    assert display_range(flux)[1] >= 395


def _peak(s: Spectrum, y: np.ndarray, rest_vacuum: float) -> float:
    lam = rest_vacuum * (1 + s.z)
    lam = float(vac_to_air(lam)) if s.medium == "air" else lam
    sel = np.abs(s.wavelength - lam) < 8
    return float(np.nanmax(y[sel]))


# (file, rest vacuum wavelengths of its strongest lines): star-forming galaxies and QSOs whose [O III], Hα or
# [O II] were drawn clipped by the 7-pixel running-median range
LINES = [
    ("sdss/SIIdoublet.fits", (6564.61, 3728.48)),
    ("sdss/sample_sdss.fits", (5008.24, 6564.61, 4862.68)),
    ("sdss/spec-0266-51602-0107.fits", (6564.61, 5008.24)),
    ("sdss/spec-0266-51602-0638.fits", (6564.61,)),
    ("sdss/spec-0332-52367-0639.fits", (5008.24, 6564.61)),
    ("sdss/spec-0280-51612-0117.fits", (5008.24,)),
    ("sdss/spec-0295-51585-0596.fits", (5008.24, 6564.61)),
    ("desi/coadd-4-80613-thru20210324.fits", (5008.24, 6564.61)),
]


@pytest.mark.parametrize("name,lines", LINES, ids=[n.split("/")[1] for n, _ in LINES])
def test_emission_lines_of_real_galaxies_and_qsos_are_not_cut(name, lines):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = read_spectrum(SPECTRA / name)
    for width in (1, 3):  # unsmoothed and the first smoothing step
        y, _ = boxcar(s.flux, s.good, width, s.ivar)
        lo, hi = display_range(y)
        for lam in lines:
            assert lo < _peak(s, y, lam) <= hi, (lam, width)


def test_red_end_of_a_brown_dwarf_and_of_carbon_stars_is_in_range(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dwarf = read_spectrum(SPECTRA / "generic/L5g_0355+11_Cruz09.fits")  # flux climbs to the red end
    y, _ = boxcar(dwarf.flux, dwarf.good, 1, dwarf.ivar)
    assert _median3(y[-90:]).max() <= display_range(y)[1]  # its last 3 %
    for i, obj in enumerate(CATALOGUE):
        if not obj.kind.startswith("carbon"):
            continue
        s = read_spectrum(write_demo_spectrum(tmp_path / f"c{i}.fits", obj, i))
        y, _ = boxcar(s.flux, s.good, 1, s.ivar)
        lo, hi = display_range(y)
        m3 = _median3(y[np.isfinite(y)])  # every feature two pixels wide or more, red end included
        assert lo <= m3.min() and m3.max() <= hi, obj


def _median3(v: np.ndarray) -> np.ndarray:
    return np.median(np.lib.stride_tricks.sliding_window_view(np.pad(v, 1, mode="edge"), 3), axis=1)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 6, 7, 8, 50, 51, 400])
def test_odd_inputs_give_a_finite_range_or_none(n):
    rng = np.random.default_rng(n)
    base = rng.normal(size=n)
    cases = [base, np.full(n, np.nan), np.where(np.arange(n) % 2, np.inf, base), np.full(n, 5.0),
             np.where(rng.random(n) < 0.5, np.nan, base), base.astype(np.float32)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from all-NaN windows or empty slices
        for v in cases:
            r = display_range(v)
            assert (r is None) == (not np.isfinite(v).any())
            assert r is None or (np.isfinite(r).all() and r[1] > r[0])


def test_noisy_narrow_lines_keep_their_peak_and_one_pixel_spikes_go():
    """Sampled Gaussian lines 1.5-5 px FWHM, 5-10,000 σ high, at five sub-pixel positions, alone or on a broad line
    (issue #44: a real line's peak pixel was set to its neighbour): the range holds every line's peak pixel. A
    one-pixel spike 20-2000 σ high on the same noise is left out."""
    rng = np.random.default_rng(1)
    x = np.arange(3909.0)
    for fwhm in (1.5, 2.0, 2.4, 3.0, 5.0):
        for amp in (5, 10, 30, 100, 1000, 10000):
            for phase in np.linspace(0, 1, 5):
                for broad in (0, 30):
                    flux = (3 + broad * np.exp(-4 * np.log(2) * ((x - 2000) / 40) ** 2)
                            + amp * np.exp(-4 * np.log(2) * ((x - 2000 - phase) / fwhm) ** 2) + rng.normal(0, 1, x.size))
                    assert display_range(flux)[1] >= flux[1990:2010].max(), (fwhm, amp, phase, broad)
    for _ in range(100):
        flux = 3 + rng.normal(0, 1, x.size)
        i = int(rng.integers(150, 3750))
        flux[i] += rng.uniform(20, 2000)
        lo, hi = display_range(flux)
        assert hi < np.delete(flux, i).max() + 0.1 * (hi - lo)


def test_a_sharp_peak_on_a_broad_line_is_kept_a_cosmic_ray_beside_a_line_is_not():
    """A well-exposed line whose peak pixel stands 1.9 above neighbours at 13.7 (the numbers of the issue's LAMOST
    QSO [O III]): its neighbours are far above the continuum, so it is a feature, not a spike."""
    flux = _flat()[:400] / 100 * 3  # continuum 3 with 2 % noise
    flux[190:211] += 10.2 * np.exp(-0.5 * ((np.arange(190, 211) - 200) / 4.0) ** 2)  # a line 9 px FWHM
    flux[200] = 15.55
    flux[199], flux[201] = 13.7, 13.6
    assert display_range(flux)[1] >= 15.55
    flux[205] = 300.0  # a cosmic ray on its flank (its neighbours carry 2 % of its excess)
    assert 15.55 <= display_range(flux)[1] < 20

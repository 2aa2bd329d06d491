"""Generic layouts built in the test: WCS variants, units, per-pixel tables, VO utypes, refused axes."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra import identify, read_spectrum


def _image(tmp_path, name, n=50, **cards):
    hdr = fits.Header()
    for k, v in cards.items():
        hdr[k.replace("_", "-") if k == "DC_FLAG" else k] = v
    p = tmp_path / name
    fits.PrimaryHDU(np.arange(n, dtype=np.float32) + 1, header=hdr).writeto(p)
    return p


@pytest.mark.parametrize(("cards", "first", "step_or_ratio", "medium"), [
    ({"CRVAL1": 500.0, "CDELT1": 0.1, "CRPIX1": 1, "CUNIT1": "nm", "CTYPE1": "WAVE"}, 5000.0, 1.0, "unknown"),
    ({"CRVAL1": 1.5, "CD1_1": 0.001, "CRPIX1": 11, "CUNIT1": "um", "CTYPE1": "WAVE"}, 14900.0, 10.0, "unknown"),
    ({"CRVAL1": 3.6, "CDELT1": 1e-4, "CRPIX1": 1, "CTYPE1": "WAVE-LOG"}, 10 ** 3.6, None, "unknown"),
    ({"CRVAL1": 3.6, "CDELT1": 1e-4, "CRPIX1": 1, "CTYPE1": "LINEAR", "DC_FLAG": 1}, 10 ** 3.6, None, "unknown"),
    ({"CRVAL1": 6000.0, "CDELT1": 2.0, "CTYPE1": "AWAV"}, 6000.0, 2.0, "air"),
    ({"CRVAL1": 6000.0, "CDELT1": 2.0, "VACUUM": True}, 6000.0, 2.0, "vacuum"),
])
def test_image_wcs_variants(tmp_path, cards, first, step_or_ratio, medium):
    s = read_spectrum(_image(tmp_path, "img.fits", **cards))
    assert s.meta.format == "generic-image"
    assert s.wavelength[0] == pytest.approx(first, rel=1e-9)
    if step_or_ratio is None:
        np.testing.assert_allclose(np.diff(np.log10(s.wavelength)), 1e-4, rtol=1e-6)
    else:
        np.testing.assert_allclose(np.diff(s.wavelength), step_or_ratio, rtol=1e-9)
    assert s.medium == medium


@pytest.mark.parametrize(("cards", "reason"), [
    ({"CRVAL1": 1.4e9, "CDELT1": 1e3, "CTYPE1": "FREQ", "CUNIT1": "Hz"}, r"non-wavelength spectral axis FREQ \(Hz\)"),
    ({"CRVAL1": 0.0, "CDELT1": 1.0, "CTYPE1": "VELO-LSR", "CUNIT1": "km/s"}, "non-wavelength spectral axis VELO-LSR"),
    ({"CRVAL1": 10.0, "CDELT1": 0.0, "CTYPE1": "WAVE"}, "degenerate wavelength axis"),
    ({"CRVAL1": 10.0, "CDELT1": 1.0, "CTYPE1": "WAVE", "CUNIT1": "furlong"}, "'furlong' is not a wavelength unit"),
])
def test_image_axes_refused(tmp_path, cards, reason):
    with pytest.raises(SpectrumReadError, match=reason):
        read_spectrum(_image(tmp_path, "bad.fits", **cards))


def test_one_row_per_pixel_table_with_units(tmp_path):
    n = 30
    wave = np.linspace(400, 700, n)
    cols = [fits.Column("lambda", "D", unit="nm", array=wave), fits.Column("flux", "E", array=np.ones(n)),
            fits.Column("sigma", "E", array=np.full(n, 0.5)), fits.Column("quality", "J", array=np.r_[1, [0] * (n - 1)])]
    p = tmp_path / "pixels.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(p)
    s = read_spectrum(p)
    assert identify(p) == "generic-table" and s.n_pixels == n
    assert s.wavelength[0] == pytest.approx(4000) and s.wavelength[-1] == pytest.approx(7000)
    np.testing.assert_allclose(s.ivar, 4.0)
    assert s.mask.tolist() == [True] + [False] * (n - 1)


def test_vo_utypes_pick_the_columns(tmp_path):
    n = 20
    cols = [fits.Column("X", "20E", unit="Angstrom", array=np.linspace(5000, 5019, n)[None]),
            fits.Column("Y", "20E", array=np.arange(n, dtype=float)[None])]
    hdu = fits.BinTableHDU.from_columns(cols, name="SPECTRUM")
    hdu.header["TUTYP1"] = "spec:Data.SpectralAxis.Value"
    hdu.header["TUTYP2"] = "spec:Data.FluxAxis.Value"
    p = tmp_path / "vo.fits"
    fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(p)
    s = read_spectrum(p)
    assert s.wavelength[0] == 5000 and s.flux[-1] == 19 and s.ivar is None

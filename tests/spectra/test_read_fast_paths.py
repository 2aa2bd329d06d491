"""Fast paths of the readers (lazy header decoding, single-HDU error files, lazy S/N) give the same results."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from astropy.io import fits

from speco3.spectra import read_spectra
from speco3.spectra._common import ivar_from_sigma, median_snr
from speco3.spectra.model import Deferred, SpectrumMeta
from speco3.spectra.source import FastHeader


def _values_match(fast: FastHeader, header: fits.Header) -> int:
    checked = 0
    for key, value in fast.items():
        try:
            expected = header[key]
        except (fits.VerifyError, ValueError, KeyError):
            continue
        if isinstance(expected, float):
            assert value == pytest.approx(expected, rel=1e-12), key
        elif isinstance(expected, str):
            assert value == expected.rstrip(), key
        else:
            assert value == expected, key
        checked += 1
    return checked


def test_raw_header_text_decodes_like_astropy(tmp_path):
    """from_string (the unparsed-header path) handles long CONTINUE strings, D exponents, quotes, duplicates."""
    h = fits.Header()
    h["OBJECT"] = "O'Brien's star"
    h["LONGSTR"] = "a very long value " * 8  # written as 'part&' + CONTINUE cards
    h["EXPTIME"] = 1200.5
    h["NCOMBINE"] = -3
    h["VACUUM"] = False
    h.append(("DUP", 1))
    h.append(("DUP", 2))
    fits.PrimaryHDU(np.zeros(4, ">f4"), header=h).writeto(tmp_path / "x.fits")
    text = (tmp_path / "x.fits").read_bytes()[:2880 * 2].decode("ascii")
    fast = FastHeader.from_string(text)
    with fits.open(tmp_path / "x.fits") as hdul:
        assert _values_match(fast, hdul[0].header) >= 8
    assert fast["LONGSTR"] == ("a very long value " * 8).rstrip()
    assert fast["DUP"] == 1 and fast.get("MISSING", "d") == "d" and "END" not in fast


def test_header_values_decoded_on_lookup_only():
    fast = FastHeader.from_string("".join(c.ljust(80) for c in ("CRVAL1  =   3.5D2 / start", "BAD     = 1.2.3", "END")))
    assert type(dict.__getitem__(fast, "CRVAL1")).__name__ == "_Raw"  # not decoded yet
    assert fast["CRVAL1"] == 350.0 and dict.__getitem__(fast, "CRVAL1") == 350.0
    assert fast.get("BAD") == "1.2.3"  # malformed cards keep their raw text
    assert fast.to_dict() == {"CRVAL1": 350.0, "BAD": "1.2.3"}


def test_unparsed_extension_header_path_matches_astropy(spectra_dir):
    """Extension HDUs of real files reach FastHeader before astropy parses them (the raw-text path)."""
    checked = raw = 0
    for path in sorted(spectra_dir.rglob("*.fit*")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fits.open(path, lazy_load_hdus=True) as hdul:
                for hdu in list(hdul)[1:]:  # (astropy parses binary-table headers itself)
                    raw += isinstance(hdu.__dict__.get("_header_str"), str)
                    fast = FastHeader.from_hdu(hdu)
                    checked += _values_match(fast, hdu.header)
    assert raw >= 50 and checked >= 3000


def test_error_file_gives_ivar_equal_to_astropy_sigma(spectra_path):
    flux_file = spectra_path("generic/UM184_nF.fits")
    spec = read_spectra(flux_file)[0]
    sigma = fits.getdata(flux_file.with_name("UM184_nE.fits")).astype(np.float64)
    expected = np.zeros_like(sigma)
    ok = np.isfinite(sigma) & (sigma > 0) & (sigma < 1e9)
    expected[ok] = 1.0 / (sigma[ok] * sigma[ok])
    assert spec.meta.extra["error_file"] == "UM184_nE.fits"
    assert np.array_equal(spec.ivar, expected)


def test_error_file_on_another_grid_or_damaged_is_ignored(tmp_path):
    hdr = {"CRVAL1": 4000.0, "CDELT1": 2.0, "CRPIX1": 1.0}
    flux = fits.PrimaryHDU(np.ones(50, ">f4"))
    flux.header.update(hdr)
    flux.writeto(tmp_path / "s_F.fits")
    other = fits.PrimaryHDU(np.ones(40, ">f4"))
    other.header.update(hdr)
    other.writeto(tmp_path / "s_E.fits")
    spec = read_spectra(tmp_path / "s_F.fits")[0]
    assert spec.ivar is None and "error_file" not in spec.meta.extra
    (tmp_path / "s_E.fits").write_bytes(b"SIMPLE  =                    T" + b"\0" * 100)
    assert read_spectra(tmp_path / "s_F.fits")[0].ivar is None


def test_ivar_from_sigma_in_place_equals_copy():
    sigma = np.array([1.0, 2.0, 0.0, -1.0, np.nan, np.inf, 2e9, 0.5])
    copy = ivar_from_sigma(sigma)
    assert np.array_equal(sigma[:2], [1.0, 2.0])  # the default leaves the input alone
    inplace = ivar_from_sigma(sigma, overwrite=True)
    assert inplace is sigma and np.array_equal(inplace, copy)
    assert np.array_equal(copy, [1.0, 0.25, 0, 0, 0, 0, 0, 4.0])


def test_snr_estimate_is_lazy_and_resolves_everywhere(spectra_path):
    spec = read_spectra(spectra_path("generic/UM184_nF.fits"))[0]
    assert isinstance(spec.meta.__dict__["snr"], Deferred)
    expected = median_snr(spec.wavelength, spec.flux, spec.ivar, spec.mask)
    clone = pickle.loads(pickle.dumps(spec.meta))  # pickling resolves the estimate
    assert clone.snr == expected and not isinstance(clone.__dict__["snr"], Deferred)
    assert spec.meta.to_dict()["snr"] == expected == spec.meta.snr
    assert "survey_snr" not in spec.meta.extra  # the file states none
    meta = SpectrumMeta(snr=3.0)
    assert meta.snr == 3.0 and SpectrumMeta().snr is None


@pytest.mark.parametrize("kind", ["float32", "int16", "scaled", "truncated"])
def test_error_file_read_from_raw_bytes_or_by_astropy_gives_astropy_sigma(tmp_path, kind):
    """Plain error images are read from their bytes; scaled ones go through astropy; a short file gives no σ."""
    hdr = {"CRVAL1": 3.6, "CDELT1": 1e-4, "CRPIX1": 1.0, "DC-FLAG": 1}
    flux = fits.PrimaryHDU(np.full(300, 5.0, ">f4"))
    flux.header.update(hdr)
    flux.writeto(tmp_path / "x_nF.fits")
    sigma = np.linspace(0.5, 3.0, 300)
    sigma[7] = -1.0  # a bad pixel: ivar 0
    err = fits.PrimaryHDU(sigma.astype(">i2" if kind == "int16" else ">f4"))
    if kind == "scaled":
        err = fits.PrimaryHDU(np.round(sigma * 100).astype(">i2"))
        err.header["BSCALE"], err.header["BZERO"] = 0.01, 0.0
    err.header.update(hdr)
    err.writeto(tmp_path / "x_nE.fits")
    if kind == "truncated":
        raw = (tmp_path / "x_nE.fits").read_bytes()
        (tmp_path / "x_nE.fits").write_bytes(raw[:2880 + 100])
    spec = read_spectra(tmp_path / "x_nF.fits")[0]
    if kind == "truncated":
        assert spec.ivar is None and "error_file" not in spec.meta.extra
        return
    with fits.open(tmp_path / "x_nE.fits") as h:
        expected = ivar_from_sigma(np.asarray(h[0].data, dtype=np.float64))
    assert spec.meta.extra["error_file"] == "x_nE.fits"
    assert np.array_equal(spec.ivar, expected) and spec.ivar[7] == 0


def test_log_linear_grid_matches_numpy_power():
    from speco3.spectra._common import pow10_grid

    for n in (1, 50, 65, 3909, 16582, 21059):
        for start, step in ((3.48320848395, 3.18703100992e-05), (3.5682, 1e-4), (0.5, -1e-5)):
            got, ref = pow10_grid(start, step, n), np.power(10.0, start + step * np.arange(n))
            assert got.shape == ref.shape and np.allclose(got, ref, rtol=4e-15, atol=0), (n, start, step)

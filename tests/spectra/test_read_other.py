"""Files of other instruments (``other/``): which read, with what, and which fail with which reason."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra import read_file, read_spectra

READ = [
    ("other/AAO.fits", "iraf-multispec", 51, 2746, 8286.3, 8415.1, "TW Hya"),
    # file, format, n spectra, pixels of #0, λmin, λmax, object id
    ("other/BD60596_merged.fits", "spextool", 1, 7278, 9103.5, 24709.5, None),
    ("other/apStar-r6-2M00452143+1634446.fits", "apogee-apstar", 5, 8575, 15100.8, 16999.8, "2M00452143+1634446"),
    ("other/apStar-r6-2M03290406+3117075.fits", "apogee-apstar", 1, 8575, 15100.8, 16999.8, "2M03290406+3117075"),
    ("other/apVisit-2M00452143+1634446-0.fits", "apogee-apvisit", 1, 12288, 15142.3, 16954.6, "2M00452143+1634446"),
    ("other/emlLinearSkyAirNoHelio.fits", "aaomega-2df", 1, 5037, 3753.6, 8979.2, "D0221394-2854323"),
    ("other/emlLogVacuumHelioMultiple.fits", "aaomega-2df", 3, 5037, 3754.7, 8981.7, "D0221394-2854323"),
    ("other/multispec_equispec.fits", "iraf-multispec", 2, 1024, 14740.3, 18418.9, "HR4659"),
    ("other/odbue5030_x1d.fits", "generic-table", 40, 1024, 2327.7, 2366.7, "BD+28D4211"),
    ("other/quasarLinearSkyAirNoHelio.fits", "aaomega-2df", 1, 4938, 3733.3, 8856.6, "SVA1_COADD-2939496406"),
    ("other/spec1d.1245.066.12004136.fits", "generic-table", 4, 4096, 6485.9, 7811.7, None),
]
FAIL = [
    ("generic/gbt_1d.fits", r"non-wavelength spectral axis VRAD \(km/s\)"),
]


@pytest.mark.parametrize(("rel", "fmt", "count", "npix", "wmin", "wmax", "obj"), READ, ids=[r[0] for r in READ])
def test_other_files_that_read(spectra_path, rel, fmt, count, npix, wmin, wmax, obj):
    contents = read_file(spectra_path(rel))
    assert contents.format == fmt
    assert len(contents.spectra) == count
    s = contents.spectra[0]
    assert s.n_pixels == npix
    assert (s.wavelength[0], s.wavelength[-1]) == pytest.approx((wmin, wmax), abs=1.0)
    assert s.meta.object_id == obj
    assert not s.is_empty


@pytest.mark.parametrize(("rel", "reason"), FAIL, ids=[f[0] for f in FAIL])
def test_other_files_that_fail_with_a_reason(spectra_path, rel, reason):
    with pytest.raises(SpectrumReadError, match=reason) as err:
        read_spectra(spectra_path(rel))
    assert err.value.path.endswith(rel.split("/")[1])


def test_2df_variance_fibres_and_medium(spectra_path):
    air = read_spectra(spectra_path("other/emlLinearSkyAirNoHelio.fits"))[0]
    assert air.medium == "air"
    with fits.open(spectra_path("other/emlLinearSkyAirNoHelio.fits")) as h:
        var = h["VARIANCE"].data.astype(float)
        ra_rad = float(h["FIBRES"].data["RA"][0])
    ok = var > 0
    np.testing.assert_allclose(air.ivar[ok], 1 / var[ok], rtol=1e-6)
    assert air.meta.ra == pytest.approx(np.degrees(ra_rad))
    vac = read_spectra(spectra_path("other/emlLogVacuumHelioMultiple.fits"))
    assert vac[0].medium == "vacuum" and vac[0].meta.extra["wavelength_source"] == "WAVELENGTH HDU"
    assert [s.meta.object_id for s in vac] == ["D0221394-2854323", "W0220429-2922320", "C0220588-2916118"]


def test_apogee_visits_and_chip_order(spectra_path):
    star = read_spectra(spectra_path("other/apStar-r6-2M00452143+1634446.fits"))
    assert [s.meta.note.split(" (")[0] for s in star[:2]] == ["combined spectrum"] * 2
    assert star[2].meta.note == "visit 1 of 3"
    np.testing.assert_allclose(np.diff(np.log10(star[0].wavelength)), 6e-6, rtol=1e-6)
    visit = read_spectra(spectra_path("other/apVisit-2M00452143+1634446-0.fits"))[0]
    assert np.all(np.diff(visit.wavelength) > 0)  # chips joined and reversed to ascending


def test_stis_echelle_orders_and_deimos_arms(spectra_path):
    orders = read_spectra(spectra_path("other/odbue5030_x1d.fits"))
    assert [o.meta.extra["sporder"] for o in orders[:3]] == [87, 88, 89]
    assert min(o.wavelength[0] for o in orders) == pytest.approx(1607, abs=2)
    assert orders[0].flux_unit == "erg/s/cm**2/Angstrom"
    deimos = read_spectra(spectra_path("other/spec1d.1245.066.12004136.fits"))
    assert [d.meta.hdu for d in deimos] == ["Bxspf-B", "Bxspf-R", "Horne-B", "Horne-R"]
    assert deimos[1].wavelength[-1] == pytest.approx(9111, abs=2)


def test_spextool_micron_axis(spectra_path):
    s = read_spectra(spectra_path("other/BD60596_merged.fits"))[0]
    assert s.meta.extra["xunits"] == "um" and s.flux_unit == "ergss-1cm-2A-1" and s.ivar is not None


def test_iraf_multispec_chebyshev_orders(spectra_path):
    orders = read_spectra(spectra_path("other/AAO.fits"))
    # WAT2 spec1 = "1 68 2 8415.1380351321 -0.04694938011105 2746 ...": the Chebyshev function must land on
    # w1 at pixel 1 and on w1 + dw·(nw-1) at the last pixel
    assert orders[0].wavelength[-1] == pytest.approx(8415.1380351321, abs=1e-6)
    assert orders[0].wavelength[0] == pytest.approx(8415.1380351321 - 0.04694938011105 * 2745, abs=1e-6)
    assert [o.meta.extra["beam"] for o in (orders[0], orders[-1])] == [68, 118]
    assert orders[-1].wavelength[0] == pytest.approx(4780.3, abs=0.1)


def test_iraf_multispec_spline_refused(tmp_path):
    p = tmp_path / "spline.fits"
    h = fits.Header()
    h["CTYPE1"], h["CTYPE2"] = "MULTISPE", "MULTISPE"
    h["WAT0_001"] = "system=multispec"
    h["WAT1_001"] = "wtype=multispec label=Wavelength units=angstroms"
    text = 'wtype=multispec spec1 = "1 1 2 5000. 1. 10 0. 0. 10. 1. 0. 3 2 1. 10. 1. 2."'
    h["WAT2_001"], h["WAT2_002"] = text[:68], text[68:]  # IRAF splits values at 68 characters
    fits.PrimaryHDU(np.ones((1, 10), np.float32), header=h).writeto(p)
    with pytest.raises(SpectrumReadError, match=r"dtype 2, cubic spline function\) not supported"):
        read_spectra(p)


def test_iraf_multispec_linear_apertures(spectra_path):
    aps = read_spectra(spectra_path("other/multispec_equispec.fits"))
    assert [a.meta.extra["aperture"] for a in aps] == [1, 2]
    assert np.diff(aps[0].wavelength)[0] == pytest.approx(3.5958949648134)
    assert aps[1].wavelength[0] == pytest.approx(19492.348956459)

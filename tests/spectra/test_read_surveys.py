"""Every shared LAMOST, SDSS, DESI and generic file reads with the values the file itself states."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra import identify, read_file, read_spectra

# (file, format, n spectra, pixels of #0, λmin, λmax of #0, object id, class, redshift)
CASES = [
    ("lamost/med-58268-HIP95119KP01_sp12-076.fits.gz", "lamost-mrs", 20, 4151, 4899.8, 5391.1, "666212076", None, None),
    ("lamost/med-58408-TD230151N343645T01_sp01-015.fits", "lamost-mrs", 16, 4101, 4894.0, 5378.5, "681001015", None, None),
    ("lamost/med-58625-TD192102N424113K01_sp12-076.fits.gz", "lamost-mrs", 8, 4156, 4898.1, 5389.9, "744812076", None, None),
    ("lamost/spec-55859-F5902_sp01-001.fits.gz", "lamost-lrs", 1, 3908, 3700.0, 9097.0, "101001", "STAR", -0.0001387),
    ("lamost/spec-55859-F5902_sp01-001_dr7.fits.gz", "lamost-lrs-old", 1, 3908, 3700.0, 9097.0, "101001", "STAR", -0.0001387),
    ("lamost/spec-55859-F5902_sp01-002.fits.gz", "lamost-lrs", 1, 3908, 3700.0, 9097.0, "101002", "STAR", 0.00011917),
    ("lamost/spec-55859-F5902_sp01-005.fits.gz", "lamost-lrs", 1, 3908, 3700.0, 9097.0, "101005", "STAR", -0.00025064),
    ("lamost/spec-55859-F5902_sp01-012.fits.gz", "lamost-lrs", 1, 3908, 3700.0, 9097.0, "101012", "STAR", -1.826e-05),
    ("lamost/spec-55859-F5902_sp01-013_dr8.fits.gz", "lamost-lrs", 1, 3908, 3700.0, 9097.0, "101013", "STAR", -0.00106647),
    ("lamost/spec-58397-EG014118N254444M01_sp03-031.fits", "lamost-lrs-old", 1, 3909, 3700.0, 9099.1, "677503031", "STAR", -6.4e-06),
    ("lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz", "lamost-lrs", 1, 3909, 3700.0, 9099.1, "1247301001", "STAR", 4.19e-05),
    ("lamost/spec-60591-LN042429N340750BM01_sp01-004.fits.gz", "lamost-lrs", 1, 3909, 3700.0, 9099.1, "1247301004", "STAR", 4.916e-05),
    ("sdss/SDSSJ220248.31+123656.3.fits", "sdss-repackaged", 1, 4646, 3553.9, 10356.2, "5063-55831", None, None),
    ("sdss/SIIdoublet.fits", "sdss-spspec", 1, 3851, 3800.1, 9221.5, "0750-52235-0459", "GALAXY", 0.020016),
    ("sdss/sample_sdss.fits", "sdss-spspec", 1, 3853, 3798.4, 9221.5, "1307-52999-0323", "GALAXY", 0.0410313),
    ("sdss/spec-0266-51602-0107.fits", "sdss-spec", 1, 3849, 3789.7, 9191.8, "0266-51602-0107", "GALAXY", 0.12315),
    ("sdss/spec-0266-51602-0638.fits", "sdss-spec", 1, 3813, 3829.1, 9210.9, "0266-51602-0638", "GALAXY", 0.10980),
    ("sdss/spec-0269-51581-0003.fits", "sdss-spec", 1, 3872, 3772.2, 9198.1, "0269-51581-0003", "GALAXY", 0.0),
    ("sdss/spec-0280-51612-0117.fits", "sdss-spec", 1, 3848, 3792.3, 9196.0, "0280-51612-0117", "QSO", 0.24457),
    ("sdss/spec-0295-51585-0596.fits", "sdss-spec", 1, 3844, 3789.7, 9181.2, "0295-51585-0596", "GALAXY", 0.13788),
    ("sdss/spec-0332-52367-0639.fits", "sdss-spec", 1, 3810, 3829.1, 9204.5, "0332-52367-0639", "QSO", 0.10061),
    ("sdss/spec-1931-53358-0251.fits", "sdss-spec", 1, 2866, 3800.1, 7350.2, "1931-53358-0251", "QSO", 1.18846),
    ("sdss/spec-7338-57859-0739.fits", "sdss-spec", 1, 4565, 3614.1, 10337.1, "7338-57859-0739", "QSO", 0.45647),
    ("desi/coadd-4-80613-thru20210324.fits", "desi", 1, 7781, 3600.0, 9824.0, "39633345008634465", "GALAXY", 0.36874),
    ("desi/coadd-5-169-thru20210419.fits", "desi", 2, 7781, 3600.0, 9824.0, "39633297352951412", None, None),
    ("desi/coadd-sv3-dark-26065.fits", "desi", 3, 7781, 3600.0, 9824.0, "39627866878511337", None, None),
    ("desi/spectra-5-169-thru20210419.fits", "desi", 2, 7781, 3600.0, 9824.0, "39633297352951412", None, None),
    ("desi/spectra-sv3-dark-26065.fits", "desi", 3, 7781, 3600.0, 9824.0, "39627866878511337", None, None),
    ("generic/L5g_0355+11_Cruz09.fits", "generic-image", 1, 3020, 6100.0, 10250.0, "U20171", None, None),
    ("generic/NGC4151sic2a.fits", "generic-table", 1, 6694, 917.2, 1005.5, None, None, None),
    ("generic/PH957_e.fits", "generic-image", 1, 21059, 3811.5, 10931.6, "q0100p13 (Error) [div]", None, None),
    ("generic/PH957_f.fits", "generic-image", 1, 21059, 3811.5, 10931.6, "q0100p13 [div]", None, None),
    ("generic/UM184_nE.fits", "generic-image", 1, 16582, 3042.3, 10271.9, "UM184", None, None),
    ("generic/UM184_nF.fits", "generic-image", 1, 16582, 3042.3, 10271.9, "UM184", None, None),
    ("generic/UVES.fits", "generic-image", 1, 42751, 3732.1, 4999.7, "RED_SCI_POINT_BLUE", None, None),
    ("generic/XShooter_XQ100.fits.gz", "generic-table", 1, 9771, 9817.5, 18235.0, "BR J2349-3712", None, None),
]


@pytest.mark.parametrize(("rel", "fmt", "count", "npix", "wmin", "wmax", "obj", "cls", "z"), CASES,
                         ids=[c[0] for c in CASES])
def test_reads_file_values(spectra_path, rel, fmt, count, npix, wmin, wmax, obj, cls, z):
    path = spectra_path(rel)
    assert identify(path) == fmt
    specs = read_spectra(path)
    assert len(specs) == count
    s = specs[0]
    assert s.n_pixels == npix
    assert s.wavelength[0] == pytest.approx(wmin, abs=1.0)
    assert s.wavelength[-1] == pytest.approx(wmax, abs=1.0)
    assert np.all(np.diff(s.wavelength) > 0)
    assert s.meta.object_id == obj
    assert s.meta.cls == cls
    if z is None:
        assert s.meta.redshift is None
    else:
        assert s.meta.redshift == pytest.approx(z, abs=5e-6)
    for i, spec in enumerate(specs):
        m = spec.meta
        assert (m.index, m.format, m.file_name, m.path) == (i, fmt, path.name, str(path.resolve()))
        assert m.survey is not None


def test_gbt_velocity_axis_is_refused(spectra_path):
    with pytest.raises(SpectrumReadError, match=r"non-wavelength spectral axis VRAD \(km/s\)") as err:
        read_spectra(spectra_path("generic/gbt_1d.fits"))
    assert err.value.path.endswith("gbt_1d.fits")


def test_lamost_old_and_new_layouts_of_obsid_101001_agree(spectra_path):
    old = read_spectra(spectra_path("lamost/spec-55859-F5902_sp01-001_dr7.fits.gz"))[0]
    new = read_spectra(spectra_path("lamost/spec-55859-F5902_sp01-001.fits.gz"))[0]
    assert old.meta.data_release == "LAMOST DR7" and new.meta.data_release == "LAMOST DR9"
    np.testing.assert_allclose(old.wavelength, new.wavelength, rtol=1e-6)
    np.testing.assert_array_equal(old.flux, new.flux)
    np.testing.assert_array_equal(old.ivar, new.ivar)
    for key in ("object_id", "cls", "subclass", "redshift", "ra", "dec", "snr"):
        assert getattr(old.meta, key) == getattr(new.meta, key)
    assert old.meta.subclass == "G7" and old.meta.extra["survey_snr"] == pytest.approx(12.22)
    assert old.meta.extra["survey_snr_name"] == "SNRG"
    assert old.medium == "vacuum" and old.flux_unit == ""


def test_lamost_old_layout_grid_from_coeff_not_ctype(spectra_path):
    path = spectra_path("lamost/spec-58397-EG014118N254444M01_sp03-031.fits")
    s = read_spectra(path)[0]
    with fits.open(path) as h:
        row2 = h[0].data[2].astype(float)
        assert h[0].header["CTYPE1"].strip() == "LINEAR"
    np.testing.assert_allclose(s.wavelength, row2, rtol=1e-6)
    assert s.meta.extra["survey_snr"] == pytest.approx(153.72) and s.meta.subclass == "G3"


def test_lamost_mrs_arms_and_exposures(spectra_path):
    path = spectra_path("lamost/med-58408-TD230151N343645T01_sp01-015.fits")
    specs = read_spectra(path)
    assert [s.meta.hdu for s in specs[:2]] == ["COADD_B", "COADD_R"]
    assert specs[1].n_pixels == 3692
    assert specs[1].wavelength[[0, -1]] == pytest.approx([6292.45, 6850.62], abs=0.01)
    assert specs[1].meta.extra["survey_snr"] == pytest.approx(280.75)
    assert [s.meta.hdu[:2] for s in specs[2:]] == ["B-"] * 7 + ["R-"] * 7
    assert all(s.meta.cls is None and s.meta.redshift is None for s in specs)
    assert specs[0].meta.extra["survey_snr"] == pytest.approx(120.75, abs=0.01)
    assert specs[0].medium == "vacuum"


def test_sdss_spec_metadata_and_empty_spectrum(spectra_path):
    qso = read_spectra(spectra_path("sdss/spec-0280-51612-0117.fits"))[0]
    assert (qso.meta.subclass, qso.meta.redshift_source) == ("AGN BROADLINE", "SPECOBJ")
    assert qso.meta.ra == pytest.approx(171.25266, abs=1e-4)  # PLUG_RA, not the plate boresight
    assert qso.flux_unit == "1E-17 erg/cm^2/s/Ang" and qso.medium == "vacuum"
    boss = read_spectra(spectra_path("sdss/spec-7338-57859-0739.fits"))[0]
    assert boss.meta.redshift_source == "SPALL" and boss.meta.data_release == "run2d v5_13_2"
    assert boss.meta.extra["layout"] == "full"
    empty = read_spectra(spectra_path("sdss/spec-0269-51581-0003.fits"))[0]
    assert empty.is_empty and empty.masked_fraction == 1.0
    assert "all pixels masked" in empty.meta.note
    assert empty.n_pixels == 3872


def test_spspec_sigma_becomes_ivar(spectra_path):
    path = spectra_path("sdss/sample_sdss.fits")
    s = read_spectra(path)[0]
    with fits.open(path) as h:
        sigma = h[0].data[2].astype(float)
    ok = sigma > 0
    np.testing.assert_allclose(s.ivar[ok], 1.0 / sigma[ok] ** 2, rtol=1e-6)
    assert np.all(s.ivar[~ok] == 0) and np.all(s.mask[~ok])
    assert s.meta.subclass is None and s.meta.extra["spec_cln"] == 2


def test_repackaged_sdss_mask_is_good_pixel_mask(spectra_path):
    s = read_spectra(spectra_path("sdss/SDSSJ220248.31+123656.3.fits"))[0]
    assert s.meta.extra["mask_convention"] == "1=good"
    assert s.masked_fraction == pytest.approx(121 / 4646, abs=1e-3)


def test_desi_targets_skipped_fibres_and_redrock_join(spectra_path):
    contents = read_file(spectra_path("desi/coadd-sv3-dark-26065.fits"))
    assert [s.meta.object_id for s in contents.spectra] == ["39627866878511337", "616088619186127404",
                                                              "39627866878514741"]
    assert [what for what, _ in contents.skipped] == ["row 0, TARGETID -2713437", "row 1, TARGETID -2713415"]
    assert all("unassigned fibre" in why for _, why in contents.skipped)
    assert contents.spectra[1].meta.note.startswith("sky fibre")
    tile = read_file(spectra_path("desi/coadd-5-169-thru20210419.fits"))
    assert len(tile.spectra) == 2 and len(tile.skipped) == 3
    joined = read_file(spectra_path("desi/coadd-4-80613-thru20210324.fits"))
    m = joined.spectra[0].meta
    assert (m.redshift_source, m.cls) == ("redrock", "GALAXY")
    assert m.redshift == pytest.approx(0.36874, abs=1e-5)
    assert m.extra["zwarn"] == 0 and m.extra["redrock_file"] == "redrock-4-80613-thru20210324.fits"
    assert any(d.endswith("redrock-4-80613-thru20210324.fits") for d in joined.depends_on)


def test_desi_arms_merged_without_double_counting(spectra_path):
    path = spectra_path("desi/coadd-4-80613-thru20210324.fits")
    s = read_spectra(path)[0]
    with fits.open(path) as h:
        wb, fb, ib = h["B_WAVELENGTH"].data, h["B_FLUX"].data[0].astype(float), h["B_IVAR"].data[0].astype(float)
        wr, fr, ir = h["R_WAVELENGTH"].data, h["R_FLUX"].data[0].astype(float), h["R_IVAR"].data[0].astype(float)
        mb, mr = h["B_MASK"].data[0], h["R_MASK"].data[0]
    step = np.diff(s.wavelength)
    np.testing.assert_allclose(step, 0.8, atol=1e-3)  # one pixel per lattice point, no duplicates
    assert s.n_pixels == 7781
    # a blue-only pixel is the B value
    i = int(np.argmin(np.abs(s.wavelength - 4500.0)))
    j = int(np.argmin(np.abs(wb - 4500.0)))
    assert s.flux[i] == pytest.approx(fb[j], rel=1e-6)
    # an overlap pixel is the ivar-weighted mean of B and R, with summed ivar
    lam = 5780.0
    i, jb, jr = (int(np.argmin(np.abs(a - lam))) for a in (s.wavelength, wb, wr))
    assert abs(wb[jb] - wr[jr]) < 1e-3
    wgt_b = ib[jb] if mb[jb] == 0 else 0.0
    wgt_r = ir[jr] if mr[jr] == 0 else 0.0
    assert s.ivar[i] == pytest.approx(wgt_b + wgt_r, rel=1e-6)
    assert s.flux[i] == pytest.approx((wgt_b * fb[jb] + wgt_r * fr[jr]) / (wgt_b + wgt_r), rel=1e-6)


def test_desi_spectra_file_with_compressed_masks_matches_coadd_grid(spectra_path):
    s = read_spectra(spectra_path("desi/spectra-sv3-dark-26065.fits"))
    assert len(s) == 3 and s[0].meta.extra["kind"] == "spectra"
    assert 0 < s[0].masked_fraction < 0.05


def test_generic_wcs_variants(spectra_path):
    um = read_spectra(spectra_path("generic/UM184_nF.fits"))[0]
    step = np.diff(np.log10(um.wavelength))
    np.testing.assert_allclose(step, 3.18703100992e-05, rtol=1e-6)  # DC-FLAG=1: log-linear
    assert um.meta.extra["error_file"] == "UM184_nE.fits" and um.ivar is not None
    err = read_spectra(spectra_path("generic/UM184_nE.fits"))[0]
    assert err.meta.extra["role"] == "error" and "UM184_nF.fits" in err.meta.note
    uves = read_spectra(spectra_path("generic/UVES.fits"))[0]
    assert np.diff(uves.wavelength)[0] == pytest.approx(0.0296533834852385)
    assert uves.flux_unit == "ADU"
    l5 = read_spectra(spectra_path("generic/L5g_0355+11_Cruz09.fits"))[0]  # needs silentfix
    assert l5.flux_unit == "erg/cm2/s/A" and l5.meta.extra["instrume"] == "GMOS-N"
    xq = read_spectra(spectra_path("generic/XShooter_XQ100.fits.gz"))[0]  # nm -> Å
    assert xq.wavelength[0] == pytest.approx(9817.5, abs=1) and xq.ivar is not None
    ph = read_spectra(spectra_path("generic/PH957_f.fits"))[0]
    assert ph.meta.ra == pytest.approx(15.139167, abs=1e-5) and ph.meta.dec == pytest.approx(13.002778, abs=1e-5)

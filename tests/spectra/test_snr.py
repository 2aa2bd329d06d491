"""One S/N definition across surveys (issue #44): `SpectrumMeta.snr` is ours for every file, the survey's own figure
is kept beside it under its name, and the index filters and sorts by ours."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from speco3.spectra import ArchiveIndex, read_spectrum
from speco3.spectra.model import SNR_BAND, SNR_DEFINITION, SNR_LABEL

# (file, the survey's own S/N keyword, or None when the file states none)
FILES = [
    ("lamost/spec-55859-F5902_sp01-001.fits.gz", "SNRG"),
    ("lamost/spec-58397-EG014118N254444M01_sp03-031.fits", "SNRG"),
    ("lamost/med-58408-TD230151N343645T01_sp01-015.fits", "SNR"),
    ("sdss/spec-0332-52367-0639.fits", "SN_MEDIAN_ALL"),
    ("sdss/sample_sdss.fits", "SN_G"),
    ("desi/coadd-4-80613-thru20210324.fits", "MEDIAN_COADD_SNR_R"),
    ("other/apStar-r6-2M00452143+1634446.fits", "SNR"),
    ("generic/UM184_nF.fits", None),
]


def _ours(s) -> float:
    """The definition written out again: median flux·√ivar over the good pixels in 4000–8000 Å."""
    good = (s.ivar > 0) & ~s.mask & np.isfinite(s.flux)
    band = good & (s.wavelength >= 4000) & (s.wavelength <= 8000)
    use = band if band.sum() >= 50 else good
    return float(np.median(s.flux[use] * np.sqrt(s.ivar[use])))


@pytest.mark.parametrize("name,keyword", FILES, ids=[f.split("/")[1] for f, _ in FILES])
def test_every_survey_gets_our_snr_and_keeps_its_own(spectra_dir, name, keyword):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = read_spectrum(spectra_dir / name)
    assert s.meta.snr == pytest.approx(_ours(s), rel=1e-9)
    if keyword is None:
        assert "survey_snr" not in s.meta.extra
    else:
        assert s.meta.extra["survey_snr_name"] == keyword and np.isfinite(s.meta.extra["survey_snr"])


def test_the_survey_figures_differ_from_ours_so_they_are_kept_apart(spectra_dir):
    """LAMOST's SNRG is a g-band figure, DESI's a median in the r camera: on these files they differ from ours by
    more than 20 %, which is why the filter compares ours only."""
    lamost = read_spectrum(spectra_dir / "lamost/spec-55859-F5902_sp01-001.fits.gz")
    desi = read_spectrum(spectra_dir / "desi/coadd-4-80613-thru20210324.fits")
    for s in (lamost, desi):
        assert abs(s.meta.snr / s.meta.extra["survey_snr"] - 1) > 0.2


def test_a_spectrum_outside_the_band_uses_all_its_good_pixels(spectra_dir):
    s = read_spectrum(spectra_dir / "generic/XShooter_XQ100.fits.gz")  # 9818-18235 Å
    assert s.wavelength.min() > SNR_BAND[1] and s.meta.snr == pytest.approx(_ours(s))
    assert "4000–8000 Å" in SNR_LABEL and "computed by Spec-o3 for every survey" in SNR_DEFINITION


def test_the_index_filters_by_ours_and_keeps_the_survey_figure(tmp_path, spectra_dir):
    import shutil

    folder = tmp_path / "a"
    folder.mkdir()
    for name in ("lamost/spec-55859-F5902_sp01-001.fits.gz", "desi/coadd-4-80613-thru20210324.fits",
                 "desi/redrock-4-80613-thru20210324.fits", "sdss/spec-0332-52367-0639.fits"):
        shutil.copy(spectra_dir / name, folder)
    index = ArchiveIndex(tmp_path / "i.sqlite")
    index.scan(folder, workers=1)
    entries = {e.file_name: e for e in index.query()}
    lamost = entries["spec-55859-F5902_sp01-001.fits.gz"]
    assert lamost.snr == pytest.approx(18.39, abs=0.01) and lamost.survey_snr == pytest.approx(12.22)
    kept = {e.file_name for e in index.query(snr_min=15)}  # ours: LAMOST 18.4, SDSS 29.6, DESI 5.1
    assert kept == {"spec-55859-F5902_sp01-001.fits.gz", "spec-0332-52367-0639.fits"}

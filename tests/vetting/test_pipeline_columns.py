"""The survey pipeline's view travels with a spectrum (issue #44): class, subclass, z error, warning bits, redrock's
DELTACHI2 and the survey's own S/N are read per survey, stored beside the spectrum (table spectrum_pipeline, created
on open), exported in every format and kept by merge."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from astropy.table import Table

from speco3.spectra import read_spectrum
from speco3.spectra.model import PipelineFit, pipeline_fit
from speco3.vetting.export import export
from speco3.vetting.merge import merge_stores
from speco3.vetting.records import Decision, SpectrumInfo
from speco3.vetting.store import VettingStore

FITS = {
    "sdss/spec-0332-52367-0639.fits": ("QSO", "BROADLINE", PipelineFit(3.556e-05, 0, "ZWARNING", None)),
    "sdss/sample_sdss.fits": ("GALAXY", None, PipelineFit(7.544e-05, 0, "Z_WARNIN", None)),
    "desi/coadd-4-80613-thru20210324.fits": ("GALAXY", None, PipelineFit(1.18e-06, 0, "ZWARN", 150343.8)),
    "lamost/spec-55859-F5902_sp01-001.fits.gz": ("STAR", "G7", PipelineFit(2.408e-05, None, None, None)),
}


def _read(spectra_dir, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_spectrum(spectra_dir / name)


@pytest.mark.parametrize("name", list(FITS))
def test_pipeline_fit_per_survey(spectra_dir, name):
    s = _read(spectra_dir, name)
    cls, sub, want = FITS[name]
    fit = pipeline_fit(s.meta)
    assert (s.meta.cls, s.meta.subclass) == (cls, sub)
    assert fit.z_err == pytest.approx(want.z_err, rel=1e-3) and fit.zwarn == want.zwarn
    assert fit.zwarn_name == want.zwarn_name
    assert (fit.deltachi2 is None) == (want.deltachi2 is None)
    if want.deltachi2 is not None:
        assert fit.deltachi2 == pytest.approx(want.deltachi2, rel=1e-6)


@pytest.mark.parametrize("suffix,fmt", [("csv", "ascii.csv"), ("vot", "votable"), ("fits", "fits")])
def test_exports_and_merge_carry_the_pipeline_columns(spectra_dir, tmp_path, suffix, fmt):
    a, b = VettingStore(tmp_path / "a.sqlite"), VettingStore(tmp_path / "b.sqlite")
    keys = {}
    for store, name in ((a, "desi/coadd-4-80613-thru20210324.fits"), (b, "sdss/spec-0332-52367-0639.fits")):
        s = _read(spectra_dir, name)
        key = f"{spectra_dir / name}#0"
        keys[name] = key
        store.record_spectrum(SpectrumInfo.of(key, s))
        store.record_decision(Decision(key, "cv", "NO", vetter="Ana"))
    a.close()
    b.close()
    merged = tmp_path / "m.sqlite"
    merge_stores(merged, [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    store = VettingStore(merged)
    path = export(store, tmp_path / f"out.{suffix}")
    store.close()
    rows = {r["spectrum_key"]: r for r in Table.read(path, format=fmt)}
    desi = rows[keys["desi/coadd-4-80613-thru20210324.fits"]]
    assert desi["pipeline_class"] == "GALAXY" and desi["pipeline_zwarn"] == 0
    assert desi["pipeline_zwarn_name"] == "ZWARN" and desi["pipeline_deltachi2"] == pytest.approx(150343.77, rel=1e-6)
    assert desi["survey_snr_name"] == "MEDIAN_COADD_SNR_R" and desi["survey_snr"] == pytest.approx(6.98, abs=0.01)
    assert desi["snr"] == pytest.approx(5.11, abs=0.01)  # ours
    sdss = rows[keys["sdss/spec-0332-52367-0639.fits"]]
    assert sdss["pipeline_class"] == "QSO" and sdss["pipeline_subclass"] == "BROADLINE"
    assert sdss["pipeline_z_err"] == pytest.approx(3.556e-05, rel=1e-3) and sdss["pipeline_zwarn_name"] == "ZWARNING"
    assert np.ma.is_masked(sdss["pipeline_deltachi2"])


def test_the_index_holds_the_pipeline_columns(spectra_dir, tmp_path):
    import shutil

    from speco3.spectra import ArchiveIndex

    folder = tmp_path / "a"
    folder.mkdir()
    for name in ("desi/coadd-4-80613-thru20210324.fits", "desi/redrock-4-80613-thru20210324.fits",
                 "sdss/spec-0332-52367-0639.fits", "sdss/spec-0269-51581-0003.fits"):
        shutil.copy(spectra_dir / name, folder)
    index = ArchiveIndex(tmp_path / "i.sqlite")
    index.scan(folder, workers=1)
    e = {x.file_name: x for x in index.query(sort="zwarn")}
    assert e["spec-0269-51581-0003.fits"].zwarn == 6  # the empty spectrum: ZWARNING 6
    assert [x.file_name for x in index.query(zwarn_clean=False)] == ["spec-0269-51581-0003.fits"]
    assert index.count(zwarn_clean=True) == 2
    desi = e["coadd-4-80613-thru20210324.fits"]
    assert (desi.zwarn, desi.zwarn_name, round(desi.deltachi2)) == (0, "ZWARN", 150344)
    assert e["spec-0332-52367-0639.fits"].z_err == pytest.approx(3.556e-05, rel=1e-3)


def test_fits_text_is_a_documented_transliteration_csv_and_votable_keep_utf8(tmp_path):
    from speco3.vetting.export import fits_ascii

    assert fits_ascii("Hα broad, He II 4686 — café ✓ [O III]λ5007 ±2 Å") == \
        "Halpha broad, He II 4686 -- cafe \\u2713 [O III]lambda5007 +/-2 A"
    store = VettingStore(tmp_path / "s.sqlite")
    store.record_decision(Decision("/d/x.fits#0", "cv", "YES", comment="Hβ broad, Δv ≈ 3000 km/s", vetter="Zoë"))
    for suffix, fmt, comment, vetter in (("fits", "fits", "Hbeta broad, Deltav ~ 3000 km/s", "Zoe"),
                                         ("csv", "ascii.csv", "Hβ broad, Δv ≈ 3000 km/s", "Zoë"),
                                         ("vot", "votable", "Hβ broad, Δv ≈ 3000 km/s", "Zoë")):
        row = Table.read(export(store, tmp_path / f"o.{suffix}"), format=fmt)[0]
        assert (str(row["comment"]), str(row["vetter"])) == (comment, vetter), fmt
    store.close()

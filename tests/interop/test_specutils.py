"""specutils in and out: round trips on every real test file, foreign specutils spectra, the fallback reader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("specutils")

from speco3.errors import SpectrumReadError  # noqa: E402
from speco3.spectra import Spectrum, SpectrumMeta, read_file  # noqa: E402
from speco3.spectra.specutils_io import from_specutils, to_specutils  # noqa: E402


def _real_files(spectra_dir: Path) -> list[Path]:
    return sorted(p for p in spectra_dir.rglob("*") if p.is_file() and p.name.lower().endswith((".fits", ".fits.gz")))


def test_round_trip_every_real_file(spectra_dir):
    import astropy.units as u
    from astropy.nddata import InverseVariance

    files = _real_files(spectra_dir)
    assert len(files) >= 30
    n = 0
    for path in files:
        try:
            spectra = read_file(path).spectra
        except Exception:  # files our readers refuse on purpose are covered by the reader tests
            continue
        for spec in spectra:
            sp = to_specutils(spec)
            assert sp.spectral_axis.unit == u.AA, path
            np.testing.assert_array_equal(sp.spectral_axis.value, spec.wavelength, err_msg=str(path))
            np.testing.assert_array_equal(sp.flux.value, spec.flux)
            np.testing.assert_array_equal(sp.mask, spec.mask)
            if spec.ivar is not None:
                assert isinstance(sp.uncertainty, InverseVariance)
            if spec.meta.redshift is not None:
                assert sp.redshift.value == pytest.approx(spec.meta.redshift)
            back = from_specutils(sp)
            np.testing.assert_array_equal(back.wavelength, spec.wavelength)
            np.testing.assert_array_equal(back.flux, spec.flux)
            np.testing.assert_array_equal(back.mask, spec.mask)
            if spec.ivar is None:
                assert back.ivar is None
            else:
                expect = np.where(np.isfinite(spec.ivar) & (spec.ivar > 0), spec.ivar, 0.0)
                np.testing.assert_allclose(back.ivar, expect, rtol=1e-12)
            assert back.flux_unit == spec.flux_unit and back.medium == spec.medium
            for name in ("survey", "object_id", "ra", "dec", "redshift", "cls", "index", "format", "path"):
                assert getattr(back.meta, name) == getattr(spec.meta, name), (path, name)
            n += 1
    assert n >= 30


def test_from_a_foreign_specutils_spectrum():
    """A notebook's spectrum: frequency axis (descending in wavelength), σ errors, no Spec-o3 metadata."""
    import astropy.units as u
    from astropy.nddata import StdDevUncertainty

    from speco3.spectra.specutils_io import spectrum_class

    wave_aa = np.linspace(4000.0, 5000.0, 11)
    freq = (wave_aa[::-1] * u.AA).to(u.THz, equivalencies=u.spectral())  # ascending frequency
    flux = np.arange(11, dtype=float) * u.Unit("erg / (s cm2 Angstrom)")
    sigma = np.full(11, 2.0)
    sp = spectrum_class()(flux=flux, spectral_axis=freq, uncertainty=StdDevUncertainty(sigma), redshift=0.5)
    spec = from_specutils(sp, object_id="nb-1")
    np.testing.assert_allclose(spec.wavelength, wave_aa, rtol=1e-10)
    assert np.all(np.diff(spec.wavelength) > 0)
    np.testing.assert_array_equal(spec.flux, np.arange(11, dtype=float)[::-1])  # reordered with the axis
    np.testing.assert_allclose(spec.ivar, 0.25)
    assert spec.meta.redshift == pytest.approx(0.5, rel=1e-12) and spec.meta.object_id == "nb-1"
    assert "erg" in spec.flux_unit


def test_to_specutils_keeps_units_and_unknown_unit_text():
    sp = to_specutils(Spectrum([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], flux_unit="1e-17 erg/s/cm^2/A",
                  meta=SpectrumMeta(object_id="x")))
    assert "erg" in sp.flux.unit.to_string()
    odd = Spectrum([1.0, 2.0], [1.0, 2.0], ivar=[1.0, 0.0], flux_unit="counts per bogon")
    sp2 = to_specutils(odd)
    assert sp2.flux.unit.to_string() == ""
    back = from_specutils(sp2)
    assert back.flux_unit == "counts per bogon" and back.ivar.tolist() == [1.0, 0.0]


def test_specutils_fallback_reader_is_labelled(tmp_path, monkeypatch):
    """A layout no built-in reader claims is read by specutils' loader and labelled as such by `info`."""
    from speco3.cli import main
    from speco3.spectra import registry, specutils_io

    path = tmp_path / "from_notebook.fits"
    sp = to_specutils(Spectrum(np.linspace(5000, 6000, 50), np.linspace(1, 2, 50), flux_unit="erg/(s cm2 Angstrom)"))
    sp.write(path, format="tabular-fits")
    registry._load_builtins()
    only_fallback = {specutils_io.FALLBACK: registry._FORMATS[specutils_io.FALLBACK]}
    monkeypatch.setattr(registry, "_FORMATS", only_fallback)  # as if no Spec-o3 reader knew this layout
    with pytest.raises(SpectrumReadError):  # off by default: archive scans do not pay specutils' ~3 s per file
        read_file(path)
    with specutils_io.fallback_enabled():
        contents = read_file(path)
    assert contents.format == "specutils-fallback"
    spec = contents.spectra[0]
    np.testing.assert_allclose(spec.wavelength, np.linspace(5000, 6000, 50))
    assert "specutils" in spec.meta.note
    assert main(["info", str(path)]) == 0
    assert main(["info", str(path), "--json", "--specutils"]) == 0


def test_info_specutils_flag(spectra_dir, capsys):
    from speco3.cli import main

    path = spectra_dir / "lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz"
    assert main(["info", str(path), "--specutils"]) == 0
    out = capsys.readouterr().out
    assert "specutils" in out and "InverseVariance" in out
    assert main(["info", str(path), "--specutils", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)[0]["specutils"]
    assert rec["uncertainty"] == "InverseVariance" and rec["class"].startswith("specutils.")

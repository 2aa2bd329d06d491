"""The demo archive (Qt-free): layout, determinism, features per task class, idempotence."""

from __future__ import annotations

import numpy as np
from astropy.io import fits

from speco3.demo import CATALOGUE, N_PIXELS, demo_file_name, write_demo_archive
from speco3.spectra import read_spectrum


def _window_mean(s, lo, hi):
    w = s.rest_wavelength()
    sel = (w > lo) & (w < hi) & s.good
    return float(np.median(s.flux[sel]))


def test_layout_is_lamost_lrs_new(demo_master):
    path = demo_master / demo_file_name(0)
    with fits.open(path) as hdul:
        assert len(hdul) == 2 and hdul[0].data is None and hdul[1].name == "COADD"
        h = hdul[0].header
        for k in ("CLASS", "SUBCLASS", "Z", "OBSID", "RA", "DEC", "SNRG", "SNRR"):
            assert k in h
        cols = hdul[1].columns
        assert cols.names == ["FLUX", "IVAR", "WAVELENGTH", "ANDMASK", "ORMASK", "NORMALIZATION"]
        assert all(c.format == f"{N_PIXELS}E" for c in cols)
        w = hdul[1].data["WAVELENGTH"][0]
        assert abs(w[0] - 3700) < 2 and abs(w[-1] - 9100) < 2
        assert np.allclose(np.diff(np.log10(w.astype(float))), 1e-4, atol=1e-7)
    s = read_spectrum(path)
    assert s.meta.survey == "LAMOST" and s.medium == "vacuum" and s.n_pixels == N_PIXELS
    assert 0 < s.mask.sum() < 20  # a few masked pixels


def test_deterministic_and_written_once(tmp_path):
    a = write_demo_archive(tmp_path / "a")
    b = write_demo_archive(tmp_path / "b")
    assert len(a) == len(CATALOGUE) == 20
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(a, b, strict=True))
    mtime = a[0].stat().st_mtime_ns
    write_demo_archive(tmp_path / "a")
    assert a[0].stat().st_mtime_ns == mtime  # up to date: not rewritten
    a[3].unlink()
    write_demo_archive(tmp_path / "a")
    assert a[3].is_file()


def test_features_per_task_class(demo_master):
    spectra = [read_spectrum(demo_master / demo_file_name(i)) for i in range(len(CATALOGUE))]
    by_kind = {}
    for obj, s in zip(CATALOGUE, spectra, strict=True):
        by_kind.setdefault(obj.kind, s)
    cv = by_kind["cv"]  # Hα and He II 4686 in emission
    assert _window_mean(cv, 6558, 6571) > 1.5 * _window_mean(cv, 6610, 6660)
    assert _window_mean(cv, 4682, 4692) > 1.15 * _window_mean(cv, 4720, 4760)
    wd = by_kind["wd"]  # broad Hβ absorption
    assert _window_mean(wd, 4850, 4875) < 0.8 * _window_mean(wd, 5150, 5250)
    carbon = by_kind["carbon"]  # C2 Swan head at 5165: flux drops blueward of the head
    assert _window_mean(carbon, 5120, 5160) < 0.75 * _window_mean(carbon, 5170, 5200)
    mg = by_kind["mgiant"]  # TiO 7054 head, degraded to the red
    assert _window_mean(mg, 7060, 7090) < 0.7 * _window_mean(mg, 7010, 7045)
    ss = by_kind["stype"]  # ZrO 6474
    assert _window_mean(ss, 6478, 6510) < 0.8 * _window_mean(ss, 6420, 6468)
    gal = by_kind["galaxy"]
    assert gal.meta.cls == "GALAXY" and gal.z > 0.05
    assert _window_mean(gal, 6560, 6569) > 1.3 * _window_mean(gal, 6620, 6680)

"""Fixtures for the renderer tests: the LAMOST reference spectra and the reference renders."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from speco3_testkit.testdata import REFERENCE_RENDERS, SPECTRA

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


@dataclass(frozen=True)
class RefRender:
    """One reference render made by the training routine."""

    png: Path
    source: str  # file name in spectra/lamost
    wavelength_range: tuple[float, float] | None

    @property
    def id(self) -> str:
        return self.png.stem


def reference_renders() -> list[RefRender]:
    """Parse ``tests/data/reference-renders/*.png`` names: ``<source stem>_<full|A-B>.png``."""
    out = []
    lamost = SPECTRA / "lamost"
    for png in sorted(REFERENCE_RENDERS.glob("*.png")):
        m = re.fullmatch(r"(.+)_(full|(\d+)-(\d+))", png.stem)
        assert m, png
        stem = m.group(1)
        source = next(p.name for p in lamost.iterdir() if p.name.split(".fits")[0] == stem)
        rng = None if m.group(2) == "full" else (float(m.group(3)), float(m.group(4)))
        out.append(RefRender(png, source, rng))
    return out


REFERENCES = reference_renders()


def read_lamost_coadd(path: Path) -> tuple[np.ndarray, np.ndarray, float]:
    """(wavelength, flux, Z) of a LAMOST LRS file, read with astropy (new COADD or old image layout)."""
    from astropy.io import fits

    with fits.open(path) as hdul:
        z = float(hdul[0].header["Z"])
        if len(hdul) > 1 and hdul[1].name == "COADD":
            row = hdul[1].data
            return np.asarray(row["WAVELENGTH"][0], float), np.asarray(row["FLUX"][0], float), z
        data = hdul[0].data
        return np.asarray(data[2], float), np.asarray(data[0], float), z


@pytest.fixture(scope="session")
def lamost_spectrum(spectra_dir):
    """Factory: a Spectrum built from a LAMOST file with astropy (independent of the readers)."""
    from speco3.spectra.model import Spectrum, SpectrumMeta

    def make(name: str) -> Spectrum:
        w, f, z = read_lamost_coadd(spectra_dir / "lamost" / name)
        return Spectrum(w, f, meta=SpectrumMeta(survey="LAMOST", redshift=z, file_name=name))

    return make


@pytest.fixture(scope="session")
def mpl_reference():
    """The matplotlib implementation of the training renderer (benchmarks/mpl_reference.py)."""
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(BENCH))
    try:
        import mpl_reference
    finally:
        sys.path.remove(str(BENCH))
    return mpl_reference


def pytest_generate_tests(metafunc):
    """Parametrize every test that takes ``ref_render`` over the reference renders."""
    if "ref_render" in metafunc.fixturenames:
        assert REFERENCES, f"no reference renders in {REFERENCE_RENDERS}"
        metafunc.parametrize("ref_render", REFERENCES, ids=[r.id for r in REFERENCES])


@pytest.fixture
def ref_view(ref_render, lamost_spectrum):
    """The View that reproduces a reference render (rest frame, default title)."""
    from speco3.spectra.view import View

    return View(lamost_spectrum(ref_render.source), wavelength_range=ref_render.wavelength_range)

"""Fixtures of the spectra tests: paths into the real spectra of tests/data, small writable archives."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spectra_path(spectra_dir):
    """``spectra_path("sdss/spec-0266-51602-0638.fits")`` -> absolute path in ``tests/data/spectra``."""

    def get(rel: str) -> Path:
        p = spectra_dir / rel
        assert p.is_file(), f"{rel} is missing from {spectra_dir} (listed in tests/data/README.md)"
        return p

    return get


@pytest.fixture
def small_archive(tmp_path, spectra_dir) -> Path:
    """A writable archive in tmp: 4 LAMOST LRS files, a DESI coadd with its redrock file, one SDSS file."""
    root = tmp_path / "archive"
    picks = {
        "lamost": ["spec-55859-F5902_sp01-001.fits.gz", "spec-55859-F5902_sp01-002.fits.gz",
                   "spec-55859-F5902_sp01-001_dr7.fits.gz", "spec-58397-EG014118N254444M01_sp03-031.fits"],
        "desi": ["coadd-4-80613-thru20210324.fits", "redrock-4-80613-thru20210324.fits"],
        "sdss": ["spec-1931-53358-0251.fits"],
    }
    for folder, names in picks.items():
        (root / folder).mkdir(parents=True)
        for n in names:
            shutil.copy2(spectra_dir / folder / n, root / folder / n)
    return root

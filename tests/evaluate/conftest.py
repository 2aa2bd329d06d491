"""Fixtures of the evaluate tests: real spectra, a benchmark parquet built from them with known labels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def real_spectra(spectra_dir):
    from benchkit import REAL

    from speco3.spectra import read_spectrum

    return [read_spectrum(spectra_dir / rel) for rel in REAL]


@pytest.fixture(scope="session")
def bench_path(real_spectra, tmp_path_factory):
    from benchkit import LABELS, rows_from_spectra, write_bench

    return write_bench(tmp_path_factory.mktemp("bench") / "specvi.parquet", rows_from_spectra(real_spectra, LABELS))


@pytest.fixture
def render():
    from benchkit import pillow_render

    return pillow_render


@pytest.fixture(scope="session")
def tiny_builds(tiny_gguf):
    """``{"F16": (text, mmproj), "Q8_0": (text, mmproj)}``: two builds of the tiny random Qwen2.5-VL checkpoint
    (the shared cached pairs of tests/conftest.py)."""
    return {q: tuple(str(p) for p in tiny_gguf(q)) for q in ("F16", "Q8_0")}

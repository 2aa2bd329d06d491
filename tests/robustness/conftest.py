"""Fixtures of the robustness suite: generators on the path, a real spectrum, renderers, the tiny model pair."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

REAL_SPECTRUM = "lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz"


@pytest.fixture(scope="session")
def real_spectrum(spectra_dir):
    """A real LAMOST LRS spectrum (3909 px, DR13 Q1) read through the public reader."""
    from speco3.spectra import read_spectrum

    return read_spectrum(spectra_dir / REAL_SPECTRUM)


@pytest.fixture(scope="session")
def pillow_render():
    from speco3_testkit.spectra import pillow_render

    return pillow_render


@pytest.fixture(scope="session")
def tiny_pair(tiny_gguf):
    """``(text_gguf, mmproj_gguf)`` of the converter's tiny random Qwen2.5-VL (Q8_0, the shared cached pair)."""
    override = os.environ.get("SPECO3_TINY_GGUF")
    if override:
        text, mmproj = override.split(",")
        return Path(text), Path(mmproj)
    return tiny_gguf("Q8_0")


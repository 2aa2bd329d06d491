"""Agent-test fixtures (helpers live in ``agent_helpers.py``)."""

from __future__ import annotations

import pytest

from speco3.spectra.model import Spectrum
from speco3_testkit.spectra import make_spectrum, pillow_render


@pytest.fixture
def render():
    return pillow_render


@pytest.fixture
def spectrum() -> Spectrum:
    return make_spectrum()

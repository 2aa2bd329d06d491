"""Agent-test fixtures (helpers live in ``agent_helpers.py``)."""

from __future__ import annotations

import pytest
from agent_helpers import make_spectrum, pillow_render

from speco3.spectra.model import Spectrum


@pytest.fixture
def render():
    return pillow_render


@pytest.fixture
def spectrum() -> Spectrum:
    return make_spectrum()

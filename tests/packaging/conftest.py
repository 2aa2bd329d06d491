"""Fixtures of the packaging tests: the ``packaging/`` folder on ``sys.path`` and the tiny GGUF writers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "packaging"
sys.path.insert(0, str(PACKAGING))
sys.path.insert(0, str(REPO / "tests" / "models"))  # ggufs.py: small valid GGUF pairs


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def packaging_dir() -> Path:
    return PACKAGING


@pytest.fixture(scope="session")
def manifest():
    import bundle_manifest

    return bundle_manifest

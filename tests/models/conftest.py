"""Fixtures of the model-store tests: small GGUF pairs written at test time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ggufs import write_mmproj_gguf, write_text_gguf  # noqa: E402


@pytest.fixture
def gguf_pair(tmp_path) -> tuple[Path, Path]:
    """A matching text model + projector (hidden size 64) in a fresh folder."""
    src = tmp_path / "src"
    src.mkdir()
    return write_text_gguf(src / "tiny-text-F32.gguf"), write_mmproj_gguf(src / "mmproj-tiny-F32.gguf")


@pytest.fixture
def make_pair(tmp_path):
    """Factory: ``make_pair(tag, n_embd=64)`` writes a matching pair under ``tmp_path/tag``."""

    def make(tag: str, n_embd: int = 64, seed: int = 0) -> tuple[Path, Path]:
        folder = tmp_path / tag
        folder.mkdir()
        return (write_text_gguf(folder / f"{tag}-text.gguf", n_embd=n_embd, seed=seed),
                write_mmproj_gguf(folder / f"mmproj-{tag}.gguf", proj_dim=n_embd, seed=seed + 1))

    return make

"""Fixtures of the converter tests: tiny Qwen2.5-VL checkpoints (built once per session) and a test image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from speco3_testkit.tinymodel import make_tiny_qwen25vl


@pytest.fixture(scope="session")
def tiny_ckpts(tmp_path_factory):
    """Factory ``tiny(**options) -> Path`` of tiny checkpoints, each variant written once per session."""
    root = tmp_path_factory.mktemp("tiny_ckpts")
    made: dict[tuple, Path] = {}

    def tiny(**options) -> Path:
        key = tuple(sorted(options.items()))
        if key not in made:
            name = "-".join(f"{k}_{v}" for k, v in key) or "default"
            made[key] = make_tiny_qwen25vl(root / name, **options)
        return made[key]

    return tiny


@pytest.fixture(scope="session")
def test_image(tmp_path_factory) -> Path:
    """A 224x168 RGB PNG (8x6 image tokens: two window-attention windows wide, non-square)."""
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:168, 0:224]
    img = np.stack([x * 255 / 224, y * 255 / 168, 128 + 100 * np.sin(x / 9.0) * np.cos(y / 7.0)], -1)
    img = np.clip(img + rng.normal(0, 20, img.shape), 0, 255).astype(np.uint8)
    path = tmp_path_factory.mktemp("img") / "test.png"
    Image.fromarray(img).save(path)
    return path

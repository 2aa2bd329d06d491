"""Fixtures of the engine tests: the tiny GGUF pair, engines on it, small prepared images."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

from speco3.engine.base import EngineSettings
from speco3.imaging import prepare_image

try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1); a broken library raises
    HAVE_LLAMA = False

needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama-cpp-python (with mtmd) is not installed")

# Numerically tight settings: F32 KV cache and flash attention off (see docs/design.md §7 "known traps").
TIGHT = dict(n_ctx=2048, flash_attn=False, kv_type="f32", n_threads=2, mmproj_on_gpu=False, n_gpu_layers=0)


@pytest.fixture(scope="session")
def tiny_pair(tiny_gguf):
    """``(text_gguf, mmproj_gguf)`` of the tiny random Qwen2.5-VL, F32 (the shared cached pair).

    ``SPECO3_TINY_GGUF=text.gguf,mmproj.gguf`` points the tests at an existing tiny pair instead.
    """
    if not HAVE_LLAMA:
        pytest.skip("llama-cpp-python is not installed")
    override = os.environ.get("SPECO3_TINY_GGUF")
    if override:
        text, mmproj = override.split(",")
        return text, mmproj
    text, mmproj = tiny_gguf("F32")
    return str(text), str(mmproj)


@pytest.fixture
def make_engine(tiny_pair):
    """Factory of loaded `LlamaMtmdEngine`s on the tiny pair (closed after the test)."""
    from speco3.engine.llama import LlamaMtmdEngine

    made = []

    def make(**overrides):
        settings = EngineSettings(**{**TIGHT, **overrides})
        engine = LlamaMtmdEngine(*tiny_pair, settings, warmup=False)
        engine.load()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


def random_png(width: int, height: int, seed: int) -> bytes:
    """A PNG of random pixels (every image differs, so its sha256 differs)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def make_png():
    """``make_png(width, height, seed)`` → PNG bytes of random pixels."""
    return random_png


@pytest.fixture(scope="session")
def images():
    """Four prepared images: a 'full view' (6x4 tokens) and three 'zooms' (5x3, 4x4, 6x3 tokens)."""
    sizes = [(170, 110), (140, 84), (112, 112), (168, 84)]
    return [prepare_image(random_png(w, h, seed)) for seed, (w, h) in enumerate(sizes)]

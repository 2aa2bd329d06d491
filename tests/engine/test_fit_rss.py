"""The memory estimate against reality on the tiny model: a fresh process loads the pair with the real engine,
encodes an image and generates; its peak RSS increase is compared with `speco3_models.fit.estimate`.

Stated tolerance: within 10 % at a 4k and a 16k context (the issue's goal; measured on this machine: -3 % to
+7 %). The parts that scale (weights, KV cache) are exact by construction; the fixed runtime part
(`RUNTIME_OVERHEAD`) and the vision encoder's per-patch-pair bytes were measured on this model, so the test
mostly guards the structure: a part forgotten or counted twice moves the figure by more than 10 %. The text
compute buffer is checked against llama.cpp's own figure in tests/models/test_fit_tool.py.
"""

from __future__ import annotations

import sys

import pytest

from speco3_testkit.rssprobe import measure_load

pytestmark = [pytest.mark.llama, pytest.mark.skipif(not sys.platform.startswith("linux"),
                                                    reason="peak RSS is read from /proc (Linux)")]


@pytest.mark.parametrize("quant, n_ctx", [("Q8_0", 4096), ("Q8_0", 16384), ("F32", 16384)])
def test_estimate_within_10_percent_of_the_measured_peak(tiny_gguf, quant, n_ctx):
    text, mmproj = tiny_gguf(quant)
    m = measure_load(text, mmproj, n_ctx, image_max_tokens=1280)  # one image at the cap: 1,269 tokens
    assert abs(m["error"]) <= 0.10, m
    assert m["tokens_generated"] > 0 and m["image_tokens"] > 1200

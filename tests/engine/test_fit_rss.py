"""The memory estimate against reality on the tiny model: a fresh process loads the pair with the real engine,
encodes an image and generates; its peak RSS increase is compared with `speco3_models.fit.estimate`.

Stated tolerance: within 10 % at a 4k and a 16k context (the issue's goal). The parts that scale (weights, KV
cache) are exact by construction; the fixed runtime part (`RUNTIME_OVERHEAD`) was measured on this model, so the
test mostly guards the structure: a part forgotten or counted twice moves the figure by more than 10 %.
"""

from __future__ import annotations

import sys

import pytest

from speco3_testkit.rssprobe import measure_load

pytestmark = [pytest.mark.llama, pytest.mark.skipif(not sys.platform.startswith("linux"),
                                                    reason="peak RSS is read from /proc (Linux)")]


@pytest.mark.parametrize("quant", ["Q8_0", "F32"])
def test_estimate_within_10_percent_of_the_measured_peak(tiny_gguf, quant):
    text, mmproj = tiny_gguf(quant)
    for n_ctx in (4096, 16384):
        m = measure_load(text, mmproj, n_ctx, image_max_tokens=1280)
        assert abs(m["error"]) <= 0.10, m
        assert m["tokens_generated"] > 0 and m["image_tokens"] > 100

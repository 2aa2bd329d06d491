"""The built-in estimate against llama.cpp's own (``llama-fit-params --fit-print``, built from the same sources as
the engine by ``scripts/build-llama-tools.sh``): weights, KV cache and compute buffers of the text model.

llama-fit-params prints MiB rounded down; a part agrees when it is within 1 MiB or 10 % of llama.cpp's figure.
The tool is needed (a skip fails under SPECO3_STRICT_SKIPS=1: CI builds it with ``scripts/setup.sh --tests``).
"""

from __future__ import annotations

import pytest

from speco3_models.fit import MIB, ModelShape, estimate, plan_fit
from speco3_models.fit_tool import find_fit_params, fit_args, fit_print, llama_estimator

pytestmark = [pytest.mark.llama]


@pytest.fixture(scope="module")
def tool():
    path = find_fit_params()
    if path is None:
        pytest.skip("llama-fit-params is not built (scripts/build-llama-tools.sh)")
    return path


def _agree(ours: int, theirs_mib: int) -> bool:
    return abs(ours / MIB - theirs_mib) <= max(1.0, 0.10 * theirs_mib)


@pytest.mark.parametrize("quant", ["Q8_0", "F32"])
@pytest.mark.parametrize("n_ctx, flash_attn", [(4096, True), (16384, True), (4096, False), (32768, False)])
def test_estimate_parts_agree_with_llama_cpp(tool, tiny_gguf, quant, n_ctx, flash_attn):
    text, mmproj = tiny_gguf(quant)
    fp = fit_print(text, n_ctx, flash_attn=flash_attn, tool=tool)
    assert fp is not None and "Host" in fp.rows
    ours = estimate(ModelShape.from_gguf(text, mmproj), n_ctx, flash_attn=flash_attn)
    model, context, compute = fp.part_mib(0), fp.part_mib(1), fp.part_mib(2)
    assert _agree(ours.weights_bytes, model), (ours.weights_bytes / MIB, fp.rows)
    assert _agree(ours.kv_bytes, context), (ours.kv_bytes / MIB, fp.rows)
    assert _agree(ours.reserved_compute, compute), (ours.reserved_compute / MIB, fp.rows)


def test_llama_estimator_feeds_the_plan(tool, tiny_gguf):
    text, mmproj = tiny_gguf("Q8_0")
    shape = ModelShape.from_gguf(text, mmproj)
    est = llama_estimator(shape, text, tool=tool)
    plan = plan_fit(shape, 8192, 8 * 1024 * MIB, estimator=est)
    assert plan.fits and plan.n_ctx == 8192 and plan.estimate.kv_bytes == fit_print(text, 8192, tool=tool).part_mib(1) * MIB


def test_cpu_build_fit_mode_answers(tool, tiny_gguf):
    text, _ = tiny_gguf("Q8_0")
    answer = fit_args(text, 8192, tool=tool)
    assert answer is None or answer[0] <= 8192  # without a GPU llama.cpp has nothing to fit: it may refuse


def test_broken_model_file_gives_none_not_a_crash(tool, tmp_path, caplog):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    assert fit_print(bad, 4096, tool=tool) is None
    assert "llama-fit-params failed" in caplog.text

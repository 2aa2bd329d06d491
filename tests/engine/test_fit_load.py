"""Fitting at load time on the real engine: refusal before loading, and the retry path after a GPU load failure.

This machine has no GPU: the GPU plan comes from `plan_fit` on simulated figures and the GPU load failure is
injected in front of the real `_load_native`; the CPU load that the ladder ends with is the real one.
"""

from __future__ import annotations

import logging

import pytest

from speco3.engine import fitting
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine
from speco3.errors import EngineError
from speco3_models.fit import GIB, HOST_MARGIN, MIB, DeviceMemory, ModelShape, plan_fit

pytestmark = [pytest.mark.llama]

TIGHT = dict(n_ctx=2048, flash_attn=False, kv_type="f32", n_threads=2, mmproj_on_gpu=False, n_gpu_layers=0)
PROMPT = "<|im_start|>user\nDescribe the spectrum.<|im_end|>\n<|im_start|>assistant\n"


def test_model_that_cannot_fit_is_refused_before_loading(tiny_pair, monkeypatch):
    monkeypatch.setattr(fitting, "host_available_bytes", lambda: 64 * MIB)
    loads = []
    monkeypatch.setattr(LlamaMtmdEngine, "_load_native", lambda self, *a: loads.append(a))
    engine = LlamaMtmdEngine(*tiny_pair, EngineSettings(**TIGHT), warmup=False)
    with pytest.raises(fitting.ModelTooLargeError) as info:
        engine.load()
    assert loads == [] and not engine.loaded
    msg = str(info.value)
    assert msg.startswith("tiny-F32 needs ") and "MiB at a 2048-token context, 64 MiB free" in msg
    assert "try Q4_K_M" in msg  # an F32 model: a quantized build is smaller
    assert info.value.plan.host_free_bytes == 64 * MIB


def _gpu_plan(tiny_pair, settings):
    """What plan_load would say on a machine with an 8 GiB GPU: every layer and the projector offloaded."""
    shape = ModelShape.from_gguf(*tiny_pair)
    return plan_fit(shape, settings.n_ctx, 16 * GIB, [DeviceMemory("SIM0", 8 * GIB, 8 * GIB)], gpu_margin=0)


@pytest.mark.parametrize("fail_above, loaded_with", [(0, 0), (1, 1)])
def test_gpu_load_failure_retries_with_fewer_layers_then_cpu(tiny_pair, monkeypatch, caplog, fail_above, loaded_with):
    settings = EngineSettings(**{**TIGHT, "n_gpu_layers": None})
    plan = _gpu_plan(tiny_pair, settings)
    assert plan.n_gpu_layers == 3 and plan.mmproj_on_gpu  # 2 blocks + the output layer
    monkeypatch.setattr(fitting, "plan_load", lambda *a, **k: plan)
    real = LlamaMtmdEngine._load_native
    tried = []

    def flaky(self, llama, mtmd, ngl, n_ctx, mmproj_gpu, use_mmap):
        tried.append((ngl, mmproj_gpu))
        if ngl > fail_above:
            raise EngineError(f"simulated: cudaMalloc failed with {ngl} layers")
        return real(self, llama, mtmd, ngl, n_ctx, mmproj_gpu, use_mmap)

    monkeypatch.setattr(LlamaMtmdEngine, "_load_native", flaky)
    engine = LlamaMtmdEngine(*tiny_pair, settings, warmup=False)
    with caplog.at_level(logging.WARNING, logger="speco3.engine"):
        engine.load()
    try:
        expected = [(3, True), (1, True), (0, False)][: 2 + (loaded_with == 0)]
        assert tried == expected
        st = engine.stats()
        assert st.extra["n_gpu_layers"] == loaded_with
        assert "after a failed load with 2" in st.extra["fit"] if loaded_with else st.extra["fit"].startswith("CPU only")
        assert "retrying with 1" in caplog.text and f"loaded with {loaded_with} GPU layers" in caplog.text
        engine.extend([PROMPT])
        assert engine.generate(max_tokens=4).n_tokens > 0  # the model that loaded works
    finally:
        engine.close()


def test_failure_on_the_cpu_attempt_is_raised(tiny_pair, monkeypatch):
    settings = EngineSettings(**TIGHT)
    monkeypatch.setattr(fitting, "plan_load", lambda *a, **k: _gpu_plan(tiny_pair, settings))

    def broken(self, *a):
        raise EngineError("simulated: out of memory")

    monkeypatch.setattr(LlamaMtmdEngine, "_load_native", broken)
    engine = LlamaMtmdEngine(*tiny_pair, settings, warmup=False)
    with pytest.raises(EngineError, match="simulated: out of memory"):
        engine.load()
    assert not engine.loaded


def test_load_records_the_plan(make_engine):
    st = make_engine().stats()
    assert st.extra["fit"].startswith("CPU only") and "context 2048" in st.extra["fit"]
    assert 0 < st.extra["estimated_bytes"] < 1 * GIB


def test_context_is_lowered_when_that_is_what_it_takes(tiny_pair, monkeypatch, caplog):
    from speco3_models.fit import HOST_MARGIN, estimate

    settings = EngineSettings(**{**TIGHT, "n_ctx": 16384})
    shape = ModelShape.from_gguf(*tiny_pair)
    cache = fitting.cache_bound(settings, shape)  # the engine counts its cache of vision-encoder outputs
    free = estimate(shape, 8192, kv_type="f32", flash_attn=False, image_cache_bytes=cache).total_bytes + HOST_MARGIN + 1
    monkeypatch.setattr(fitting, "host_available_bytes", lambda: free)
    engine = LlamaMtmdEngine(*tiny_pair, settings, warmup=False)
    with caplog.at_level(logging.WARNING, logger="speco3.engine"):
        engine.load()
    try:
        st = engine.stats()
        assert st.n_ctx == 8192
        assert st.extra["fit_notes"] == ["context lowered from 16384 to 8192 tokens to fit in memory",
                                         "model file read into memory instead of mapped (no room for the mapped file "
                                         "beside the loaded weights): a slower load, a lower peak"]
        assert st.extra["use_mmap"] is False
        assert "context 8192 (lowered from 16384)" in st.extra["fit"]
        assert "context lowered from 16384 to 8192" in caplog.text
    finally:
        engine.close()


@pytest.mark.parametrize("free_mib, forced, mapped", [(None, None, True), (64 * 1024, None, True),
                                                      (None, False, False), ("tight", None, False)])
def test_load_mode_follows_the_plan_and_the_user(tiny_pair, monkeypatch, free_mib, forced, mapped):
    """The model file is mapped when free memory holds it beside the loaded weights (llama.cpp's default, the
    fastest load), read into memory when it does not or when the user says --no-mmap; the real engine loads either
    way, records the mode and generates."""
    settings = EngineSettings(**TIGHT, use_mmap=forced)
    if free_mib == "tight":  # room for the loaded weights but not for the mapped file beside them
        plan = fitting.plan_load(*tiny_pair, settings, gpu_offload=False)
        shape = ModelShape.from_gguf(*tiny_pair)
        free = plan.host_needed_bytes + shape.weights_bytes + HOST_MARGIN - 1
        monkeypatch.setattr(fitting, "host_available_bytes", lambda: free)
    elif free_mib is not None:
        monkeypatch.setattr(fitting, "host_available_bytes", lambda: free_mib * MIB)
    engine = LlamaMtmdEngine(*tiny_pair, settings, warmup=False)
    engine.load()
    try:
        extra = engine.stats().extra
        assert extra["use_mmap"] is mapped
        assert ("model file mapped" if mapped else "model file read into memory") in extra["fit"]
        assert any("read into memory instead of mapped" in n for n in extra["fit_notes"]) is (free_mib == "tight")
        engine.extend(["<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"])
        assert engine.generate(max_tokens=3).n_tokens == 3
    finally:
        engine.close()

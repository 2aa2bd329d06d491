"""The engine's cache of vision-encoder outputs: a repeated image skips the encoder and gives bit-identical logits,
the cache is bounded (bytes and entries, least recently used dropped first), and the memory plan counts it."""

from __future__ import annotations

import numpy as np
import pytest

from speco3.engine.mtmd_image import EmbeddingCache

SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
TASK = "\nAnalyze the provided spectrum to determine if it is a **Carbon Star**.<|im_end|>\n<|im_start|>assistant\n"
TOOL_OPEN = "\n<|im_start|>user\n<tool_response>\n"
TOOL_CLOSE = "Zoomed view.\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def session_logits(engine, images, zoom) -> np.ndarray:
    """A from-scratch conversation (KV cache cleared) with the full view and one zoom; the next-token logits."""
    engine.reset(keep_cache=False)
    engine.extend([SYSTEM, images[0], TASK, "Let me zoom.<|im_end|>", TOOL_OPEN, zoom, TOOL_CLOSE])
    engine.evaluate()
    return engine.last_logits()


@pytest.mark.llama
def test_repeated_images_skip_the_encoder_with_identical_logits(make_engine, images):
    cached, plain = make_engine(), make_engine(image_cache_mib=0)
    first = session_logits(cached, images, images[1])
    again = session_logits(cached, images, images[1])  # both images from the cache; the KV cache was cleared
    other = session_logits(cached, images, images[2])  # the full view from the cache, the new zoom encoded
    st = cached.stats()
    assert st.images_encoded == 6 and st.extra["image_cache_hits"] == 3
    assert np.array_equal(first, again)
    ref = session_logits(plain, images, images[1])
    assert np.array_equal(first, ref), "cached embeddings must give what the encoder gives"
    assert np.array_equal(other, session_logits(plain, images, images[2]))
    assert plain.stats().extra["image_cache_hits"] == 0 and not np.array_equal(first, other)


@pytest.mark.llama
def test_a_cache_hit_in_another_sequence_matches_that_sequence_encoding_it(make_engine, images):
    """Rollouts of one spectrum asking the same window: the second rollout's image comes from the cache and its
    continuation equals an engine without a cache (greedy, log-probabilities within the KV-reuse tolerance)."""
    from speco3.engine.base import Sampling

    def run(engine):
        with engine.open_pool() as pool:
            slots = [pool.open(Sampling()) for _ in range(2)]
            for slot, text in zip(slots, ("Let me zoom.<|im_end|>", "I zoom in.<|im_end|>"), strict=True):
                pool.extend(slot, [SYSTEM, images[0], TASK, text, TOOL_OPEN, images[3], TOOL_CLOSE])
                pool.begin(slot, max_tokens=5)
            res = {}
            while len(res) < 2:
                res.update(pool.step())
        return [res[s] for s in slots], engine.stats().extra.get("image_cache_hits", 0)

    with_cache, hits = run(make_engine(n_seq=2, top_logprobs=3))
    without, none = run(make_engine(n_seq=2, top_logprobs=3, image_cache_mib=0))
    assert (hits, none) == (1, 0)
    for a, b in zip(with_cache, without, strict=True):
        assert a.text == b.text and [t.token for t in a.logprobs] == [t.token for t in b.logprobs]
        assert max(abs(x.logprob - y.logprob) for x, y in zip(a.logprobs, b.logprobs, strict=True)) <= 1e-4


def test_cache_is_bounded_and_least_recently_used_goes_first():
    cache = EmbeddingCache(max_bytes=3 * 400)
    for key in "abc":
        cache.put(key, np.zeros(100, np.float32))  # 400 bytes each
    assert len(cache) == 3 and cache.bytes == 1200
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", np.zeros(100, np.float32))
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 3 and cache.bytes == 1200
    cache.put("huge", np.zeros(1000, np.float32))  # larger than the whole cache: not kept, nothing dropped
    assert cache.get("huge") is None and len(cache) == 3
    assert (cache.hits, cache.misses) == (2, 2)
    many = EmbeddingCache(max_bytes=1 << 30)
    for i in range(EmbeddingCache.MAX_ENTRIES + 3):
        many.put(str(i), np.zeros(4, np.float32))
    assert len(many) == EmbeddingCache.MAX_ENTRIES and many.get("0") is None and many.get(str(i)) is not None
    off = EmbeddingCache(0)
    off.put("a", np.zeros(1, np.float32))
    assert len(off) == 0
    cache.clear()
    assert (len(cache), cache.bytes) == (0, 0)


def test_the_memory_plan_counts_the_cache_bound():
    from speco3.engine.base import EngineSettings
    from speco3.engine.fitting import cache_bound
    from speco3_models import catalog
    from speco3_models.fit import estimate, plan_fit, shape_from_catalog

    assert EmbeddingCache.bound(32 << 20, 1280, 3584) == 32 << 20  # a 7B: eight capped images exceed 32 MiB
    assert EmbeddingCache.bound(32 << 20, 1280, 64) == 8 * 1280 * 64 * 4  # a tiny model: eight images are less
    assert EmbeddingCache.bound(0, 1280, 3584) == 0
    shape = shape_from_catalog(catalog.get("spec-o3-7b"), "Q4_K_M")
    assert cache_bound(EngineSettings(), shape) == 32 << 20 and cache_bound(EngineSettings(image_cache_mib=0), shape) == 0
    base = estimate(shape, 4096)
    with_cache = estimate(shape, 4096, image_cache_bytes=32 << 20)
    assert with_cache.total_bytes - base.total_bytes == 32 << 20
    assert with_cache.parts()["image_cache_bytes"] == 32 << 20 and base.parts()["image_cache_bytes"] == 0
    plan = plan_fit(shape, 4096, 64 << 30, want_gpu=False, image_cache_bytes=32 << 20)
    assert plan.estimate.total_bytes == with_cache.total_bytes

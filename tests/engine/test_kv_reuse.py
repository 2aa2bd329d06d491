"""KV-cache reuse of `LlamaMtmdEngine` on the tiny Qwen2.5-VL: only new tokens and images are evaluated, and the
incremental cache gives the logits of a from-scratch evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from speco3.engine.segments import cells_of, flatten, positions_of

pytestmark = [pytest.mark.llama]

SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
TASK = "\nAnalyze the provided spectrum to determine if it is a **Carbon Star**.<|im_end|>\n<|im_start|>assistant\n"
OTHER_TASK = "\nAnalyze the provided spectrum to determine if it is a **White Dwarf**.<|im_end|>\n<|im_start|>assistant\n"
TOOL_OPEN = "\n<|im_start|>user\n<tool_response>\n"


def tool_close(lo: int, hi: int) -> str:
    return (f"Generated spectral visualization focused on wavelength range ({lo}, {hi}) Å.\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n")


def n_tok(engine, text: str) -> int:
    return len(engine.tokenize(text))


def from_scratch(make_engine, conversation):
    """A fresh engine evaluating the whole conversation (same token ids) in one go."""
    ref = make_engine()
    ref.restore(conversation)
    plan = ref.evaluate()
    assert plan.keep == 0 and plan.cut_pos is None
    return ref, ref.last_logits()


def assert_same_logits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    assert np.all(np.isfinite(a))
    assert float(np.max(np.abs(a - b))) <= 1e-4
    assert int(np.argmax(a)) == int(np.argmax(b))


def test_three_turn_session_evaluates_only_new_parts(make_engine, images):
    eng = make_engine()
    full, zoom1, zoom2 = images[:3]
    wrap = 2  # <|vision_start|> and <|vision_end|> that mtmd puts around each image

    eng.extend([SYSTEM, full, TASK])
    r1 = eng.generate(max_tokens=6)
    assert (r1.images_encoded, r1.image_tokens) == (1, full.n_tokens)
    assert r1.prompt_tokens == n_tok(eng, SYSTEM) + wrap + n_tok(eng, TASK)

    eng.extend([TOOL_OPEN, zoom1, tool_close(4800, 4920)])
    r2 = eng.generate(max_tokens=6)
    assert (r2.images_encoded, r2.image_tokens) == (1, zoom1.n_tokens)
    assert r2.prompt_tokens == n_tok(eng, TOOL_OPEN) + wrap + n_tok(eng, tool_close(4800, 4920))

    eng.extend([TOOL_OPEN, zoom2, tool_close(6500, 6600)])
    plan = eng.evaluate()
    assert plan.cut_pos is None  # nothing removed: pure append
    assert plan.pending_text_tokens == n_tok(eng, TOOL_OPEN) + wrap + n_tok(eng, tool_close(6500, 6600))
    assert [i.sha256 for i in plan.pending_images] == [zoom2.sha256]

    st = eng.stats()
    items = flatten(eng.conversation())
    n_generated = r1.n_tokens + r2.n_tokens
    assert st.images_encoded == 3 and st.image_tokens_encoded == full.n_tokens + zoom1.n_tokens + zoom2.n_tokens
    assert st.text_tokens_evaluated + n_generated == sum(isinstance(i, int) for i in items)  # each token once
    # every sampled token (the stop token too) is in the cache; cells and positions are counted apart
    assert st.kv_cells_used == cells_of(items) and eng.kv_positions == positions_of(items)
    assert eng.kv_positions < eng.kv_cells  # M-RoPE: an image advances positions by max(nx, ny) only

    ref, ref_logits = from_scratch(make_engine, eng.conversation())
    assert ref.stats().images_encoded == 3
    assert_same_logits(eng.last_logits(), ref_logits)
    # and the continuation is the same greedy text
    assert eng.generate(max_tokens=8).text == ref.generate(max_tokens=8).text


def _session(eng, images):
    eng.extend([SYSTEM, images[0], TASK])
    eng.generate(max_tokens=5)
    eng.extend([TOOL_OPEN, images[1], tool_close(4000, 4100)])
    eng.generate(max_tokens=5)


def test_reset_reuses_system_prompt_and_first_image(make_engine, images):
    eng = make_engine()
    _session(eng, images)
    encoded = eng.stats().images_encoded
    eng.reset()
    eng.extend([SYSTEM, images[0], OTHER_TASK])
    plan = eng.evaluate()
    assert plan.pending_images == []  # the first image stays in the cache
    assert eng.stats().images_encoded == encoded
    a, b = eng.tokenize(TASK), eng.tokenize(OTHER_TASK)
    common = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert plan.pending_text_tokens == len(b) - common  # only the diverging text is evaluated
    assert plan.cut_pos is not None and eng.stats().extra["seq_rm_calls"] == 1
    _, ref_logits = from_scratch(make_engine, eng.conversation())
    assert_same_logits(eng.last_logits(), ref_logits)


def test_identical_conversation_after_reset_reevaluates_one_token(make_engine, images):
    eng = make_engine()
    eng.extend([SYSTEM, images[0], TASK])
    first = eng.generate(max_tokens=6)
    eng.reset()
    eng.extend([SYSTEM, images[0], TASK])
    again = eng.generate(max_tokens=6)
    assert (again.images_encoded, again.prompt_tokens) == (0, 1)
    assert again.text == first.text


def test_divergence_at_an_image_removes_the_tail_and_reencodes(make_engine, images):
    eng = make_engine()
    _session(eng, images)
    eng.reset()
    eng.extend([SYSTEM, images[3], TASK])  # another spectrum after the same system prompt
    plan = eng.evaluate()
    assert [i.sha256 for i in plan.pending_images] == [images[3].sha256]
    assert plan.cut_pos == n_tok(eng, SYSTEM) + 1  # cut right after <|vision_start|>, before the old image
    assert plan.pending_text_tokens == 1 + n_tok(eng, TASK)
    assert eng.stats().kv_cells_used == cells_of(flatten(eng.conversation()))
    _, ref_logits = from_scratch(make_engine, eng.conversation())
    assert_same_logits(eng.last_logits(), ref_logits)


def test_reset_without_cache_evaluates_everything(make_engine, images):
    eng = make_engine()
    eng.extend([SYSTEM, images[0], TASK])
    eng.generate(max_tokens=3)
    eng.reset(keep_cache=False)
    assert eng.kv_cells == 0
    eng.extend([SYSTEM, images[0], TASK])
    r = eng.generate(max_tokens=3)
    assert r.images_encoded == 1 and r.prompt_tokens == n_tok(eng, SYSTEM) + 2 + n_tok(eng, TASK)

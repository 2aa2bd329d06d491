"""Prefix planning of the KV cache (pure Python: no model needed)."""

from __future__ import annotations

from speco3.engine.sampling import PieceStream
from speco3.engine.segments import (
    ImageItem,
    Segment,
    cells_of,
    flatten,
    plan_evaluation,
    positions_of,
    runs,
)

IMG_A = ImageItem("a" * 64, n_tokens=12, n_pos=4)  # 4x3 grid: 12 cells, position advance 4
IMG_B = ImageItem("b" * 64, n_tokens=16, n_pos=4)


def test_cells_and_positions_differ_for_images():
    items = [1, 2, IMG_A, 3, IMG_B, 4]
    assert cells_of(items) == 4 + 12 + 16
    assert positions_of(items) == 4 + 4 + 4


def test_image_identity_is_pixels_and_grid_not_the_object():
    assert ImageItem("a" * 64, 12, 4, image=None) == IMG_A
    assert ImageItem("a" * 64, 16, 4) != IMG_A


def test_flatten_and_runs():
    segs = [Segment("text", [1, 2]), Segment("image", image=IMG_A), Segment("text", [3]), Segment("generated", [4, 5])]
    items = flatten(segs)
    assert items == [1, 2, IMG_A, 3, 4, 5]
    assert runs(items) == [[1, 2], IMG_A, [3, 4, 5]]
    assert [s.n_cells for s in segs] == [2, 12, 1, 2]
    assert [s.n_pos for s in segs] == [2, 4, 1, 2]


def test_plan_appends_only_the_new_suffix():
    kv = [1, 2, IMG_A, 3]
    conv = kv + [7, IMG_B, 8]
    plan = plan_evaluation(kv, conv, logits_valid=True)
    assert plan.keep == 4 and plan.cut_pos is None
    assert plan.pending == [7, IMG_B, 8]
    assert plan.kept_cells == 3 + 12 and plan.pending_cells == 2 + 16


def test_plan_cuts_at_the_divergence_in_positions_not_cells():
    kv = [1, 2, IMG_A, 3, 4, 5]
    conv = [1, 2, IMG_A, 3, 9]
    plan = plan_evaluation(kv, conv, logits_valid=True)
    assert plan.keep == 4
    assert plan.cut_pos == 2 + 4 + 1  # positions: 2 text + image advance 4 + 1 text (cells would be 15)
    assert plan.pending == [9]


def test_plan_never_cuts_inside_an_image():
    kv = [1, IMG_A, 2]
    conv = [1, IMG_B, 2]
    plan = plan_evaluation(kv, conv, logits_valid=True)
    assert plan.keep == 1 and plan.cut_pos == 1
    assert plan.pending == [IMG_B, 2]


def test_plan_reevaluates_last_token_when_fully_cached_without_logits():
    kv = [1, 2, IMG_A, 3]
    assert plan_evaluation(kv, list(kv), logits_valid=True).pending == []
    plan = plan_evaluation(kv, list(kv), logits_valid=False)
    assert plan.keep == 3 and plan.pending == [3] and plan.cut_pos == 1 + 4 + 1
    shorter = plan_evaluation(kv, [1, 2], logits_valid=True)  # a prefix of the cache: logits are gone
    assert shorter.keep == 1 and shorter.cut_pos == 1 and shorter.pending == [2]


def test_piece_stream_holds_back_split_utf8():
    got = []
    stream = PieceStream(got.append)
    assert stream.feed("é".encode()[:1]) == ""
    assert stream.feed("é".encode()[1:] + b"!") == "é!"
    stream.feed(b"\xe2\x82")  # an incomplete euro sign at the end
    text = stream.finish()
    assert text == "é!\ufffd" and "".join(got) == text


def test_token_logprob_is_the_log_softmax_of_the_raw_logits():
    import numpy as np

    from speco3.engine.sampling import token_logprob

    logits = np.random.default_rng(3).normal(0, 4, 5000).astype(np.float32)
    ref = logits.astype(np.float64) - np.log(np.sum(np.exp(logits.astype(np.float64))))
    got = token_logprob(logits, 17, 4, lambda t: f"<{t}>")
    assert got.token == "<17>" and abs(got.logprob - ref[17]) < 1e-6
    best = np.argsort(-ref)[:4]
    assert [t for t, _ in got.top] == [f"<{t}>" for t in best]
    assert np.allclose([v for _, v in got.top], ref[best], atol=1e-6)
    assert token_logprob(logits, 17, 0, str).top == ()

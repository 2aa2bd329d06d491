"""Parallel sequences (`SequencePool`) on the tiny Qwen2.5-VL: K rollouts from one evaluated prefix give rollout i
exactly what a single run with rollout i's seed gives (tokens, and log-probabilities within the KV-reuse tolerance),
tool images stay in their own sequence, and a cancel or a full context in the middle of K rollouts leaves the
others running and the KV cache consistent."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from speco3.engine.base import Sampling
from speco3.engine.segments import cells_of, flatten
from speco3.errors import ContextFullError, EngineError

pytestmark = [pytest.mark.llama]

SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
TASK = "\nAnalyze the provided spectrum to determine if it is a **Carbon Star**.<|im_end|>\n<|im_start|>assistant\n"
TOOL_OPEN = "\n<|im_start|>user\n<tool_response>\n"
TOOL_CLOSE = "Zoomed view.\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
TOL = 1e-4  # the KV-reuse test's tolerance on logits (tests/engine/test_kv_reuse.py::assert_same_logits)


def sampling(seed: int) -> Sampling:
    return Sampling(temperature=1.0, top_p=1.0, top_k=0, seed=seed)


def single_run(engine, images, seed: int, budgets: tuple[int, int], tool_image) -> list:
    """Rollout ``seed`` alone: prefix, turn 1, tool turn with ``tool_image``, turn 2; the two results."""
    engine.reset(keep_cache=False, sampling=sampling(seed))
    engine.extend([SYSTEM, images[0], TASK])
    first = engine.generate(max_tokens=budgets[0])
    engine.extend([TOOL_OPEN, tool_image, TOOL_CLOSE])
    return [first, engine.generate(max_tokens=budgets[1])]


def run_pool(pool, images, seeds, budgets, tool_images, cancel=None, tool_text=None) -> dict:
    """K rollouts on the pool; a rollout's tool turn is fed as soon as its first turn ends (the others keep
    decoding). Returns slot -> [turn results or exceptions]."""
    slots = {}
    for i, seed in enumerate(seeds):
        slot = pool.open(sampling(seed))
        pool.extend(slot, [SYSTEM, images[0], TASK])
        pool.begin(slot, max_tokens=budgets[i][0], cancel=(cancel or {}).get(i))
        slots[slot] = i
    out: dict[int, list] = {i: [] for i in range(len(seeds))}
    while any(len(v) < 2 and not isinstance(v[-1] if v else None, Exception) for v in out.values()):
        finished = pool.step()
        assert finished or pool.generating, "the pool made no progress"
        for slot, res in finished:
            i = slots[slot]
            out[i].append(res)
            if len(out[i]) == 1 and not isinstance(res, Exception) and res.stop_reason != "cancelled":
                text = tool_text[i] if tool_text and i in tool_text else TOOL_CLOSE
                pool.extend(slot, [TOOL_OPEN, tool_images[i], text])
                pool.begin(slot, max_tokens=budgets[i][1])
            elif len(out[i]) == 1:
                out[i].append(None)
    return out


def assert_same_turn(par, ref) -> None:
    """Same tokens sampled, and log-probabilities (sampled token and top alternatives) within the tolerance."""
    assert par.text == ref.text and par.n_tokens == ref.n_tokens and par.stop_reason == ref.stop_reason
    assert len(par.logprobs) == len(ref.logprobs) == par.n_tokens
    for a, b in zip(par.logprobs, ref.logprobs, strict=True):
        assert a.token == b.token and abs(a.logprob - b.logprob) <= TOL
        assert [t for t, _ in a.top] == [t for t, _ in b.top]
        assert np.max(np.abs(np.array([v for _, v in a.top]) - np.array([v for _, v in b.top]))) <= TOL


def test_single_generation_records_log_probabilities(make_engine, images):
    engine = make_engine(top_logprobs=3)
    engine.reset(sampling=sampling(5))
    engine.extend([SYSTEM, images[0], TASK])
    engine.evaluate()
    logits = engine.last_logits().astype(np.float64)
    res = engine.generate(max_tokens=4)
    log_softmax = logits - logits.max() - np.log(np.sum(np.exp(logits - logits.max())))
    first = res.logprobs[0]
    assert len(res.logprobs) == res.n_tokens and len(first.top) == 3
    assert abs(first.top[0][1] - log_softmax.max()) <= TOL
    sampled = engine.conversation()[-1].tokens[0]
    assert abs(first.logprob - log_softmax[sampled]) <= TOL and first.token == engine.detokenize([sampled])
    plain = make_engine()  # top_logprobs 0: nothing recorded
    plain.reset(sampling=sampling(5))
    plain.extend([SYSTEM, images[0], TASK])
    assert plain.generate(max_tokens=2).logprobs == []


@pytest.fixture
def pool_engine(make_engine):
    return make_engine(n_seq=4, top_logprobs=5)


def test_k_rollouts_match_single_runs_with_their_seeds(pool_engine, make_engine, images):
    budgets = [(6, 9), (14, 5), (10, 12), (3, 8)]  # different lengths: tool turns land while others decode
    tools = [images[1], images[2], images[3], images[1]]
    with pool_engine.open_pool() as pool:
        out = run_pool(pool, images, range(4), budgets, tools)
        counters = dict(pool.counters)
    ref_engine = make_engine(n_seq=1, top_logprobs=5)
    for i in range(4):
        ref = single_run(ref_engine, images, i, budgets[i], tools[i])
        assert_same_turn(out[i][0], ref[0])
        assert_same_turn(out[i][1], ref[1])
        assert out[i][1].images_encoded == 1 and out[i][1].image_tokens == tools[i].n_tokens
    assert len({r[0].text for r in out.values()}) > 1, "the seeds sample different rollouts"
    # the prefix was evaluated once: three rollouts copied it, sharing its logits row (nothing re-evaluated)
    assert counters["prefix_copies"] == 3
    assert [out[i][0].prompt_tokens for i in range(4)][1:] == [0, 0, 0] and out[0][0].prompt_tokens > 20
    assert counters["rounds"] < sum(a + b for a, b in budgets)  # tokens of several rollouts shared decodes


def test_tool_image_stays_in_its_own_sequence(pool_engine, make_engine, images):
    """Two greedy rollouts with different tool images: each continues exactly like a single run that saw only its
    own image, and differently from a run that saw the other's."""
    greedy = Sampling()
    with pool_engine.open_pool() as pool:
        a, b = pool.open(greedy), pool.open(greedy)
        for slot, image in ((a, images[1]), (b, images[2])):
            pool.extend(slot, [SYSTEM, images[0], TASK, "Let me zoom.<|im_end|>", TOOL_OPEN, image, TOOL_CLOSE])
            pool.begin(slot, max_tokens=6)
        res = {}
        while len(res) < 2:
            res.update(pool.step())
        assert [it.sha256 for it in pool.sequence(b).kv if not isinstance(it, int)] == [images[0].sha256,
                                                                                       images[2].sha256]
    ref = make_engine(n_seq=1, top_logprobs=5)
    lp = {}
    for image in (images[1], images[2]):
        ref.reset(keep_cache=False, sampling=greedy)
        ref.extend([SYSTEM, images[0], TASK, "Let me zoom.<|im_end|>", TOOL_OPEN, image, TOOL_CLOSE])
        lp[image.sha256] = ref.generate(max_tokens=6)
    assert_same_turn(res[a], lp[images[1].sha256])
    assert_same_turn(res[b], lp[images[2].sha256])
    diff = abs(res[b].logprobs[0].top[0][1] - lp[images[1].sha256].logprobs[0].top[0][1])
    assert diff > 100 * TOL, "the other rollout's image would change the logits"


def test_cancel_in_the_middle_of_k_rollouts(pool_engine, images):
    cancel = threading.Event()
    with pool_engine.open_pool() as pool:
        slots = [pool.open(sampling(s)) for s in range(3)]
        for slot in slots:
            pool.extend(slot, [SYSTEM, images[0], TASK])
        pool.begin(slots[0], max_tokens=12)
        pool.begin(slots[1], max_tokens=12, cancel=cancel)
        pool.begin(slots[2], max_tokens=12)
        res = {}
        for _ in range(4):
            res.update(pool.step(rounds=1))
        cancel.set()
        while len(res) < 3:
            res.update(pool.step())
        assert res[slots[1]].stop_reason == "cancelled" and 0 < res[slots[1]].n_tokens < 12
        assert res[slots[0]].n_tokens == res[slots[2]].n_tokens == 12
        ledger = pool.context.cells
        held = {sid: cells_of(seq.kv) for sid, seq in pool.context.sequences.items()}
        prefix = cells_of(pool.sequence(slots[0]).kv) - 12  # the shared prefix is counted once
        assert ledger.used == prefix + 12 + res[slots[1]].n_tokens + 12
        assert held[slots[1]] == prefix + res[slots[1]].n_tokens
        _assert_native_matches(pool)
    assert ledger.used == cells_of(pool.context.sequences[0].kv)  # released rollouts freed their cells
    _assert_cache_consistent(pool_engine, images)


def test_context_full_in_the_middle_of_k_rollouts(make_engine, images):
    engine = make_engine(n_seq=4, n_ctx=512)
    long_text = " word" * 600  # a tool turn that cannot fit in 512 cells
    with engine.open_pool() as pool:
        out = run_pool(pool, images, range(3), [(5, 6), (5, 6), (5, 6)], [images[1], images[2], images[3]],
                       tool_text={1: long_text + TOOL_CLOSE})
        assert isinstance(out[1][1], ContextFullError) and "n_ctx 512" in str(out[1][1])
        for i in (0, 2):
            assert out[i][1].n_tokens == 6 and out[i][1].images_encoded == 1
        assert engine.kv_cells == _distinct_cells(pool)
        _assert_native_matches(pool)
    assert engine.kv_cells == cells_of(pool.context.sequences[0].kv)
    _assert_cache_consistent(engine, images)


def test_slots_wait_for_cells_instead_of_failing(make_engine, images):
    """Four rollouts whose answer budgets do not all fit at once: the pool admits what fits and the rest start
    as cells come back (a slot is released as its turn ends, as the driver does); every rollout completes and
    samples exactly what a single run with its seed samples: a slot that waited gets its first token from its own
    logits, not from the output row another sequence left behind meanwhile."""
    engine = make_engine(n_seq=4, n_ctx=512, top_logprobs=5)
    with engine.open_pool() as pool:
        slots = [pool.open(sampling(s)) for s in range(4)]
        for slot in slots:
            pool.extend(slot, [SYSTEM, images[0], TASK])
            pool.begin(slot, max_tokens=150)
        res = {}
        while len(res) < 4:
            for slot, outcome in pool.step():
                res[slot] = outcome
                pool.release(slot)
        assert pool.counters["deferred"] > 0
    assert all(not isinstance(r, Exception) and r.n_tokens > 0 for r in res.values()), res
    ref = make_engine(n_seq=1, n_ctx=512, top_logprobs=5)
    for i, slot in enumerate(slots):
        ref.reset(keep_cache=False, sampling=sampling(i))
        ref.extend([SYSTEM, images[0], TASK])
        assert_same_turn(res[slot], ref.generate(max_tokens=150))


def _distinct_cells(pool) -> int:
    """Cells held by all sequences, a shared prefix counted once."""
    cells = {}
    for seq in pool.context.sequences.values():
        for cid, it in zip(seq.ids, seq.kv, strict=True):
            cells[cid] = 1 if isinstance(it, int) else it.n_tokens
    return sum(cells.values())


def _assert_native_matches(pool) -> None:
    """llama.cpp's own view of every sequence ends where our bookkeeping says."""
    for sid, seq in pool.context.sequences.items():
        assert pool.context.seq_pos_max(sid) == seq.kv_pos - 1, sid


def _assert_cache_consistent(engine, images) -> None:
    """After the pool: a single run on the engine gives the logits of a from-scratch evaluation."""
    engine.reset(sampling=Sampling())
    engine.extend([SYSTEM, images[0], TASK])
    engine.evaluate()
    got = engine.last_logits()
    engine.reset(keep_cache=False)
    engine.extend([SYSTEM, images[0], TASK])
    engine.evaluate()
    want = engine.last_logits()
    assert float(np.max(np.abs(got - want))) <= TOL


@pytest.mark.parametrize("extra", [0, 1])
def test_budget_check_is_exact_for_two_sequences(make_engine, images, extra):
    """Two slots on one prefix of P cells with answer budgets a and b: admitted together when P + a + b == n_ctx
    (the shared prefix counted once), and the second waits when it is one cell more."""
    engine = make_engine(n_seq=2, n_ctx=512)
    with engine.open_pool() as pool:
        a, b = pool.open(sampling(1)), pool.open(sampling(2))
        for slot in (a, b):
            pool.extend(slot, [SYSTEM, images[0], TASK])
        prefix = cells_of(flatten(pool.sequence(a).conv))
        budget_a = 100
        pool.begin(a, max_tokens=budget_a)
        pool.begin(b, max_tokens=512 - prefix - budget_a + extra)
        pool.step(rounds=1)
        assert pool.counters["deferred"] == extra
        assert (b in pool.generating) == (extra == 0) and a in pool.generating
        assert engine.kv_cells == prefix + 1 + (extra == 0)  # one decoded token per admitted slot
        assert pool.context.n_ctx == 512


def test_single_conversation_is_refused_while_a_pool_runs(make_engine, images):
    engine = make_engine(n_seq=2)
    with engine.open_pool():
        with pytest.raises(EngineError, match="parallel sequences"):
            engine.reset()
        with pytest.raises(EngineError, match="parallel sequences"):
            engine.generate(max_tokens=1)
        with pytest.raises(EngineError, match="already runs"):
            engine.open_pool()
    engine.reset()  # closed: the engine's own conversation is back

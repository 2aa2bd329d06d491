"""Slots: several conversations generated together, on llama.cpp sequences (`SequencePool`) or one at a time.

A *slot* is one conversation: `open` it with its sampling, `extend` it with parts, `begin` a generation, and call
`step` until the slot's `GenerationResult` (or its exception) comes back (a step returns as soon as some turn ended); `release` it when the conversation ends.
One driver (`speco3.agent.driver`) serves K rollouts of one spectrum and N spectra of a batch through this interface.

`SequencePool` (a loaded `LlamaMtmdEngine` with ``n_seq`` > 1) gives every slot its own llama.cpp sequence. Each
`step` first *admits* the slots that began a turn: the longest prefix any other sequence holds is shared with
``llama_memory_seq_cp`` (the system prompt, task and first image of K rollouts are evaluated once), the rest is
evaluated into the slot's own sequence (tool images with ``mtmd_helper_decode_image_chunk(..., seq_id, ...)``), and
its first token is sampled. Then decode rounds follow, until some turn ends: one ``llama_decode`` carries the
pending token of every generating slot, and each slot samples its next token from its own output row with its own
sampler. The slots whose turn ended return; the others keep their state, so a rollout stopped on a tool call is
rendered and fed before the next round (its tool turn is evaluated at the next step's admission). A slot that would not fit beside the others' cells and answer reserves waits until they finish their turns;
when nothing is generating and it still does not fit, it gets `ContextFullError` (the count is exact:
`speco3.engine.sequences`). Released sequences free their cells (``seq_rm``); sequence 0 is the engine's own and
keeps its cache, as a single run does.

`SerialSlots` is the same interface over any `Engine` with one slot (the scripted engine, an engine with ``n_seq``
1): each `step` runs one whole generation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from speco3.engine.base import Engine, GenerationResult, Message, Part, Sampling, TokenCallback
from speco3.engine.segments import common_prefix, flatten, positions_of
from speco3.engine.sequences import SeqState, Turn
from speco3.engine.worker import EngineWorker
from speco3.errors import ContextFullError, EngineError

StepResult = tuple[int, GenerationResult | Exception]


class SerialSlots:
    """One slot on any `Engine` (see module doc)."""

    capacity = 1

    def __init__(self, engine: Engine):
        self.engine = engine
        self._job: dict | None = None

    def open(self, sampling: Sampling | None) -> int:
        self.engine.load()
        self.engine.reset(sampling=sampling)
        return 0

    def extend(self, slot: int, parts: Sequence[Part], messages: Sequence[Message] | None = None) -> None:
        if messages is not None and getattr(self.engine, "takes_messages", False):
            self.engine.extend_messages(messages)  # a chat server: its template writes the markup
        else:
            self.engine.extend(parts)

    def begin(self, slot: int, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
              cancel: threading.Event | None = None) -> None:
        self._job = dict(max_tokens=max_tokens, on_token=on_token, cancel=cancel)

    def step(self, rounds: int | None = None) -> list[StepResult]:
        job, self._job = self._job, None
        if job is None:
            return []
        try:
            return [(0, self.engine.generate(**job))]
        except Exception as exc:
            return [(0, exc)]

    def release(self, slot: int) -> None:
        self._job = None

    def close(self) -> None:
        pass


class SequencePool:
    """Slots on the sequences of one loaded `LlamaMtmdEngine` (see module doc); use it on the engine's thread."""

    def __init__(self, engine):
        engine._require()
        if engine.pool is not None:
            raise EngineError("the engine already runs a pool of sequences")
        self.engine = engine
        engine.pool = self
        self.capacity = min(int(engine._llama.llama_n_seq_max(engine._ctx)), engine.n_batch)
        self._seqs: dict[int, SeqState] = {0: engine._seq}
        self._live: set[int] = set()
        self._turns: dict[int, Turn] = {}
        self._waiting: list[int] = []
        self._pending: dict[int, int] = {}  # slot -> sampled token, decoded at the next round
        self._logits_of: int | None = None  # slot whose next-token logits are the context's last output row
        self.counters = dict(rounds=0, round_tokens=0, prefix_copies=0, shared_cells=0, deferred=0)

    # ------------------------------------------------------------------ slots
    def open(self, sampling: Sampling | None) -> int:
        free = [i for i in range(self.capacity) if i not in self._live]
        if not free:
            raise EngineError(f"all {self.capacity} sequences are in use")
        sid = free[0]
        seq = self._seqs.setdefault(sid, SeqState(sid, self.engine._cells))
        seq.conv = []
        self.engine._new_sampler(sampling, seq)
        self._live.add(sid)
        return sid

    def extend(self, slot: int, parts: Sequence[Part], messages: Sequence[Message] | None = None) -> None:
        self.engine.extend(parts, self._seq(slot))  # llama.cpp sequences take the markup

    def begin(self, slot: int, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
              cancel: threading.Event | None = None) -> None:
        if slot in self._turns:
            raise EngineError(f"slot {slot} is already generating")
        self._turns[slot] = Turn.begin(self.engine, self._seq(slot), max_tokens, on_token, cancel)
        self._waiting.append(slot)

    def release(self, slot: int) -> None:
        """End the slot's conversation; its cells are freed (sequence 0 keeps them as the engine's cache)."""
        self._turns.pop(slot, None)
        self._pending.pop(slot, None)
        if slot in self._waiting:
            self._waiting.remove(slot)
        self._live.discard(slot)
        if slot != 0 and slot in self._seqs:
            self._free(self._seqs[slot])

    def close(self) -> None:
        """Release every slot and free the samplers of the extra sequences."""
        for slot in list(self._live):
            self.release(slot)
        for sid, seq in list(self._seqs.items()):
            if sid != 0:
                self._free(seq)
                if seq.sampler is not None:
                    self.engine._llama.llama_sampler_free(seq.sampler)
                    seq.sampler = None
                del self._seqs[sid]
        self.engine._stats.extra["parallel"] = dict(self.counters)
        self.engine.pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _seq(self, slot: int) -> SeqState:
        if slot not in self._live:
            raise EngineError(f"slot {slot} is not open")
        return self._seqs[slot]

    def _free(self, seq: SeqState) -> None:
        if seq.kv:
            self.engine._llama.llama_memory_seq_rm(self.engine._llama.llama_get_memory(self.engine._ctx),
                                                   seq.seq_id, -1, -1)
            seq.truncate(0)
        seq.conv = []

    # ------------------------------------------------------------------ stepping
    def step(self, rounds: int | None = None) -> list[StepResult]:
        """Admit the slots that began a turn, then decode rounds (one token of every generating slot each) until a
        turn ends or ``rounds`` rounds were done; return the slots whose turn ended (with the result, or the
        exception that ended it). Running until a turn ends keeps an `EngineWorker` to one call per turn end."""
        self.engine._require()
        done: list[StepResult] = []
        self._admit(done)
        n = 0
        while self._pending and not done and (rounds is None or n < rounds):
            self._round(done)
            n += 1
        self.engine._stats.extra["parallel"] = dict(self.counters)
        return done

    def _reserved(self) -> int:
        """Cells the generating slots may still fill (their remaining answer budgets)."""
        return sum(self._turns[s].max_tokens - len(self._turns[s].seg.tokens) for s in self._pending)

    def _admit(self, done: list[StepResult]) -> None:
        for slot in list(self._waiting):
            turn, seq = self._turns[slot], self._seqs[slot]
            if turn.done():  # cancelled before it started
                self._end(slot, turn.finish(), done)
                continue
            try:
                self._share_prefix(seq)
                plan = self.engine.evaluate(turn.max_tokens + self._reserved(), seq)
            except ContextFullError as exc:
                if self._pending:  # the others hold cells that come back when their turns end: wait
                    self.counters["deferred"] += 1
                    continue
                if self._reclaim_cache(seq):
                    self._waiting.remove(slot)
                    self._waiting.insert(0, slot)
                    return self._admit(done)
                self._end(slot, exc, done)
                continue
            except Exception as exc:
                self._logits_of = None
                self._end(slot, exc, done)
                continue
            self._waiting.remove(slot)
            self._logits_of = slot
            turn.start(plan)
            self._pending[slot] = self.engine.sample(seq, -1, turn.logprobs)

    def _reclaim_cache(self, seq: SeqState) -> bool:
        """Free sequence 0's cache when it is idle (not a slot) and holds cells; True when something was freed."""
        idle = self._seqs[0]
        if 0 in self._live or idle is seq or not idle.kv:
            return False
        before = self.engine._cells.used
        self._free(idle)
        return self.engine._cells.used < before

    def _share_prefix(self, seq: SeqState) -> None:
        """Copy the longest prefix another sequence holds (if longer than the slot's own) into the slot."""
        items = flatten(seq.conv)
        best, n = None, common_prefix(seq.kv, items)
        for other in self._seqs.values():  # on a tie, the sequence whose logits row is current
            if other is not seq:
                c = common_prefix(other.kv, items)
                if c > n or (best is not None and c == n and other.seq_id == self._logits_of):
                    best, n = other, c
        if best is None:
            return
        llama = self.engine._llama
        mem = llama.llama_get_memory(self.engine._ctx)
        llama.llama_memory_seq_rm(mem, seq.seq_id, -1, -1)
        llama.llama_memory_seq_cp(mem, best.seq_id, seq.seq_id, 0, positions_of(best.kv[:n]))
        seq.adopt(best, n)
        # the donor was evaluated just now up to exactly this conversation: its logits row serves this slot too
        seq.logits_valid = self._logits_of == best.seq_id and n == len(best.kv) == len(items)
        self.counters["prefix_copies"] += 1
        self.counters["shared_cells"] += sum(1 if isinstance(it, int) else it.n_tokens for it in seq.kv)

    def _round(self, done: list[StepResult]) -> None:
        """One ``llama_decode`` with the pending token of every generating slot, then sample each slot's next."""
        eng, b = self.engine, self.engine._batch
        order = list(self._pending.items())
        self._pending.clear()
        self._logits_of = None
        for i, (slot, tok) in enumerate(order):
            seq = self._seqs[slot]
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, seq.kv_pos, 1, 1
            b.seq_id[i][0] = seq.seq_id
        b.n_tokens = len(order)
        rc = eng._llama.llama_decode(eng._ctx, b)
        self.counters["rounds"] += 1
        self.counters["round_tokens"] += len(order)
        if rc != 0:
            error = EngineError(f"llama_decode of {len(order)} sequences failed (code {rc})")
            for slot, _ in order:
                eng._recover(self._seqs[slot])
                self._end(slot, error, done)
            return
        for i, (slot, tok) in enumerate(order):
            seq, turn = self._seqs[slot], self._turns[slot]
            seq.push([tok], 1)
            seq.logits_valid = False
            turn.commit(tok)
            if turn.done():
                self._end(slot, turn.finish(), done)
            else:
                self._pending[slot] = eng.sample(seq, i, turn.logprobs)

    def _end(self, slot: int, outcome: GenerationResult | Exception, done: list[StepResult]) -> None:
        self._turns.pop(slot, None)
        if slot in self._waiting:
            self._waiting.remove(slot)
        done.append((slot, outcome))


class _OnWorker:
    """Calls a pool's methods on the `EngineWorker` thread that owns its engine."""

    def __init__(self, pool: SequencePool, worker: EngineWorker):
        self._pool, self._worker = pool, worker
        self.capacity = pool.capacity

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._pool, name)
        return (lambda *a, **k: self._worker.call(attr, *a, **k)) if callable(attr) else attr


def parallel_sequences(engine: Engine) -> int:
    """How many conversations `open_slots` can run at once on ``engine``: the ``n_seq`` of a llama.cpp engine
    (also inside an `EngineWorker`), 1 for any other engine (scripted, a model server)."""
    from speco3.engine.llama import LlamaMtmdEngine

    inner = engine.engine if isinstance(engine, EngineWorker) else engine
    return max(1, int(inner.settings.n_seq)) if isinstance(inner, LlamaMtmdEngine) else 1


def open_slots(engine: Engine, wanted: int):
    """Slots for up to ``wanted`` conversations at once: a `SequencePool` when the engine is a loaded llama.cpp
    engine with ``n_seq`` > 1 and ``wanted`` > 1, else `SerialSlots`. Close them after use."""
    if wanted < 2:  # before the import: loading llama.cpp's bindings costs a scripted run ~0.3 s
        return SerialSlots(engine)
    if parallel_sequences(engine) < 2:
        return SerialSlots(engine)
    inner = engine.engine if isinstance(engine, EngineWorker) else engine
    try:
        engine.load()
    except Exception:  # the serial path reports it as each episode's engine error
        return SerialSlots(engine)
    if isinstance(engine, EngineWorker):
        return _OnWorker(engine.call(SequencePool, inner), engine)
    return SequencePool(inner)


__all__ = ["SequencePool", "SerialSlots", "open_slots", "parallel_sequences"]

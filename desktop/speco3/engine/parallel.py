"""Slots (`speco3.engine.base.Slots`): several conversations generated together, on llama.cpp sequences
(`SequencePool`) or one at a time (`SerialSlots`).

One driver (`speco3.agent.driver`) serves K rollouts of one spectrum and N spectra of a batch through this interface.

`SequencePool` (a loaded `LlamaMtmdEngine` with ``n_seq`` > 1, `LlamaMtmdEngine.open_pool`) gives every slot its
own llama.cpp sequence of the engine's `speco3.engine.context.LlamaContext` and runs their turns on the engine's
one token loop (`speco3.engine.decode.TokenLoop`): each `step` admits the slots that began a turn (the longest
prefix another sequence holds is shared with ``llama_memory_seq_cp``: the system prompt, task and first image of K
rollouts are evaluated once), then decodes rounds with one token of every generating slot in one ``llama_decode``
until some turn ends. The slots whose turn ended return; the others keep their state, so a rollout stopped on a
tool call is rendered and fed before the next round (its tool turn is evaluated at the next step's admission). A
slot that would not fit beside the others' cells and answer reserves waits until they finish their turns; when
nothing is generating and it still does not fit, it gets `ContextFullError`. Released sequences free their cells
(``seq_rm``); sequence 0 is the engine's own and keeps its cache, as a single run does.

`SerialSlots` is the same interface over any `Engine` with one slot (the scripted engine, a chat server, an engine
with ``n_seq`` 1): each `step` runs one whole generation. Engine, transport and input errors
(`speco3.errors.OUTCOME_ERRORS`) come back as a slot's outcome; anything else propagates.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from speco3.engine.base import (
    Engine,
    Message,
    Part,
    Sampling,
    Slots,
    StepResult,
    TokenCallback,
)
from speco3.engine.context import LlamaContext
from speco3.engine.decode import TokenLoop
from speco3.engine.sequences import SeqState
from speco3.errors import OUTCOME_ERRORS, EngineError


class SerialSlots(Slots):
    """One slot on any `Engine` (see module doc)."""

    capacity = 1

    def __init__(self, engine: Engine):
        self.engine = engine
        self._job: tuple[int | None, TokenCallback | None, threading.Event | None] | None = None

    def open(self, sampling: Sampling | None) -> int:
        self.engine.load()
        self.engine.reset(sampling=sampling)
        return 0

    def extend(self, slot: int, parts: Sequence[Part], messages: Sequence[Message] | None = None) -> None:
        if messages is not None and self.engine.takes_messages:
            self.engine.extend_messages(messages)  # a chat server: its template writes the markup
        else:
            self.engine.extend(parts)

    def begin(self, slot: int, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
              cancel: threading.Event | None = None) -> None:
        self._job = (max_tokens, on_token, cancel)

    def step(self, rounds: int | None = None) -> list[StepResult]:
        job, self._job = self._job, None
        if job is None:
            return []
        max_tokens, on_token, cancel = job
        try:
            return [(0, self.engine.generate(max_tokens=max_tokens, on_token=on_token, cancel=cancel))]
        except OUTCOME_ERRORS as exc:
            return [(0, exc)]

    def release(self, slot: int) -> None:
        self._job = None

    def close(self) -> None:
        pass


class SequencePool(Slots):
    """Slots on the sequences of one loaded llama.cpp context (see module doc); use it on the engine's thread.
    Slot ``i`` is sequence ``i``; the context's sequences are the pool's until `close`."""

    def __init__(self, context: LlamaContext):
        context.claim_sequences()
        self.context = context
        self.capacity = min(context.n_seq_max, context.n_batch)
        self._live: set[int] = set()
        self._loop = TokenLoop(context, in_use=self._live.__contains__)

    @property
    def counters(self) -> dict[str, int]:
        """Decode rounds, tokens in them, prefix copies, shared cells and deferred admissions so far."""
        return self._loop.counters

    @property
    def generating(self) -> frozenset[int]:
        """Slots with a sampled token waiting for the next decode round."""
        return self._loop.generating

    def sequence(self, slot: int) -> SeqState:
        """The sequence of an open slot (its conversation and KV contents)."""
        if slot not in self._live:
            raise EngineError(f"slot {slot} is not open")
        return self.context.sequences[slot]

    # ------------------------------------------------------------------ slots
    def open(self, sampling: Sampling | None) -> int:
        free = [i for i in range(self.capacity) if i not in self._live]
        if not free:
            raise EngineError(f"all {self.capacity} sequences are in use")
        seq = self.context.sequence(free[0])
        seq.conv = []
        self.context.set_sampling(seq, sampling)
        self._live.add(seq.seq_id)
        return seq.seq_id

    def extend(self, slot: int, parts: Sequence[Part], messages: Sequence[Message] | None = None) -> None:
        self.sequence(slot).conv.extend(self.context.segments(parts))  # llama.cpp sequences take the markup

    def begin(self, slot: int, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
              cancel: threading.Event | None = None) -> None:
        self._loop.begin(self.sequence(slot), max_tokens, on_token, cancel)

    def release(self, slot: int) -> None:
        """End the slot's conversation; its cells are freed (sequence 0 keeps them as the engine's cache)."""
        self._loop.drop(slot)
        self._live.discard(slot)
        if slot != 0 and slot in self.context.sequences:
            self.context.clear(self.context.sequences[slot])

    def close(self) -> None:
        """Release every slot, free the extra sequences and give the context back to the engine."""
        for slot in list(self._live):
            self.release(slot)
        self.context.stats.extra["parallel"] = dict(self.counters)
        self.context.return_sequences()

    # ------------------------------------------------------------------ stepping
    def step(self, rounds: int | None = None) -> list[StepResult]:
        """Admit the slots that began a turn, then decode rounds (one token of every generating slot each) until a
        turn ends or ``rounds`` rounds were done; return the slots whose turn ended (with the result, or the
        engine error that ended it). Running until a turn ends keeps an `EngineWorker` to one call per turn end."""
        self.context.check_thread()
        done = self._loop.step(rounds)
        self.context.stats.extra["parallel"] = dict(self.counters)
        return done


def parallel_sequences(engine: Engine) -> int:
    """How many conversations `open_slots` can run at once on ``engine``: the ``n_seq`` of a llama.cpp engine
    (also inside an `EngineWorker`), 1 for any other engine (scripted, a model server)."""
    return max(1, engine.parallel_sequences())


def open_slots(engine: Engine, wanted: int) -> Slots:
    """Slots for up to ``wanted`` conversations at once: the engine's pool of sequences when it is a llama.cpp
    engine with ``n_seq`` > 1 and ``wanted`` > 1 (loaded now), else `SerialSlots`. Close them after use."""
    if wanted < 2 or parallel_sequences(engine) < 2:
        return SerialSlots(engine)
    try:
        engine.load()
    except OUTCOME_ERRORS:  # the serial path reports it as each episode's engine error
        return SerialSlots(engine)
    return engine.open_pool()


__all__ = ["SequencePool", "SerialSlots", "open_slots", "parallel_sequences"]

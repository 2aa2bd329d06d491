"""The one token loop of the llama.cpp engine: turns on sequences of a `LlamaContext`, admitted and decoded together.

A `Turn` is one generation on one sequence. `TokenLoop.step` first *admits* the turns that began: the longest
prefix any other sequence of the context holds is shared with ``llama_memory_seq_cp`` (the system prompt, task and
first image of K rollouts are evaluated once), the rest is evaluated into the turn's own sequence (tool images with
``mtmd_helper_decode_image_chunk(..., seq_id, ...)``), and its first token is sampled. Then decode rounds follow,
until some turn ends: one ``llama_decode`` carries the pending token of every generating sequence, and each samples
its next token from its own output row with its own sampler. Every sampled token, including the final
``<|im_end|>``, is decoded into the cache and kept verbatim in the conversation.

A turn that would not fit beside the others' cells and answer reserves waits until they finish theirs; when nothing
is generating and it still does not fit, it ends with `ContextFullError` (the count is exact:
`speco3.engine.sequences`). Engine and input errors (`speco3.errors.OUTCOME_ERRORS`) end the turn they belong
to as its outcome; anything else is a bug and propagates.

The engine's own conversation is a loop with one turn at a time on sequence 0
(`speco3.engine.llama.LlamaMtmdEngine.generate`); `speco3.engine.parallel.SequencePool` runs one turn per slot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from speco3.engine.base import (
    GenerationResult,
    StepResult,
    StopReason,
    TokenCallback,
    TokenLogprob,
)
from speco3.engine.context import LlamaContext
from speco3.engine.sampling import PieceStream
from speco3.engine.segments import EvalPlan, Segment, common_prefix, flatten
from speco3.engine.sequences import SeqState
from speco3.errors import OUTCOME_ERRORS, ContextFullError, EngineError


@dataclass
class Turn:
    """The state of one generation on ``seq`` of ``context``."""

    context: LlamaContext
    seq: SeqState
    max_tokens: int
    stream: PieceStream
    cancel: threading.Event | None = None
    seg: Segment = field(default_factory=lambda: Segment("generated"))
    reason: StopReason | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    t_start: float = field(default_factory=time.perf_counter)
    t_gen: float = 0.0
    evaluated: tuple[int, int, int] = (0, 0, 0)  # text tokens, images, image tokens evaluated for this turn

    @classmethod
    def begin(cls, context: LlamaContext, seq: SeqState, max_tokens: int | None, on_token: TokenCallback | None,
              cancel: threading.Event | None) -> Turn:
        max_tokens = int(context.settings.max_tokens_per_turn if max_tokens is None else max_tokens)
        if max_tokens < 1:
            raise EngineError(f"max_tokens must be at least 1, got {max_tokens}")
        return cls(context, seq, max_tokens, PieceStream(on_token), cancel)

    def start(self, plan: EvalPlan) -> None:
        """The prompt is evaluated (``plan``): the message joins the conversation, sampling starts."""
        images = plan.pending_images
        self.evaluated = (plan.pending_text_tokens, len(images), sum(i.n_tokens for i in images))
        self.seq.conv.append(self.seg)
        self.t_gen = time.perf_counter()

    @property
    def remaining(self) -> int:
        """Cells this turn may still fill (what is left of its answer budget)."""
        return self.max_tokens - len(self.seg.tokens)

    def done(self) -> bool:
        """Whether the turn ends here (sets the stop reason); checked before sampling each token."""
        if self.reason is None:
            if len(self.seg.tokens) >= self.max_tokens:
                self.reason = "length"
            elif self.cancel is not None and self.cancel.is_set():
                self.reason = "cancelled"
        return self.reason is not None

    def commit(self, token: int) -> None:
        """A sampled token was decoded into the sequence: keep it, stream it, stop at end-of-generation."""
        self.seg.tokens.append(token)
        if self.context.is_end_of_generation(token):
            self.reason = "stop"
        else:
            self.stream.feed(self.context.token_bytes(token))

    def finish(self) -> GenerationResult:
        now = time.perf_counter()
        text = self.stream.finish()
        self.context.count_turn(len(self.seg.tokens), now - self.t_gen if self.t_gen else 0.0)
        return GenerationResult(
            text=text, n_tokens=len(self.seg.tokens), stop_reason=self.reason or "length", seconds=now - self.t_start,
            prompt_tokens=self.evaluated[0], images_encoded=self.evaluated[1], image_tokens=self.evaluated[2],
            logprobs=list(self.logprobs),
        )


class TokenLoop:
    """Turns on sequences of one context, admitted and decoded together (see module doc). Sequences are named by
    their id; one turn per sequence at a time. ``in_use(seq_id)`` says whether a sequence's conversation is still
    wanted: sequence 0's cache is freed for a turn that does not fit only when it is not (a pool's closed slot)."""

    def __init__(self, context: LlamaContext, in_use: Callable[[int], bool] = lambda seq_id: True):
        self.context = context
        self._in_use = in_use
        self._turns: dict[int, Turn] = {}
        self._waiting: list[int] = []
        self._pending: dict[int, int] = {}  # sequence -> sampled token, decoded at the next round
        self.counters = dict(rounds=0, round_tokens=0, prefix_copies=0, shared_cells=0, deferred=0)

    def begin(self, seq: SeqState, max_tokens: int | None, on_token: TokenCallback | None,
              cancel: threading.Event | None) -> None:
        """Queue a turn on ``seq`` (its conversation must end with the assistant header); it starts at `step`."""
        if seq.seq_id in self._turns:
            raise EngineError(f"slot {seq.seq_id} is already generating")
        self._turns[seq.seq_id] = Turn.begin(self.context, seq, max_tokens, on_token, cancel)
        self._waiting.append(seq.seq_id)

    def drop(self, seq_id: int) -> None:
        """Forget the turn of ``seq_id`` (its conversation ends; nothing is returned for it)."""
        self._turns.pop(seq_id, None)
        self._pending.pop(seq_id, None)
        if seq_id in self._waiting:
            self._waiting.remove(seq_id)

    @property
    def generating(self) -> frozenset[int]:
        """Sequences with a sampled token waiting for the next decode round."""
        return frozenset(self._pending)

    def step(self, rounds: int | None = None) -> list[StepResult]:
        """Admit the turns that began, then decode rounds (one token of every generating sequence each) until a
        turn ends or ``rounds`` rounds were done; return the sequences whose turn ended (with the result, or the
        engine error that ended it)."""
        done: list[StepResult] = []
        self._admit(done)
        n = 0
        while self._pending and not done and (rounds is None or n < rounds):
            self._round(done)
            n += 1
        return done

    def _reserved(self) -> int:
        """Cells the generating turns may still fill (their remaining answer budgets)."""
        return sum(self._turns[s].remaining for s in self._pending)

    def _admit(self, done: list[StepResult]) -> None:
        ctx = self.context
        for sid in list(self._waiting):
            turn = self._turns[sid]
            if turn.done():  # cancelled before it started
                self._end(sid, turn.finish(), done)
                continue
            try:
                self._share_prefix(turn.seq)
                plan = ctx.evaluate(turn.seq, turn.max_tokens + self._reserved())
            except ContextFullError as exc:
                if self._pending:  # the others hold cells that come back when their turns end: wait
                    self.counters["deferred"] += 1
                    continue
                if self._reclaim_cache(turn.seq):
                    self._waiting.remove(sid)
                    self._waiting.insert(0, sid)
                    return self._admit(done)
                self._end(sid, exc, done)
                continue
            except OUTCOME_ERRORS as exc:
                self._end(sid, exc, done)
                continue
            self._waiting.remove(sid)
            turn.start(plan)
            self._pending[sid] = ctx.sample(turn.seq, -1, turn.logprobs)

    def _reclaim_cache(self, seq: SeqState) -> bool:
        """Free sequence 0's cache when it is idle (not in use) and holds cells; True when something was freed."""
        idle = self.context.sequences[0]
        if self._in_use(0) or idle is seq or not idle.kv:
            return False
        before = self.context.cells.used
        self.context.clear_cache(idle)
        return self.context.cells.used < before

    def _share_prefix(self, seq: SeqState) -> None:
        """Copy the longest prefix another sequence holds (if longer than the slot's own) into the slot."""
        items = flatten(seq.conv)
        best, n = None, common_prefix(seq.kv, items)
        for other in self.context.sequences.values():  # on a tie, a sequence whose logits row is current
            if other is not seq:
                c = common_prefix(other.kv, items)
                if c > n or (best is not None and c == n and other.logits_valid):
                    best, n = other, c
        if best is None:
            return
        self.context.copy_prefix(best, seq, n)
        self.counters["prefix_copies"] += 1
        self.counters["shared_cells"] += sum(1 if isinstance(it, int) else it.n_tokens for it in seq.kv)

    def _round(self, done: list[StepResult]) -> None:
        """One ``llama_decode`` with the pending token of every generating sequence, then sample each one's next."""
        ctx = self.context
        order = list(self._pending.items())
        self._pending.clear()
        self.counters["rounds"] += 1
        self.counters["round_tokens"] += len(order)
        try:
            ctx.decode_round([(self._turns[sid].seq, tok) for sid, tok in order])
        except EngineError as exc:
            for sid, _ in order:
                self._end(sid, exc, done)
            return
        for i, (sid, tok) in enumerate(order):
            turn = self._turns[sid]
            turn.commit(tok)
            if turn.done():
                self._end(sid, turn.finish(), done)
            else:
                self._pending[sid] = ctx.sample(turn.seq, i, turn.logprobs)

    def _end(self, sid: int, outcome: GenerationResult | Exception, done: list[StepResult]) -> None:
        self._turns.pop(sid, None)
        if sid in self._waiting:
            self._waiting.remove(sid)
        done.append((sid, outcome))


__all__ = ["TokenLoop", "Turn"]

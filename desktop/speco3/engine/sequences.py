"""Sequences of one llama.cpp context and an exact count of the KV cells they hold.

The context is opened with ``n_seq_max = EngineSettings.n_seq`` and a *unified* KV cache (``kv_unified``): one
buffer of ``n_ctx`` cells shared by all sequences (``n_ctx_seq == n_ctx``). In that layout
``llama_memory_seq_cp(src, dst, p0, p1)`` copies no data: it adds ``dst`` to the seq set of every cell of ``src`` in
``[p0, p1)``, so a prefix copied to K sequences occupies its cells once. (Without ``kv_unified`` llama.cpp gives each
sequence its own stream of ``n_ctx / n_seq_max`` cells, padded to 256, and ``seq_cp`` copies whole streams; a shared
prefix would then cost K times its cells and each sequence could use only ``n_ctx / K``.)

`CellLedger` mirrors that sharing: every evaluated item gets a cell id; copying a prefix to another sequence shares
the ids; a cell is free again when no sequence refers to it. ``ledger.used`` is therefore exactly the number of
occupied KV cells, and the budget check (cells in use + cells to evaluate + the answer reserves of every generating
sequence ≤ ``n_ctx``) stays exact for any number of sequences.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from speco3.engine.base import GenerationResult, Sampling, StopReason, TokenCallback, TokenLogprob
from speco3.engine.sampling import PieceStream
from speco3.engine.segments import EvalPlan, Item, Segment, positions_of
from speco3.errors import EngineError


class CellLedger:
    """Which KV cells are occupied, with sharing between sequences (see module doc)."""

    def __init__(self) -> None:
        self._refs: dict[int, list[int]] = {}  # cell id -> [references, cells]
        self._ids = itertools.count()
        self.used = 0

    def new(self, items: list[Item]) -> list[int]:
        """Ids for freshly evaluated items (one reference each)."""
        out = []
        for it in items:
            cid = next(self._ids)
            cells = 1 if isinstance(it, int) else it.n_tokens
            self._refs[cid] = [1, cells]
            self.used += cells
            out.append(cid)
        return out

    def share(self, ids: list[int]) -> None:
        for cid in ids:
            self._refs[cid][0] += 1

    def drop(self, ids: list[int]) -> None:
        for cid in ids:
            ref = self._refs[cid]
            ref[0] -= 1
            if ref[0] == 0:
                self.used -= ref[1]
                del self._refs[cid]

    def freed_by(self, ids: list[int]) -> int:
        """Cells that dropping ``ids`` would free (those no other sequence shares)."""
        return sum(self._refs[cid][1] for cid in ids if self._refs[cid][0] == 1)


@dataclass
class SeqState:
    """One sequence of the context: the conversation wanted, the items its KV cells hold, its sampler.

    ``kv`` and ``ids`` are parallel (item, cell id); ``kv_pos`` is the next position (M-RoPE: images advance it by
    ``max(nx, ny)``); ``logits_valid`` says the context's last output row is this sequence's next-token logits.
    """

    seq_id: int
    ledger: CellLedger
    conv: list[Segment] = field(default_factory=list)
    kv: list[Item] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    kv_pos: int = 0
    logits_valid: bool = False
    sampler: Any = None
    sampling: Sampling | None = None

    def push(self, items: list[Item], n_pos: int) -> None:
        """Record evaluated items (advancing the position by ``n_pos``)."""
        self.kv.extend(items)
        self.ids.extend(self.ledger.new(items))
        self.kv_pos += n_pos

    def truncate(self, keep: int) -> None:
        """Forget the KV items from ``keep`` on (the caller removed them with ``seq_rm``)."""
        self.ledger.drop(self.ids[keep:])
        del self.kv[keep:], self.ids[keep:]
        self.kv_pos = positions_of(self.kv)
        self.logits_valid = False

    def adopt(self, donor: SeqState, n: int) -> None:
        """Take the donor's first ``n`` items as shared cells (the caller did ``seq_cp``; own KV was cleared)."""
        self.ledger.drop(self.ids)
        self.kv, self.ids = list(donor.kv[:n]), list(donor.ids[:n])
        self.ledger.share(self.ids)
        self.kv_pos = positions_of(self.kv)
        self.logits_valid = False

    def cells_after_cut(self, keep: int) -> int:
        """Cells in use (all sequences) once this sequence keeps only its first ``keep`` items."""
        return self.ledger.used - self.ledger.freed_by(self.ids[keep:])


@dataclass
class Turn:
    """The state of one generation (see module doc); ``engine`` is the `LlamaMtmdEngine` that owns ``seq``."""

    engine: object
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
    def begin(cls, engine, seq: SeqState, max_tokens: int | None, on_token: TokenCallback | None,
              cancel: threading.Event | None) -> Turn:
        max_tokens = int(engine.settings.max_tokens_per_turn if max_tokens is None else max_tokens)
        if max_tokens < 1:
            raise EngineError(f"max_tokens must be at least 1, got {max_tokens}")
        return cls(engine, seq, max_tokens, PieceStream(on_token), cancel)

    def start(self, plan: EvalPlan) -> None:
        """The prompt is evaluated (``plan``): the message joins the conversation, sampling starts."""
        images = plan.pending_images
        self.evaluated = (plan.pending_text_tokens, len(images), sum(i.n_tokens for i in images))
        self.seq.conv.append(self.seg)
        self.t_gen = time.perf_counter()

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
        eng = self.engine
        self.seg.tokens.append(token)
        if eng._llama.llama_vocab_is_eog(eng._vocab, token):
            self.reason = "stop"
        else:
            self.stream.feed(eng.token_bytes(token))

    def finish(self) -> GenerationResult:
        eng, st = self.engine, self.engine._stats
        now = time.perf_counter()
        text = self.stream.finish()
        if self.t_gen:
            eng._t_decode += now - self.t_gen
        st.tokens_generated += len(self.seg.tokens)
        st.decode_tokens_per_s = st.tokens_generated / eng._t_decode if eng._t_decode > 0 else 0.0
        st.prefill_tokens_per_s = st.text_tokens_evaluated / eng._t_prefill if eng._t_prefill > 0 else 0.0
        return GenerationResult(
            text=text, n_tokens=len(self.seg.tokens), stop_reason=self.reason or "length", seconds=now - self.t_start,
            prompt_tokens=self.evaluated[0], images_encoded=self.evaluated[1], image_tokens=self.evaluated[2],
            logprobs=list(self.logprobs),
        )


__all__ = ["CellLedger", "SeqState", "Turn"]

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
from collections.abc import Sequence
from dataclasses import dataclass, field

from speco3.engine.base import Sampling
from speco3.engine.segments import Item, Segment, positions_of


class CellLedger:
    """Which KV cells are occupied, with sharing between sequences (see module doc)."""

    def __init__(self) -> None:
        self._refs: dict[int, list[int]] = {}  # cell id -> [references, cells]
        self._ids = itertools.count()
        self.used = 0

    def new(self, items: Sequence[Item]) -> list[int]:
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
    sampler: object | None = None  # a llama.cpp sampler chain (``llama_sampler_p``), freed by the context
    sampling: Sampling | None = None

    def push(self, items: Sequence[Item], n_pos: int) -> None:
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


__all__ = ["CellLedger", "SeqState"]

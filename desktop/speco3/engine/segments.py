"""Conversation bookkeeping of the mtmd engine: committed segments, KV contents, prefix planning.

A conversation is a list of *segments*: text (token ids, either tokenized prompt text or sampled tokens kept
verbatim) and images (identified by the SHA-256 of their pixels). For planning, segments are flattened into
*items*: one ``int`` per text token and one `ImageItem` per image. An image is atomic: the KV cache can only be
cut before or after it, never inside it.

With M-RoPE (Qwen2-VL family) an image of ``nx × ny`` tokens fills ``nx·ny`` KV *cells* but advances the
position counter by only ``max(nx, ny)``. Both counters are kept: cells decide whether the conversation fits in
``n_ctx``; positions are what ``llama_memory_seq_rm`` and ``mtmd_helper_eval_chunk_single`` take.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Union

from speco3.imaging import PreparedImage


@dataclass(frozen=True)
class ImageItem:
    """An image in the conversation. Equal when the pixels (sha256) and the token grid are equal."""

    sha256: str
    n_tokens: int
    n_pos: int
    image: PreparedImage | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, image: PreparedImage) -> ImageItem:
        return cls(image.sha256, image.n_tokens, image.position_advance, image)


Item = Union[int, ImageItem]  # noqa: UP007 - a runtime alias


@dataclass
class Segment:
    """One committed piece of the conversation.

    Attributes
    ----------
    kind : {"text", "generated", "image"}
        Prompt text written by the caller, tokens sampled by the model, or an image.
    tokens : list of int
        Token ids (text kinds).
    image : ImageItem or None
        The image (image kind).
    """

    kind: Literal["text", "generated", "image"]
    tokens: list[int] = field(default_factory=list)
    image: ImageItem | None = None

    @property
    def n_cells(self) -> int:
        return self.image.n_tokens if self.image is not None else len(self.tokens)

    @property
    def n_pos(self) -> int:
        return self.image.n_pos if self.image is not None else len(self.tokens)

    def items(self) -> list[Item]:
        return [self.image] if self.image is not None else list(self.tokens)


def flatten(segments: Iterable[Segment]) -> list[Item]:
    """Items of a segment list, in order."""
    out: list[Item] = []
    for seg in segments:
        out.extend(seg.items())
    return out


def cells_of(items: Iterable[Item]) -> int:
    """KV cells the items occupy (text: 1 per token; image: nx·ny)."""
    return sum(1 if isinstance(it, int) else it.n_tokens for it in items)


def positions_of(items: Iterable[Item]) -> int:
    """Positions the items advance (text: 1 per token; M-RoPE image: max(nx, ny))."""
    return sum(1 if isinstance(it, int) else it.n_pos for it in items)


def common_prefix(a: Sequence[Item], b: Sequence[Item]) -> int:
    """Length of the longest common item prefix (images compare by sha256 and grid)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def runs(items: Sequence[Item]) -> list[list[int] | ImageItem]:
    """Group items into runs to evaluate: lists of consecutive token ids, and single images."""
    out: list[list[int] | ImageItem] = []
    for it in items:
        if isinstance(it, int):
            if out and isinstance(out[-1], list):
                out[-1].append(it)
            else:
                out.append([it])
        else:
            out.append(it)
    return out


@dataclass(frozen=True)
class EvalPlan:
    """What one evaluation will do.

    Attributes
    ----------
    keep : int
        Items of the KV cache that are kept (the reused prefix).
    cut_pos : int or None
        Position from which the KV cache is cleared (``seq_rm``), or None when nothing is removed.
    pending : list
        Items to evaluate, in order.
    kept_cells, pending_cells : int
        KV cells of the kept prefix and of the pending items.
    """

    keep: int
    cut_pos: int | None
    pending: list[Item]
    kept_cells: int
    pending_cells: int

    @property
    def total_cells(self) -> int:
        return self.kept_cells + self.pending_cells

    @property
    def pending_text_tokens(self) -> int:
        return sum(1 for it in self.pending if isinstance(it, int))

    @property
    def pending_images(self) -> list[ImageItem]:
        return [it for it in self.pending if not isinstance(it, int)]


def plan_evaluation(kv: Sequence[Item], conversation: Sequence[Item], logits_valid: bool) -> EvalPlan:
    """Plan how to bring the KV cache from ``kv`` to ``conversation``, reusing the longest common prefix.

    Parameters
    ----------
    kv : sequence of Item
        What the KV cache holds now (in position order).
    conversation : sequence of Item
        The conversation to evaluate.
    logits_valid : bool
        Whether the context still holds the logits of the last item of ``kv``. When the whole conversation
        is already cached but those logits are gone, the last item is evaluated again to get them back.
    """
    keep = common_prefix(kv, conversation)
    if keep == len(conversation) and keep > 0 and not (keep == len(kv) and logits_valid):
        keep -= 1  # re-evaluate the last item to get logits (server-style)
    cut_pos = positions_of(kv[:keep]) if keep < len(kv) else None
    pending = list(conversation[keep:])
    return EvalPlan(
        keep=keep,
        cut_pos=cut_pos,
        pending=pending,
        kept_cells=cells_of(conversation[:keep]),
        pending_cells=cells_of(pending),
    )

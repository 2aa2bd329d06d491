"""`Turn`: one assistant message being sampled on one sequence (shared by single and parallel generation).

The engine evaluates the pending conversation, then repeatedly samples a token, decodes it into the sequence and
`commit`s it: the token joins the conversation verbatim (the final ``<|im_end|>`` included), its bytes go to the
``on_token`` stream, and the turn stops at the end-of-generation token, the ``max_tokens`` budget or a cancel.
`finish` turns the counters into the `GenerationResult`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from speco3.engine.base import GenerationResult, StopReason, TokenCallback, TokenLogprob
from speco3.engine.sampling import PieceStream
from speco3.engine.segments import EvalPlan, Segment
from speco3.engine.sequences import SeqState
from speco3.errors import EngineError


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


__all__ = ["Turn"]

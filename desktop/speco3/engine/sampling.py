"""Sampling and streaming helpers of the llama.cpp engine.

`token_logprob` gives a sampled token's log-probability and the top alternatives. `build_sampler` makes llama.cpp's sampler chain from `EngineSettings`: greedy when the temperature is 0 (the
paper's evaluation setting), otherwise top-k → top-p → temperature → seeded draw. `PieceStream` turns the bytes
of sampled tokens into text pieces for streaming, holding back a UTF-8 character split across tokens.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Callable

import numpy as np

from speco3.engine.base import EngineSettings, Sampling, TokenCallback, TokenLogprob

logger = logging.getLogger(__name__)


def build_sampler(llama, settings: EngineSettings | Sampling):
    """A new llama.cpp sampler chain for ``settings`` (free it with ``llama_sampler_free``).

    Parameters
    ----------
    llama : module
        ``llama_cpp.llama_cpp``.
    settings : EngineSettings or Sampling
        ``temperature`` (0: greedy), ``top_k`` (0: off), ``top_p`` (1: off) and ``seed``.
    """
    chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
    if settings.temperature <= 0:
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_greedy())
        return chain
    if settings.top_k and settings.top_k > 0:
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_k(int(settings.top_k)))
    if 0 < settings.top_p < 1:
        llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_p(float(settings.top_p), 1))
    llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_temp(float(settings.temperature)))
    llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_dist(int(settings.seed) & 0xFFFFFFFF))
    return chain


def token_logprob(logits: np.ndarray, token: int, n_top: int, text: Callable[[int], str]) -> TokenLogprob:
    """The sampled ``token``'s log-probability (log-softmax of the raw ``logits``, before temperature and
    truncation) and the ``n_top`` most probable tokens with theirs, best first (``text`` renders a token id)."""
    x = np.asarray(logits, dtype=np.float32)
    m = float(np.max(x))
    lse = m + float(np.log(np.sum(np.exp(x - m), dtype=np.float64)))  # float32 exp (fast), float64 sum
    n_top = max(0, min(int(n_top), x.size))
    top_ids = np.argpartition(x, x.size - n_top)[x.size - n_top:] if n_top else np.empty(0, dtype=np.int64)
    top_ids = top_ids[np.argsort(-x[top_ids], kind="stable")]
    top = tuple((text(int(i)), float(x[i]) - lse) for i in top_ids)
    return TokenLogprob(text(int(token)), float(x[token]) - lse, top)


class PieceStream:
    """Turn token bytes into text pieces; a UTF-8 character split across tokens comes out whole.

    Parameters
    ----------
    on_piece : callable, optional
        Called with every non-empty piece as soon as it is complete.

    Notes
    -----
    Invalid bytes become U+FFFD (a model can sample any byte token). The concatenation of the pieces is
    exactly the text `finish` returns.
    """

    def __init__(self, on_piece: TokenCallback | None = None):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._on_piece = on_piece
        self.pieces: list[str] = []

    def feed(self, data: bytes, final: bool = False) -> str:
        """Add the bytes of one token; return the piece that became complete (may be empty)."""
        piece = self._decoder.decode(data, final=final)
        if piece:
            self.pieces.append(piece)
            if self._on_piece is not None:
                self._on_piece(piece)
        return piece

    def finish(self) -> str:
        """Flush incomplete bytes (as U+FFFD) and return the whole text."""
        self.feed(b"", final=True)
        return "".join(self.pieces)

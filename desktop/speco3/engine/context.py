"""`LlamaContext`: the native objects of one loaded model and the operations on its sequences.

One llama model, one llama context (``n_seq_max`` sequences in one unified KV cache, `speco3.engine.sequences`),
one mtmd projector context and one token batch; the sequences (`SeqState`, sequence 0 first) with the ledger of
the KV cells they hold; the counters the engine reports. Everything that touches llama.cpp or mtmd goes through
this object: tokenizing text and images, evaluating a sequence up to its conversation, decoding one round of
sampled tokens, sampling, copying a prefix between sequences, removing a sequence's cells.

Both ways of generating sit on it through one token loop (`speco3.engine.decode.TokenLoop`): the engine's own
conversation (sequence 0, `speco3.engine.llama.LlamaMtmdEngine.generate`) and the slots of
`speco3.engine.parallel.SequencePool`. At most one pool is open on a context at a time (`claim_sequences`).

Logits: after every native decode the context's last output row belongs to one sequence at most; the context
keeps ``logits_valid`` of every sequence true only for the ones whose next-token logits that row is (a prefix
copied from such a sequence, complete, shares it). Not thread-safe: one thread makes every call.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import MutableSequence, Sequence
from pathlib import Path
from types import ModuleType
from typing import Protocol

import numpy as np

from speco3.engine import native
from speco3.engine.base import EngineSettings, EngineStats, Part, Sampling, TokenLogprob
from speco3.engine.mtmd_image import EmbeddingCache, eval_image, tokenize_image
from speco3.engine.sampling import build_sampler, token_logprob
from speco3.engine.segments import EvalPlan, ImageItem, Segment, flatten, plan_evaluation, positions_of, runs
from speco3.engine.sequences import CellLedger, SeqState
from speco3.errors import ContextFullError, EngineError, ModelFileError
from speco3.imaging import FACTOR, MIN_PIXELS, PreparedImage, effective_max_tokens

logger = logging.getLogger(__name__)

KV_TYPES = {"f32": 0, "f16": 1, "q8_0": 8}  # ggml_type ids


class TokenBatch(Protocol):
    """The fields of llama.cpp's ``llama_batch`` that the context fills (one row per token)."""

    token: MutableSequence[int]
    pos: MutableSequence[int]
    n_seq_id: MutableSequence[int]
    seq_id: Sequence[MutableSequence[int]]
    logits: MutableSequence[int]
    n_tokens: int


class LlamaContext:
    """The native objects of one loaded model and its sequences (see module doc).

    Build it with `open`; `close` frees everything (also after a partial `open`).
    """

    def __init__(self, llama: ModuleType, mtmd: ModuleType, settings: EngineSettings, image_cache: EmbeddingCache,
                 n_batch: int):
        self._llama, self._mtmd = llama, mtmd
        self.settings = settings
        self.image_cache = image_cache
        self.n_batch = int(n_batch)
        # native handles (ctypes pointers of llama.cpp and mtmd; None until loaded, and again after close)
        self._model: object | None = None
        self._ctx: object | None = None
        self._mctx: object | None = None
        self._vocab: object | None = None
        self._batch: TokenBatch | None = None
        self._n_ctx = 0
        self.cells = CellLedger()
        self.sequences: dict[int, SeqState] = {0: SeqState(0, self.cells)}
        self.stats = EngineStats(n_ctx=settings.n_ctx)
        self._t_prefill = self._t_decode = 0.0
        self._logits_of: list[SeqState] = []  # the sequences whose next-token logits are the last output row
        self._claimed = False
        self._owner = threading.current_thread()

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(cls, llama: ModuleType, mtmd: ModuleType, text_path: Path, mmproj_path: Path, settings: EngineSettings,
             image_cache: EmbeddingCache, *, n_batch: int, n_gpu_layers: int, n_ctx: int, mmproj_gpu: bool,
             use_mmap: bool, warmup: bool) -> LlamaContext:
        """Load the model and projector into a new context; on failure free what was made and raise
        `ModelFileError` (a file llama.cpp or mtmd refuses) or `EngineError`."""
        self = cls(llama, mtmd, settings, image_cache, n_batch)
        try:
            self._load(text_path, mmproj_path, n_gpu_layers, n_ctx, mmproj_gpu, use_mmap, warmup)
        except BaseException:
            self.close()
            raise
        return self

    def _load(self, text_path: Path, mmproj_path: Path, n_gpu_layers: int, n_ctx: int, mmproj_gpu: bool,
              use_mmap: bool, warmup: bool) -> None:
        llama, mtmd, s = self._llama, self._mtmd, self.settings
        mp = llama.llama_model_default_params()
        mp.n_gpu_layers = int(n_gpu_layers)
        no_devices = (ctypes.c_void_p * 1)()  # a NULL-terminated empty device list; alive until the load returns
        if mp.n_gpu_layers == 0:
            # 0 layers means the CPU alone: with the default device list llama.cpp would still run large-batch
            # matrix products (prefill) on a GPU it finds, the very device that may just have failed to load
            mp.devices = ctypes.addressof(no_devices)
        mp.load_mode = llama.LLAMA_LOAD_MODE_MMAP if use_mmap and llama.llama_supports_mmap() else llama.LLAMA_LOAD_MODE_NONE
        self._model = llama.llama_model_load_from_file(str(text_path).encode(), mp)
        if not self._model:
            raise ModelFileError(text_path, f"llama.cpp could not load the model: {native.recent_native_problems()}")
        threads, threads_batch = native.default_threads()
        if s.n_threads:
            threads = threads_batch = int(s.n_threads)
        cp = llama.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = int(n_ctx), self.n_batch, self.n_batch, max(1, int(s.n_seq))
        cp.kv_unified = True  # one cell buffer shared by all sequences (engine.sequences)
        cp.n_threads, cp.n_threads_batch = threads, threads_batch
        self.stats.extra.update(n_threads=threads, n_threads_batch=threads_batch)  # recorded with every verdict
        fa = llama.LLAMA_FLASH_ATTN_TYPE_ENABLED if s.flash_attn else llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.flash_attn_type = fa
        cp.type_k = cp.type_v = KV_TYPES[s.kv_type]
        self._ctx = llama.llama_init_from_model(self._model, cp)
        if not self._ctx:
            raise EngineError(f"llama.cpp could not create a context of {n_ctx} tokens: {native.recent_native_problems()}")
        self._vocab = llama.llama_model_get_vocab(self._model)
        self._apply_lora()
        mp2 = mtmd.mtmd_context_params_default()
        mp2.use_gpu = bool(mmproj_gpu)
        mp2.n_threads, mp2.print_timings, mp2.warmup, mp2.flash_attn_type = threads_batch, False, warmup, fa
        # images arrive already resized (speco3.imaging): let mtmd accept every size the HF processor produces
        mp2.image_min_tokens = MIN_PIXELS // (FACTOR * FACTOR)
        mp2.image_max_tokens = effective_max_tokens(s.image_max_tokens)
        self._mctx = mtmd.mtmd_init_from_file(str(mmproj_path).encode(), self._model, mp2)
        if not self._mctx:
            raise ModelFileError(mmproj_path, f"mtmd could not load the projector: {native.recent_native_problems()}")
        if not mtmd.mtmd_support_vision(self._mctx):
            raise ModelFileError(mmproj_path, "the projector has no vision support")
        self._batch = llama.llama_batch_init(self.n_batch, 0, 1)
        self._n_ctx = int(llama.llama_n_ctx(self._ctx))
        ids = self.tokenize("<|im_end|>")
        if len(ids) != 1:
            raise ModelFileError(text_path, f"vocabulary has no single token for '<|im_end|>' (got {ids})")
        self.set_sampling(self.sequences[0], None)

    def _apply_lora(self) -> None:
        """Load the settings' LoRA adapters onto the model and set them, with their scales, on the context (they
        are freed with the model)."""
        llama, adapters = self._llama, self.settings.lora
        if not adapters:
            return
        handles = []
        for a in adapters:
            handle = llama.llama_adapter_lora_init(self._model, str(a.path).encode())
            if not handle:
                raise ModelFileError(a.path, "llama.cpp could not load the LoRA adapter: "
                                             f"{native.recent_native_problems()}")
            handles.append(handle)
        arr = (llama.llama_adapter_lora_p_ctypes * len(handles))(*handles)
        scales = (ctypes.c_float * len(handles))(*(float(a.scale) for a in adapters))
        rc = llama.llama_set_adapters_lora(self._ctx, arr, len(handles), scales)
        if rc != 0:
            raise EngineError(f"llama.cpp could not set the LoRA adapters (code {rc}): "
                              f"{native.recent_native_problems()}")
        logger.info("LoRA adapters: %s", ", ".join(f"{a.path} x {a.scale:g}" for a in adapters))

    def close(self) -> None:
        """Free the samplers, the batch, the projector, the context and the model (idempotent)."""
        llama = self._llama
        for seq in self.sequences.values():
            self.free_sampler(seq)
        if self._batch is not None:
            llama.llama_batch_free(self._batch)
        if self._mctx:
            self._mtmd.mtmd_free(self._mctx)
        if self._ctx:
            llama.llama_free(self._ctx)
        if self._model:
            llama.llama_model_free(self._model)
        self._batch = self._mctx = self._ctx = self._model = self._vocab = None
        self.cells = CellLedger()
        self.sequences = {0: SeqState(0, self.cells)}
        self._logits_of = []

    def check_thread(self) -> None:
        """Raise `EngineError` unless called from the thread that loaded the context (llama.cpp is not
        thread-safe; `speco3.engine.worker.EngineWorker` gives every caller that thread)."""
        if threading.current_thread() is not self._owner:
            raise EngineError("LlamaMtmdEngine must be used from the thread that loaded it (use EngineWorker)")

    @property
    def n_ctx(self) -> int:
        """KV cells of the context (what llama.cpp made of the requested size)."""
        return self._n_ctx

    @property
    def n_seq_max(self) -> int:
        return int(self._llama.llama_n_seq_max(self._ctx))

    # ------------------------------------------------------------------ sequences
    def claim_sequences(self) -> None:
        """Hand the sequences to one pool (`speco3.engine.parallel.SequencePool`) until `return_sequences`."""
        if self._claimed:
            raise EngineError("the engine already runs a pool of sequences")
        self._claimed = True

    def return_sequences(self) -> None:
        """The pool is closed: free the extra sequences (their samplers too); sequence 0 keeps its cache."""
        for sid in [sid for sid in self.sequences if sid != 0]:
            seq = self.sequences.pop(sid)
            self.clear(seq)
            self.free_sampler(seq)
        self._claimed = False

    @property
    def sequences_claimed(self) -> bool:
        """Whether a pool holds the sequences (the engine's own conversation then waits)."""
        return self._claimed

    def sequence(self, seq_id: int) -> SeqState:
        """Sequence ``seq_id`` (made on first use)."""
        return self.sequences.setdefault(seq_id, SeqState(seq_id, self.cells))

    def clear(self, seq: SeqState) -> None:
        """Remove every cell of ``seq`` from the KV cache and forget its conversation."""
        if seq.kv:
            self.clear_cache(seq)
        seq.conv = []

    def clear_cache(self, seq: SeqState) -> None:
        """Remove every cell of ``seq`` from the KV cache (its conversation stays)."""
        self._llama.llama_memory_seq_rm(self._memory(), seq.seq_id, -1, -1)
        seq.truncate(0)

    def copy_prefix(self, src: SeqState, dst: SeqState, n: int) -> None:
        """Make the first ``n`` items of ``src`` the KV contents of ``dst`` (shared cells, ``seq_cp``); when that is
        all of ``src`` and ``src``'s logits are the last output row, they serve ``dst`` too."""
        mem = self._memory()
        self._llama.llama_memory_seq_rm(mem, dst.seq_id, -1, -1)
        self._llama.llama_memory_seq_cp(mem, src.seq_id, dst.seq_id, 0, positions_of(src.kv[:n]))
        shares_row = src.logits_valid and n == len(src.kv)
        dst.adopt(src, n)
        if shares_row:
            dst.logits_valid = True
            self._logits_of.append(dst)

    def seq_pos_max(self, seq_id: int) -> int:
        """llama.cpp's own last position of sequence ``seq_id`` (-1 when empty)."""
        return int(self._llama.llama_memory_seq_pos_max(self._memory(), seq_id))

    def _memory(self):
        return self._llama.llama_get_memory(self._ctx)

    # ------------------------------------------------------------------ tokens
    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens parsed, no BOS)."""
        llama = self._llama
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (llama.llama_token * n_max)()
        n = llama.llama_tokenize(self._vocab, data, len(data), buf, n_max, False, True)
        if n < 0:  # buffer too small: -n is the size needed
            n_max = -n
            buf = (llama.llama_token * n_max)()
            n = llama.llama_tokenize(self._vocab, data, len(data), buf, n_max, False, True)
        if n < 0:
            raise EngineError(f"tokenization of {len(data)} bytes failed ({n})")
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """UTF-8 bytes of one token (special tokens rendered)."""
        buf = ctypes.create_string_buffer(64)
        n = self._llama.llama_token_to_piece(self._vocab, token, buf, 64, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._llama.llama_token_to_piece(self._vocab, token, buf, -n, 0, True)
        return buf.raw[:n]

    def token_text(self, token: int) -> str:
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def is_end_of_generation(self, token: int) -> bool:
        return bool(self._llama.llama_vocab_is_eog(self._vocab, token))

    def segments(self, parts: Sequence[Part]) -> list[Segment]:
        """Conversation segments of text (tokenized now, special tokens parsed) and images (checked against mtmd
        now: the markers mtmd puts around an image become text segments)."""
        new: list[Segment] = []
        for part in parts:
            if isinstance(part, str):
                if part:
                    new.append(Segment("text", self.tokenize(part)))
            elif isinstance(part, PreparedImage):
                cap = self.settings.image_max_tokens
                if cap and part.n_tokens > cap:
                    raise EngineError(f"image has {part.n_tokens} tokens, above the engine's cap of {cap}")
                chunks = tokenize_image(self._mtmd, self._llama, self._mctx, part)
                chunks.free(self._mtmd)
                if chunks.before:
                    new.append(Segment("text", chunks.before))
                new.append(Segment("image", image=ImageItem(part.sha256, chunks.n_tokens, chunks.n_pos, part)))
                if chunks.after:
                    new.append(Segment("text", chunks.after))
            else:
                raise TypeError(f"a conversation part must be str or PreparedImage, not {type(part).__name__}")
        return new

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, seq: SeqState, reserve: int = 0) -> EvalPlan:
        """Bring the KV cache of ``seq`` up to its conversation; afterwards its next-token logits are the last
        output row. ``reserve``: KV cells that must stay free after it (answer budgets; every sequence's cells
        count). Raises `ContextFullError` with the numbers, before evaluating anything, when they would not fit."""
        items = flatten(seq.conv)
        if not items:
            raise EngineError("nothing to evaluate: the conversation is empty")
        if not isinstance(items[-1], int):
            raise EngineError("the conversation must end with text (the assistant header) before generating")
        plan = plan_evaluation(seq.kv, items, seq.logits_valid)
        need = seq.cells_after_cut(plan.keep) + plan.pending_cells
        if need + reserve > self._n_ctx:
            raise ContextFullError(
                f"context full: the conversation needs {plan.total_cells} KV cells ({len(items)} items), "
                f"{need} cells in use in all with it, and {reserve} more reserved for answers = {need + reserve} > "
                f"n_ctx {self._n_ctx}; M-RoPE models cannot shift the context, so start a new session or raise n_ctx"
            )
        if plan.cut_pos is not None:
            self._cut(seq, plan.keep, plan.cut_pos)
        for run in runs(plan.pending):
            if isinstance(run, list):
                t0 = time.perf_counter()
                self._decode_text(seq, run)
                self._t_prefill += time.perf_counter() - t0
                self.stats.text_tokens_evaluated += len(run)
            else:
                self._eval_image(seq, run)
        self.stats.extra["last_eval"] = {
            "reused_cells": plan.kept_cells, "removed_from_pos": plan.cut_pos,
            "text_tokens": plan.pending_text_tokens, "images": len(plan.pending_images),
            "image_tokens": sum(i.n_tokens for i in plan.pending_images),
        }
        return plan

    def _cut(self, seq: SeqState, keep: int, pos: int) -> None:
        mem = self._memory()
        if not self._llama.llama_memory_seq_rm(mem, seq.seq_id, pos, -1):
            logger.warning("partial KV removal refused at position %d; clearing the sequence", pos)
            self._llama.llama_memory_seq_rm(mem, seq.seq_id, -1, -1)
            keep = 0
        seq.truncate(keep)
        self.stats.extra["seq_rm_calls"] = self.stats.extra.get("seq_rm_calls", 0) + 1

    def _invalidate_logits(self) -> None:
        """A native decode is about to overwrite the output rows."""
        for seq in self._logits_of:
            seq.logits_valid = False
        self._logits_of = []

    def _logits_now(self, seq: SeqState) -> None:
        seq.logits_valid = True
        self._logits_of = [seq]

    def _token_batch(self) -> TokenBatch:
        if self._batch is None:
            raise EngineError("the llama.cpp context is closed")
        return self._batch

    def _decode_text(self, seq: SeqState, tokens: Sequence[int]) -> None:
        """Decode prompt tokens of one sequence at its next positions, in batches of ``n_batch``; the logits of the
        last one are kept."""
        b = self._token_batch()
        self._invalidate_logits()
        for start in range(0, len(tokens), self.n_batch):
            part = list(tokens[start:start + self.n_batch])
            last = start + len(part) == len(tokens)
            for i, tok in enumerate(part):
                b.token[i], b.pos[i], b.n_seq_id[i] = tok, seq.kv_pos + i, 1
                b.seq_id[i][0] = seq.seq_id
                b.logits[i] = 1 if (last and i == len(part) - 1) else 0
            b.n_tokens = len(part)
            rc = self._llama.llama_decode(self._ctx, b)
            if rc != 0:
                self._recover(seq)
                raise EngineError(f"llama_decode failed (code {rc}): {native.recent_native_problems()}")
            seq.push(part, len(part))
        self._logits_now(seq)

    def decode_round(self, tokens: Sequence[tuple[SeqState, int]]) -> None:
        """One ``llama_decode`` with one sampled token for each of several sequences (at most one token per
        sequence), each with its output row: row ``i`` holds the next-token logits of ``tokens[i]``'s sequence.
        On failure every sequence of the round is rolled back and `EngineError` is raised."""
        b = self._token_batch()
        self._invalidate_logits()
        for i, (seq, tok) in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, seq.kv_pos, 1, 1
            b.seq_id[i][0] = seq.seq_id
        b.n_tokens = len(tokens)
        rc = self._llama.llama_decode(self._ctx, b)
        if rc != 0:
            for seq, _ in tokens:
                self._recover(seq)
            raise EngineError(f"llama_decode of {len(tokens)} sequences failed (code {rc}): "
                              f"{native.recent_native_problems()}")
        for seq, tok in tokens:
            seq.push([tok], 1)
        if tokens:
            self._logits_now(tokens[-1][0])  # the last output row

    def _eval_image(self, seq: SeqState, item: ImageItem) -> None:
        t0 = time.perf_counter()
        if item.image is None:
            raise EngineError(f"image {item.sha256[:12]} must be evaluated but its pixels are not available")
        chunks = tokenize_image(self._mtmd, self._llama, self._mctx, item.image)
        self._invalidate_logits()
        try:
            if (chunks.n_tokens, chunks.n_pos) != (item.n_tokens, item.n_pos):
                raise EngineError(f"image {item.sha256[:12]} tokenizes differently now ({chunks.n_tokens} tokens)")
            try:
                eval_image(self._mtmd, self._llama, self._mctx, self._ctx, chunks, seq.kv_pos, self.n_batch,
                           seq.seq_id, key=item.sha256, cache=self.image_cache)
            except EngineError:
                self._recover(seq)
                raise
        finally:
            chunks.free(self._mtmd)
        seq.push([item], item.n_pos)
        seq.logits_valid = False
        st = self.stats
        st.images_encoded += 1
        st.image_tokens_encoded += item.n_tokens
        st.extra["image_seconds"] = st.extra.get("image_seconds", 0.0) + time.perf_counter() - t0

    def _recover(self, seq: SeqState) -> None:
        """After a failed native call: drop whatever it may have written from the sequence's next position on."""
        self._llama.llama_memory_seq_rm(self._memory(), seq.seq_id, seq.kv_pos, -1)
        seq.logits_valid = False

    def logits_row(self, index: int) -> np.ndarray:
        """A copy of output row ``index`` of the last decode (-1: the last row)."""
        n_vocab = self._llama.llama_vocab_n_tokens(self._vocab)
        ptr = self._llama.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()

    # ------------------------------------------------------------------ sampling
    def set_sampling(self, seq: SeqState, sampling: Sampling | None) -> None:
        """Give ``seq`` a new sampler for ``sampling`` (None: the settings')."""
        self.free_sampler(seq)
        seq.sampler = build_sampler(self._llama, sampling or self.settings)
        seq.sampling = sampling or Sampling.from_settings(self.settings)
        self.stats.extra["sampling"] = seq.sampling.to_dict()

    def free_sampler(self, seq: SeqState) -> None:
        if seq.sampler is not None:
            self._llama.llama_sampler_free(seq.sampler)
            seq.sampler = None

    def sample(self, seq: SeqState, index: int, logprobs: list[TokenLogprob] | None) -> int:
        """Sample the next token of ``seq`` from output row ``index``; append its `TokenLogprob` to ``logprobs``
        when the settings ask for log-probabilities."""
        tok = int(self._llama.llama_sampler_sample(seq.sampler, self._ctx, index))
        if logprobs is not None and self.settings.top_logprobs > 0:
            logprobs.append(token_logprob(self.logits_row(index), tok, self.settings.top_logprobs, self.token_text))
        return tok

    def count_turn(self, n_tokens: int, decode_seconds: float) -> None:
        """A turn ended: its tokens and decode time join the throughput counters."""
        st = self.stats
        self._t_decode += decode_seconds
        st.tokens_generated += n_tokens
        st.decode_tokens_per_s = st.tokens_generated / self._t_decode if self._t_decode > 0 else 0.0
        st.prefill_tokens_per_s = st.text_tokens_evaluated / self._t_prefill if self._t_prefill > 0 else 0.0


__all__ = ["KV_TYPES", "LlamaContext"]

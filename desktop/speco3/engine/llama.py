"""`LlamaMtmdEngine`: Qwen2.5-VL through llama.cpp's low-level and mtmd APIs, with a KV cache kept across turns.

llama-cpp-python's chat handlers clear the KV cache and re-encode every image on every call. This engine owns
the llama model, the llama context and the mtmd context itself and keeps the conversation as committed segments
(`speco3.engine.segments`): each `generate` evaluates only what is not in the KV cache yet, images through
`speco3.engine.mtmd_image` (vision-encoder outputs cached by digest for repeated windows), text as token batches,
then samples.

Cache policy
    After `reset` the KV cache is kept. At the next evaluation the new conversation is compared item by item
    with what the cache holds (server-style prefix caching: text token ids; images by SHA-256 and grid); the
    longest common prefix is reused, the diverging tail is removed with ``llama_memory_seq_rm`` at an item
    boundary (never inside an image) and everything from there on is evaluated. When the whole conversation is
    cached, its last token is evaluated again to get fresh logits.

Context policy
    Qwen2.5-VL uses M-RoPE, for which llama.cpp has no context shift (``seq_add`` asserts). The budget is
    counted in KV cells (an image of nx×ny tokens takes nx·ny cells but advances positions by max(nx, ny)):
    before evaluating, if the conversation's cells plus ``max_tokens`` exceed ``n_ctx``, `ContextFullError` is
    raised with the numbers and nothing is evaluated. The caller decides (shorter answer budget, new session).

Every sampled token, including the final ``<|im_end|>``, is decoded into the cache and kept verbatim in the
conversation. The context holds ``settings.n_seq`` sequences in one unified KV cache; this engine's own
conversation is sequence 0 (`speco3.engine.sequences`), the others serve `speco3.engine.parallel`. Not
thread-safe: the thread that loads it makes every later call (`speco3.engine.worker.EngineWorker`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from speco3.engine import fitting, native
from speco3.engine.base import (
    Engine,
    EngineSettings,
    EngineStats,
    GenerationResult,
    ModelInfo,
    Part,
    Sampling,
    TokenCallback,
)
from speco3.engine.mtmd_image import EmbeddingCache, eval_image, tokenize_image
from speco3.engine.sampling import build_sampler, token_logprob
from speco3.engine.segments import EvalPlan, ImageItem, Segment, flatten, plan_evaluation, runs
from speco3.engine.sequences import CellLedger, SeqState, Turn
from speco3.errors import ContextFullError, EngineError, ModelFileError
from speco3.imaging import FACTOR, MIN_PIXELS, PreparedImage, effective_max_tokens

logger = logging.getLogger(__name__)

KV_TYPES = {"f32": 0, "f16": 1, "q8_0": 8}  # ggml_type ids


class LlamaMtmdEngine(Engine):
    """Qwen2.5-VL engine on llama.cpp (text GGUF + mmproj GGUF), see module docstring.

    Parameters
    ----------
    text_path, mmproj_path : path-like
        The text model and the vision projector.
    settings : EngineSettings, optional
    info : ModelInfo, optional
        Recorded with verdicts; paths are filled in when missing.
    n_batch : int
        Logical and physical batch size for prefill.
    warmup : bool
        Let mtmd run a warm-up encode at load (finds memory problems early; tests switch it off).
    """

    def __init__(self, text_path, mmproj_path, settings: EngineSettings | None = None, info: ModelInfo | None = None,
                 *, n_batch: int = 512, warmup: bool = True):
        self.text_path, self.mmproj_path = Path(text_path), Path(mmproj_path)
        self.settings = settings or EngineSettings()
        self.info = info or ModelInfo()
        if self.info.text_path is None or self.info.mmproj_path is None:
            self.info = replace(self.info, text_path=str(self.text_path), mmproj_path=str(self.mmproj_path))
        self.n_batch = int(n_batch)
        self.warmup = warmup
        self._llama = self._mtmd = None
        self._model = self._ctx = self._mctx = self._vocab = None
        self._batch = None
        self._owner: threading.Thread | None = None
        self.pool = None  # the open `speco3.engine.parallel.SequencePool`, which then owns sequence 0
        self._cells = CellLedger()
        self._seq = SeqState(0, self._cells)  # the one conversation of `reset`/`extend`/`generate`
        self._stats = EngineStats(n_ctx=self.settings.n_ctx)
        self._t_prefill = self._t_decode = 0.0
        self._n_gpu_layers, self._mmproj_gpu = 0, False
        self.image_cache = EmbeddingCache(self.settings.image_cache_mib * 2**20)  # vision-encoder outputs by digest

    # ------------------------------------------------------------------ lifecycle
    @property
    def loaded(self) -> bool:
        return self._ctx is not None

    def load(self) -> None:
        if self.loaded:
            return
        t0 = time.perf_counter()
        s = self.settings
        if s.kv_type not in KV_TYPES:
            raise EngineError(f"unknown kv_type {s.kv_type!r}; use one of {sorted(KV_TYPES)}")
        if s.kv_type == "q8_0" and not s.flash_attn:
            raise EngineError("a q8_0 KV cache needs flash attention (llama.cpp cannot quantize V without it)")
        native.check_model_files(self.text_path, self.mmproj_path)
        native.ensure_backend()
        self._llama, self._mtmd = llama, mtmd = native.import_llama()
        self._owner = threading.current_thread()
        gpu = bool(llama.llama_supports_gpu_offload())
        plan = fitting.plan_load(self.text_path, self.mmproj_path, s, gpu_offload=gpu)
        if not plan.fits:
            raise fitting.ModelTooLargeError(plan)  # before anything is loaded
        fitting.load_with_fallback(
            plan, lambda ngl: self._load_native(llama, mtmd, ngl, plan.n_ctx, plan.mmproj_on_gpu and ngl > 0,
                                                plan.use_mmap), self.close)
        chosen = fitting.describe(plan, self._n_gpu_layers)
        self._n_ctx = int(llama.llama_n_ctx(self._ctx))
        self._stats = EngineStats(
            backend=native.backend_label(self._n_gpu_layers), n_ctx=self._n_ctx, load_seconds=time.perf_counter() - t0
        )
        self._stats.extra.update(n_gpu_layers=self._n_gpu_layers, flash_attn=s.flash_attn, kv_type=s.kv_type,
                                 use_mmap=plan.use_mmap,
                                 mmproj_backend=native.backend_label(1 if self._mmproj_gpu else 0), fit=chosen,
                                 fit_notes=list(plan.notes), estimated_bytes=plan.estimate.total_bytes)
        logger.info("loaded %s + %s on %s in %.1f s (n_ctx %d): %s; settings %s", self.text_path, self.mmproj_path,
                    self._stats.backend, self._stats.load_seconds, self._n_ctx, chosen, s.to_dict())

    def _load_native(self, llama, mtmd, n_gpu_layers: int, n_ctx: int, mmproj_gpu: bool, use_mmap: bool) -> None:
        s = self.settings
        self._n_gpu_layers, self._mmproj_gpu = int(n_gpu_layers), bool(mmproj_gpu)
        mp = llama.llama_model_default_params()
        mp.n_gpu_layers = self._n_gpu_layers
        no_devices = (ctypes.c_void_p * 1)()  # a NULL-terminated empty device list; alive until the load returns
        if self._n_gpu_layers == 0:
            # 0 layers means the CPU alone: with the default device list llama.cpp would still run large-batch
            # matrix products (prefill) on a GPU it finds, the very device that may just have failed to load
            mp.devices = ctypes.addressof(no_devices)
        mp.load_mode = llama.LLAMA_LOAD_MODE_MMAP if use_mmap and llama.llama_supports_mmap() else llama.LLAMA_LOAD_MODE_NONE
        self._model = llama.llama_model_load_from_file(str(self.text_path).encode(), mp)
        if not self._model:
            raise ModelFileError(self.text_path, f"llama.cpp could not load the model: {native.recent_native_problems()}")
        threads, threads_batch = native.default_threads()
        if s.n_threads:
            threads = threads_batch = int(s.n_threads)
        cp = llama.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = int(n_ctx), self.n_batch, self.n_batch, max(1, int(s.n_seq))
        cp.kv_unified = True  # one cell buffer shared by all sequences (engine.sequences)
        cp.n_threads, cp.n_threads_batch = threads, threads_batch
        fa = llama.LLAMA_FLASH_ATTN_TYPE_ENABLED if s.flash_attn else llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.flash_attn_type = fa
        cp.type_k = cp.type_v = KV_TYPES[s.kv_type]
        self._ctx = llama.llama_init_from_model(self._model, cp)
        if not self._ctx:
            raise EngineError(f"llama.cpp could not create a context of {n_ctx} tokens: {native.recent_native_problems()}")
        self._vocab = llama.llama_model_get_vocab(self._model)
        mp2 = mtmd.mtmd_context_params_default()
        mp2.use_gpu = self._mmproj_gpu
        mp2.n_threads, mp2.print_timings, mp2.warmup, mp2.flash_attn_type = threads_batch, False, self.warmup, fa
        # images arrive already resized (speco3.imaging): let mtmd accept every size the HF processor produces
        mp2.image_min_tokens = MIN_PIXELS // (FACTOR * FACTOR)
        mp2.image_max_tokens = effective_max_tokens(s.image_max_tokens)
        self._mctx = mtmd.mtmd_init_from_file(str(self.mmproj_path).encode(), self._model, mp2)
        if not self._mctx:
            raise ModelFileError(self.mmproj_path, f"mtmd could not load the projector: {native.recent_native_problems()}")
        if not mtmd.mtmd_support_vision(self._mctx):
            raise ModelFileError(self.mmproj_path, "the projector has no vision support")
        self._batch = llama.llama_batch_init(self.n_batch, 0, 1)
        self._im_end = self._single_token("<|im_end|>")
        self._new_sampler()

    def close(self) -> None:
        llama, mtmd = self._llama, self._mtmd
        if llama is None:
            return
        if self._seq.sampler is not None:
            llama.llama_sampler_free(self._seq.sampler)
        if self._batch is not None:
            llama.llama_batch_free(self._batch)
        if self._mctx:
            mtmd.mtmd_free(self._mctx)
        if self._ctx:
            llama.llama_free(self._ctx)
        if self._model:
            llama.llama_model_free(self._model)
        self._batch = self._mctx = self._ctx = self._model = self._vocab = None
        self.image_cache.clear()
        self._cells = CellLedger()
        self._seq = SeqState(0, self._cells)

    def __del__(self):  # pragma: no cover - best effort at garbage collection
        with contextlib.suppress(Exception):
            self.close()

    def _require(self) -> None:
        if not self.loaded:
            raise EngineError("engine is not loaded (call load() first)")
        if threading.current_thread() is not self._owner:
            raise EngineError("LlamaMtmdEngine must be used from the thread that loaded it (use EngineWorker)")

    # ------------------------------------------------------------------ tokens
    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens parsed, no BOS)."""
        self._require()
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (self._llama.llama_token * n_max)()
        n = self._llama.llama_tokenize(self._vocab, data, len(data), buf, n_max, False, True)
        if n < 0:  # buffer too small: -n is the size needed
            n_max = -n
            buf = (self._llama.llama_token * n_max)()
            n = self._llama.llama_tokenize(self._vocab, data, len(data), buf, n_max, False, True)
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

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def _single_token(self, text: str) -> int:
        ids = self.tokenize(text)
        if len(ids) != 1:
            raise ModelFileError(self.text_path, f"vocabulary has no single token for {text!r} (got {ids})")
        return ids[0]

    # ------------------------------------------------------------------ conversation
    def reset(self, keep_cache: bool = True, *, sampling: Sampling | None = None) -> None:
        """Start a new conversation sampled with ``sampling`` (None: the settings). With ``keep_cache`` the KV cache
        stays and its common prefix with the next conversation is reused; without it the cache is cleared."""
        self._require()
        if self.pool is not None:
            raise EngineError("the engine is running parallel sequences; close that run before starting another")
        self._seq.conv = []
        if not keep_cache:
            self._llama.llama_memory_seq_rm(self._llama.llama_get_memory(self._ctx), 0, -1, -1)
            self._seq.truncate(0)
        self._new_sampler(sampling)

    def extend(self, parts: Sequence[Part], seq: SeqState | None = None) -> None:
        """Append text (tokenized now, special tokens parsed) and images (checked against mtmd now)."""
        self._require()
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
        (seq or self._seq).conv.extend(new)

    def restore(self, segments: Sequence[Segment]) -> None:
        """Replace the conversation by saved segments (token ids kept verbatim); the cache is reused as usual."""
        self._require()
        self._seq.conv = [Segment(s.kind, list(s.tokens), s.image) for s in segments]

    def conversation(self) -> list[Segment]:
        """A copy of the committed segments."""
        return [Segment(s.kind, list(s.tokens), s.image) for s in self._seq.conv]

    @property
    def kv_cells(self) -> int:
        return self._cells.used

    @property
    def kv_positions(self) -> int:
        return self._seq.kv_pos

    # ------------------------------------------------------------------ evaluation
    def plan(self) -> EvalPlan:
        """What the next evaluation would reuse, remove and evaluate (nothing is changed)."""
        return plan_evaluation(self._seq.kv, flatten(self._seq.conv), self._seq.logits_valid)

    def evaluate(self, reserve: int = 0, seq: SeqState | None = None) -> EvalPlan:
        """Bring the KV cache of ``seq`` (default: the conversation of `reset`) up to its conversation; afterwards
        `last_logits` are its next-token logits.

        Parameters
        ----------
        reserve : int
            KV cells that must remain free after the evaluation (answer budgets; cells of other sequences count).

        Raises
        ------
        ContextFullError
            When the cells in use plus this evaluation plus ``reserve`` would exceed ``n_ctx`` (nothing evaluated).
        """
        self._require()
        seq = seq or self._seq
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
                self._decode_tokens(seq, run, logits_last=True)
                self._t_prefill += time.perf_counter() - t0
                self._stats.text_tokens_evaluated += len(run)
            else:
                self._eval_image(seq, run)
        self._stats.extra["last_eval"] = {
            "reused_cells": plan.kept_cells, "removed_from_pos": plan.cut_pos,
            "text_tokens": plan.pending_text_tokens, "images": len(plan.pending_images),
            "image_tokens": sum(i.n_tokens for i in plan.pending_images),
        }
        return plan

    def _cut(self, seq: SeqState, keep: int, pos: int) -> None:
        mem = self._llama.llama_get_memory(self._ctx)
        if not self._llama.llama_memory_seq_rm(mem, seq.seq_id, pos, -1):
            logger.warning("partial KV removal refused at position %d; clearing the sequence", pos)
            self._llama.llama_memory_seq_rm(mem, seq.seq_id, -1, -1)
            keep = 0
        seq.truncate(keep)
        self._stats.extra["seq_rm_calls"] = self._stats.extra.get("seq_rm_calls", 0) + 1

    def _decode_tokens(self, seq: SeqState, tokens: Sequence[int], logits_last: bool) -> None:
        """Decode text tokens of one sequence at its next positions, in batches of ``n_batch``."""
        b = self._batch
        for start in range(0, len(tokens), self.n_batch):
            part = list(tokens[start:start + self.n_batch])
            last = start + len(part) == len(tokens)
            for i, tok in enumerate(part):
                b.token[i], b.pos[i], b.n_seq_id[i] = tok, seq.kv_pos + i, 1
                b.seq_id[i][0] = seq.seq_id
                b.logits[i] = 1 if (logits_last and last and i == len(part) - 1) else 0
            b.n_tokens = len(part)
            rc = self._llama.llama_decode(self._ctx, b)
            if rc != 0:
                self._recover(seq)
                raise EngineError(f"llama_decode failed (code {rc}): {native.recent_native_problems()}")
            seq.push(part, len(part))
        seq.logits_valid = logits_last

    def _eval_image(self, seq: SeqState, item: ImageItem) -> None:
        t0 = time.perf_counter()
        if item.image is None:
            raise EngineError(f"image {item.sha256[:12]} must be evaluated but its pixels are not available")
        chunks = tokenize_image(self._mtmd, self._llama, self._mctx, item.image)
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
        self._stats.images_encoded += 1
        self._stats.image_tokens_encoded += item.n_tokens
        self._stats.extra["image_seconds"] = self._stats.extra.get("image_seconds", 0.0) + time.perf_counter() - t0

    def _recover(self, seq: SeqState) -> None:
        """After a failed native call: drop whatever it may have written from the sequence's next position on."""
        self._llama.llama_memory_seq_rm(self._llama.llama_get_memory(self._ctx), seq.seq_id, seq.kv_pos, -1)
        seq.logits_valid = False

    def last_logits(self) -> np.ndarray:
        """A copy of the next-token logits after the last evaluated item."""
        self._require()
        if not self._seq.logits_valid:
            raise EngineError("no logits: evaluate() first")
        return self._logits_row(-1)

    def _logits_row(self, index: int) -> np.ndarray:
        """A copy of output row ``index`` of the last decode."""
        n_vocab = self._llama.llama_vocab_n_tokens(self._vocab)
        ptr = self._llama.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()

    # ------------------------------------------------------------------ sampling
    def _new_sampler(self, sampling: Sampling | None = None, seq: SeqState | None = None) -> None:
        seq = seq or self._seq
        if seq.sampler is not None:
            self._llama.llama_sampler_free(seq.sampler)
        seq.sampler = build_sampler(self._llama, sampling or self.settings)
        seq.sampling = sampling or Sampling.from_settings(self.settings)
        self._stats.extra["sampling"] = seq.sampling.to_dict()

    def sample(self, seq: SeqState, index: int, logprobs: list | None) -> int:
        """Sample the next token of ``seq`` from output row ``index``; append its `TokenLogprob` to ``logprobs``."""
        tok = int(self._llama.llama_sampler_sample(seq.sampler, self._ctx, index))
        if logprobs is not None and self.settings.top_logprobs > 0:
            logprobs.append(token_logprob(self._logits_row(index), tok, self.settings.top_logprobs, self.token_text))
        return tok

    def token_text(self, token: int) -> str:
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def generate(self, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        self._require()
        turn = Turn.begin(self, self._seq, max_tokens, on_token, cancel)
        turn.start(self.evaluate(reserve=turn.max_tokens))
        while not turn.done():
            tok = self.sample(self._seq, -1, turn.logprobs)
            self._decode_tokens(self._seq, [tok], logits_last=True)  # feed back, including the final <|im_end|>
            turn.commit(tok)
        return turn.finish()

    def stats(self) -> EngineStats:
        st = replace(self._stats, extra=dict(self._stats.extra))
        st.kv_cells_used = self.kv_cells
        st.extra["kv_positions"] = self._seq.kv_pos
        st.extra["image_cache_hits"] = self.image_cache.hits
        return st


__all__ = ["LlamaMtmdEngine"]

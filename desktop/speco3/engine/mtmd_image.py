"""Images through llama.cpp's mtmd: bitmap from a `PreparedImage`, tokenization into chunks, evaluation.

Evaluation is two steps, as in ``mtmd_helper_eval_chunk_single``: the vision encoder turns the image into
embeddings (``mtmd_encode_chunk``), and the text model decodes them into the KV cache at the sequence's
positions (``mtmd_helper_decode_image_chunk``). The embeddings depend on the image alone, so `EmbeddingCache`
keeps the last few by the image's digest: a rollout that asks for a window another rollout of the same spectrum
already asked for skips the encoder and only decodes (its KV cells cannot be shared: what precedes them differs).

The image reaches mtmd at its final size (sides multiples of 28, see `speco3.imaging`), so mtmd's own
preprocessor copies the pixels unchanged instead of padding them. mtmd wraps the image in the projector's
begin/end tokens (``<|vision_start|>`` … ``<|vision_end|>`` for Qwen2.5-VL); those come back as text chunks
around the image chunk, and the engine keeps them as ordinary text tokens of the conversation.
"""

from __future__ import annotations

import ctypes
import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from speco3.engine.native import recent_native_problems
from speco3.errors import EngineError
from speco3.imaging import PreparedImage

logger = logging.getLogger(__name__)


@dataclass
class ImageChunks:
    """An image tokenized by mtmd (owns native memory: call `free`).

    Attributes
    ----------
    before, after : list of int
        Text tokens mtmd puts around the image (the projector's begin/end markers).
    chunk : int
        Pointer to the image chunk (valid until `free`).
    n_tokens, n_pos, nx, ny : int
        What mtmd reports: KV cells, position advance and token grid of the image.
    """

    before: list[int]
    after: list[int]
    chunk: int
    n_tokens: int
    n_pos: int
    nx: int
    ny: int
    _chunks: int = 0
    _bitmap: int = 0

    def free(self, mtmd) -> None:
        if self._chunks:
            mtmd.mtmd_input_chunks_free(self._chunks)
            self._chunks = 0
        if self._bitmap:
            mtmd.mtmd_bitmap_free(self._bitmap)
            self._bitmap = 0
        self.chunk = 0


def _text_tokens(mtmd, llama, chunk) -> list[int]:
    n = ctypes.c_size_t(0)
    ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
    return [int(ptr[i]) for i in range(n.value)] if ptr else []


def tokenize_image(mtmd, llama, mctx, image: PreparedImage) -> ImageChunks:
    """Tokenize one image with mtmd and check that mtmd sees exactly the prepared token grid.

    Raises
    ------
    EngineError
        When the PNG cannot be decoded, mtmd refuses the image, or mtmd would resize it (its token
        count or grid differs from ``image.grid``: the image was not prepared for this projector's limits).
    """
    try:
        data = image.rgb_bytes()
    except ValueError as exc:
        raise EngineError(f"image {image.sha256[:12]} {exc}") from exc
    width, height = image.width, image.height
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bitmap = mtmd.mtmd_bitmap_init(width, height, buf)
    if not bitmap:
        raise EngineError(f"mtmd could not create a bitmap for image {image.sha256[:12]}")
    mtmd.mtmd_bitmap_set_id(bitmap, image.sha256.encode())
    chunks = mtmd.mtmd_input_chunks_init()
    out = ImageChunks([], [], 0, 0, 0, 0, 0, _chunks=chunks, _bitmap=bitmap)
    try:
        marker = mtmd.mtmd_default_marker()
        text = mtmd.mtmd_input_text(marker, len(marker), False, True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        rc = mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(text), bitmaps, 1)
        if rc != 0:
            raise EngineError(f"mtmd could not tokenize image {image.sha256[:12]} (code {rc}): {recent_native_problems()}")
        seen_image = False
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                (out.after if seen_image else out.before).extend(_text_tokens(mtmd, llama, chunk))
            elif kind == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE and not seen_image:
                seen_image = True
                tokens = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
                out.chunk = chunk
                out.n_tokens = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
                out.n_pos = int(mtmd.mtmd_input_chunk_get_n_pos(chunk))
                out.nx = int(mtmd.mtmd_image_tokens_get_nx(tokens))
                out.ny = int(mtmd.mtmd_image_tokens_get_ny(tokens))
            else:
                raise EngineError(f"mtmd split image {image.sha256[:12]} into an unexpected chunk (type {kind})")
        if not seen_image:
            raise EngineError(f"mtmd produced no image chunk for image {image.sha256[:12]}")
        if out.n_tokens != image.n_tokens or (out.nx, out.ny) != tuple(image.grid):
            raise EngineError(
                f"mtmd would see image {image.sha256[:12]} ({image.width}x{image.height}) as {out.nx}x{out.ny} = "
                f"{out.n_tokens} tokens, not the prepared {image.grid[0]}x{image.grid[1]} = {image.n_tokens}: it was "
                "not prepared for this projector's token limits (use prepare_image with the engine's image_max_tokens)"
            )
        return out
    except BaseException:
        out.free(mtmd)
        raise


class EmbeddingCache:
    """Vision-encoder outputs by image digest, least recently used dropped first: at most ``max_bytes`` and
    `MAX_ENTRIES` images (the windows the rollouts of one spectrum ask for).

    One engine owns one (its projector is fixed); 0 bytes turns it off. Counters: ``hits``, ``misses``.
    """

    MAX_ENTRIES = 8

    @classmethod
    def bound(cls, max_bytes: int, image_tokens: int, n_embd: int) -> int:
        """The most it can hold: ``max_bytes``, or fewer when `MAX_ENTRIES` images at the cap are smaller."""
        return min(max(0, int(max_bytes)), cls.MAX_ENTRIES * int(image_tokens) * int(n_embd) * 4)

    def __init__(self, max_bytes: int):
        self.max_bytes = max(0, int(max_bytes))
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self.bytes = self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> np.ndarray | None:
        arr = self._items.get(key)
        if arr is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return arr

    def put(self, key: str, arr: np.ndarray) -> None:
        if arr.nbytes > self.max_bytes or key in self._items:
            return
        self._items[key] = arr
        self.bytes += arr.nbytes
        while self.bytes > self.max_bytes or len(self._items) > self.MAX_ENTRIES:
            _, old = self._items.popitem(last=False)
            self.bytes -= old.nbytes

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0


def eval_image(mtmd, llama, mctx, lctx, chunks: ImageChunks, n_past: int, n_batch: int, seq_id: int = 0,
               *, key: str = "", cache: EmbeddingCache | None = None) -> int:
    """Encode the image chunk (or take its embeddings from ``cache`` by ``key``: ``cache.hits`` counts those) and
    decode the embeddings into sequence ``seq_id`` of the KV cache at ``n_past``.

    Returns the next position. ``new_n_past`` is initialised to ``n_past`` before the decode: an unset value is the
    classic cause of M-RoPE position errors on the next image.
    """
    store = cache if cache is not None and cache.max_bytes > 0 and key else None
    cached = store.get(key) if store is not None else None
    if cached is None:
        rc = mtmd.mtmd_encode_chunk(mctx, chunks.chunk)
        if rc != 0:
            raise EngineError(f"the vision encoder failed on the image (code {rc}): {recent_native_problems()}")
        ptr = mtmd.mtmd_get_output_embd(mctx)
        if not ptr:
            raise EngineError(f"the vision encoder returned no embeddings: {recent_native_problems()}")
        if store is not None:
            n_embd = int(llama.llama_model_n_embd_inp(llama.llama_get_model(lctx)))
            cached = np.ctypeslib.as_array(ptr, shape=(chunks.n_tokens * n_embd,)).copy()
            store.put(key, cached)
    if cached is not None:  # decode from our copy (kept alive by ``cached`` during the call)
        ptr = cached.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    new_n_past = llama.llama_pos(n_past)  # no post-decode callback: the prototype called bare is a NULL pointer
    rc = mtmd.mtmd_helper_decode_image_chunk(mctx, lctx, chunks.chunk, ptr, n_past, seq_id, n_batch,
                                             ctypes.byref(new_n_past), mtmd.mtmd_helper_post_decode_callback(), None)
    if rc != 0:
        raise EngineError(f"image evaluation failed (code {rc}): {recent_native_problems()}")
    if new_n_past.value != n_past + chunks.n_pos:
        raise EngineError(f"mtmd advanced the position to {new_n_past.value}, expected {n_past + chunks.n_pos}")
    return new_n_past.value

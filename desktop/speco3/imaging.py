"""What the model sees: Qwen2.5-VL's ``smart_resize`` rule and the image prepared for mtmd.

Qwen2.5-VL's Hugging Face processor resizes every image so both sides are multiples of 28 (round, then keep
the area within ``min_pixels`` … ``max_pixels``), bicubic, no padding. llama.cpp's mtmd pads instead of
stretching unless the image already has the target size, so we resize here, in Python, and hand mtmd an image
it does not touch. One image token covers 28×28 pixels.
"""

from __future__ import annotations

import hashlib
import io
import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from PIL import Image

PATCH = 14
MERGE = 2
FACTOR = PATCH * MERGE  # 28
MIN_PIXELS = 3136
MAX_PIXELS = 12845056
#: Image tokens per image when no cap is set: the renderer's largest view (the full spectrum, 792 x 472 px) is 476
#: tokens, so 1280 never resizes what the model sees, and mtmd sizes its warm-up and compute buffers for 1280 tokens
#: instead of the processor's 16,384 (the difference is load time and memory, see bench_load.py).
DEFAULT_MAX_TOKENS = 1280
#: zlib level of the model image's PNG: lossless, a third less encode time than level 6.
PNG_LEVEL = 1


def smart_resize(
    height: int,
    width: int,
    factor: int = FACTOR,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> tuple[int, int]:
    """Return ``(height, width)`` as Qwen2.5-VL's image processor computes them.

    Raises
    ------
    ValueError
        If the aspect ratio exceeds 200 (the processor refuses such images too).
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image has no pixels ({width}x{height})")
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def effective_max_tokens(max_tokens: int | None) -> int:
    """The image-token cap in force: ``max_tokens``, else `DEFAULT_MAX_TOKENS`."""
    return int(max_tokens or DEFAULT_MAX_TOKENS)


def max_pixels_for_tokens(max_tokens: int | None) -> int:
    """Pixel budget matching an image-token cap (``None``: the processor default)."""
    if not max_tokens:
        return MAX_PIXELS
    return max(MIN_PIXELS, int(max_tokens) * FACTOR * FACTOR)


@dataclass(frozen=True, eq=False, init=False)
class PreparedImage:
    """An image exactly as the model will see it.

    Made by `prepare_image` (from the pixels; the PNG is encoded when first asked for) or from PNG bytes read back
    (a saved trace). Read-only; two prepared images are equal when their size and pixel digest are.

    Attributes
    ----------
    png : bytes
        PNG bytes at the model resolution (sides multiples of 28); lossless, encoded on first access.
    width, height : int
        Pixel size after ``smart_resize``.
    grid : tuple of int
        ``(nx, ny)`` image-token grid after the 2×2 merge.
    sha256 : str
        Digest of the RGB pixels (identifies the image in the KV cache).
    """

    width: int
    height: int
    grid: tuple[int, int]
    sha256: str
    pixels: Image.Image | None = field(default=None, repr=False)  # RGB at the model size, when prepared here
    encoded: bytes | None = field(default=None, repr=False)  # the PNG, once there is one

    def __init__(self, png: bytes | None = None, width: int = 0, height: int = 0, grid: tuple[int, int] = (0, 0),
                 sha256: str = "", pixels: Image.Image | None = None, encoded: bytes | None = None) -> None:
        encoded = png if png is not None else encoded
        if encoded is None and pixels is None:
            raise ValueError("a prepared image needs its PNG bytes or its pixels")
        for name, value in (("width", int(width)), ("height", int(height)), ("grid", tuple(grid)),
                            ("sha256", sha256), ("pixels", pixels), ("encoded", encoded)):
            object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PreparedImage):
            return NotImplemented
        return (self.width, self.height, self.grid, self.sha256) == (other.width, other.height, other.grid, other.sha256)

    def __hash__(self) -> int:
        return hash((self.width, self.height, self.sha256))

    @property
    def png(self) -> bytes:
        """The PNG; once encoded, the image keeps only it (a trace or a view that is kept stays as small as its PNG)."""
        encoded = self.encoded
        if encoded is None:
            pixels = self.pixels
            if pixels is None:  # another thread encoded it meanwhile (it sets the PNG before dropping the pixels)
                return self._encoded()
            buf = io.BytesIO()
            pixels.save(buf, format="PNG", compress_level=PNG_LEVEL)
            encoded = buf.getvalue()
            object.__setattr__(self, "encoded", encoded)
            object.__setattr__(self, "pixels", None)
        return encoded

    def _encoded(self) -> bytes:
        """The PNG, when the pixels are gone (the constructor needs one of the two; encoding sets the PNG first)."""
        encoded = self.encoded
        if encoded is None:
            raise RuntimeError("a prepared image without its PNG or its pixels")
        return encoded

    def rgb_bytes(self) -> bytes:
        """The RGB pixels, row by row (``width * height * 3`` bytes); decodes the PNG when there are no pixels.

        Raises
        ------
        ValueError
            When the PNG cannot be decoded or does not have the claimed size.
        """
        pixels = self.pixels
        if pixels is not None:
            return pixels.tobytes()
        try:
            with Image.open(io.BytesIO(self._encoded())) as img:
                rgb = img.convert("RGB")
        except Exception as exc:  # PIL raises many kinds on damaged bytes
            raise ValueError(f"cannot be decoded: {exc}") from exc
        if rgb.size != (self.width, self.height):
            raise ValueError(f"is {rgb.width}x{rgb.height}, but claims {self.width}x{self.height}")
        return rgb.tobytes()

    @property
    def n_tokens(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def position_advance(self) -> int:
        """M-RoPE position advance of the image: ``max(nx, ny)``."""
        return max(self.grid)


class HasPixels(Protocol):
    """A rendered image that holds its pixels (e.g. `speco3.render.RenderedImage`)."""

    @property
    def rgb(self) -> np.ndarray:
        """``(height, width, 3)`` uint8 RGB pixels."""
        ...


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Largest PNG read back from a trace (a model image is at most a few hundred kB).
MAX_PNG_BYTES = 32 << 20
#: Largest side of a PNG read back from a trace (model images are at most a few thousand pixels a side).
MAX_PNG_SIDE = 16384


def png_problem(data: bytes, width: int | None = None, height: int | None = None) -> str | None:
    """Why ``data`` is not a PNG of the claimed size (signature, IHDR chunk, byte and pixel bounds), else None.

    Checked before bytes from a trace folder are embedded in a report or copied beside it: whatever a trace names
    as its image, only a PNG of a sane size goes out.
    """
    if len(data) > MAX_PNG_BYTES:
        return f"{len(data)} bytes, larger than the {MAX_PNG_BYTES >> 20} MB an image may have"
    if not data.startswith(PNG_SIGNATURE) or len(data) < 33 or data[12:16] != b"IHDR":
        return "not a PNG file (wrong signature)"
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if not (0 < w <= MAX_PNG_SIDE and 0 < h <= MAX_PNG_SIDE):
        return f"a PNG of {w}x{h} pixels, outside 1..{MAX_PNG_SIDE} a side"
    if (width is not None and w != width) or (height is not None and h != height):
        return f"a PNG of {w}x{h} pixels, but the trace says {width}x{height}"
    return None


def png_bytes(image: bytes | HasPixels) -> bytes:
    """A rendered image as PNG bytes, at its own size (PNG bytes pass through unchanged)."""
    if isinstance(image, bytes | bytearray):
        return bytes(image)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image.rgb, dtype=np.uint8), "RGB").save(buf, format="PNG",
                                                                                compress_level=PNG_LEVEL)
    return buf.getvalue()


def prepare_image(image: bytes | HasPixels, max_tokens: int | None = None) -> PreparedImage:
    """Resize an image with the ``smart_resize`` rule (bicubic) and return the model's image.

    ``image`` is PNG (or other image) bytes, or a rendered image with its pixels (``.rgb``), which spares the
    decode of a PNG made only to be decoded again.
    """
    if not isinstance(image, bytes | bytearray):
        rgb = Image.fromarray(np.ascontiguousarray(image.rgb, dtype=np.uint8), "RGB")
    else:
        with Image.open(io.BytesIO(image)) as img:
            rgb = img.convert("RGB")
    h, w = smart_resize(rgb.height, rgb.width, max_pixels=max_pixels_for_tokens(max_tokens))
    if (w, h) != rgb.size:
        rgb = rgb.resize((w, h), Image.Resampling.BICUBIC)
    digest = hashlib.sha256(rgb.tobytes()).hexdigest()
    return PreparedImage(width=w, height=h, grid=(w // FACTOR, h // FACTOR), sha256=digest, pixels=rgb)

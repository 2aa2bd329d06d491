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
from dataclasses import dataclass

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


@dataclass(frozen=True)
class PreparedImage:
    """An image exactly as the model will see it.

    Attributes
    ----------
    png : bytes
        PNG bytes at the model resolution (sides multiples of 28).
    width, height : int
        Pixel size after ``smart_resize``.
    grid : tuple of int
        ``(nx, ny)`` image-token grid after the 2×2 merge.
    sha256 : str
        Digest of the RGB pixels (identifies the image in the KV cache).
    """

    png: bytes
    width: int
    height: int
    grid: tuple[int, int]
    sha256: str

    @property
    def n_tokens(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def position_advance(self) -> int:
        """M-RoPE position advance of the image: ``max(nx, ny)``."""
        return max(self.grid)


def prepare_image(png: bytes, max_tokens: int | None = None) -> PreparedImage:
    """Resize PNG bytes with the ``smart_resize`` rule (bicubic) and return the model's image."""
    with Image.open(io.BytesIO(png)) as img:
        rgb = img.convert("RGB")
    h, w = smart_resize(rgb.height, rgb.width, max_pixels=max_pixels_for_tokens(max_tokens))
    if (w, h) != rgb.size:
        rgb = rgb.resize((w, h), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    rgb.save(buf, format="PNG", compress_level=1)  # lossless: same pixels, a third less encode time than level 6
    digest = hashlib.sha256(rgb.tobytes()).hexdigest()
    return PreparedImage(png=buf.getvalue(), width=w, height=h, grid=(w // FACTOR, h // FACTOR), sha256=digest)

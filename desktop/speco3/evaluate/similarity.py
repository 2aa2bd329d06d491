"""How close our full-view render is to the image a benchmark ships (renderer drift on real data).

Two figures: the pixel sizes and whether they fall in the same size class (the training renderer's figure size
follows the wavelength span, docs/design.md §3; same class = both sides within 10 %), and a similarity in [-1, 1]:
the Pearson correlation of the two images' ink (1 − grey level) after resizing ours to theirs, halving both and a Gaussian
blur that forgives offsets of a few pixels. 1.0 is the same picture; unrelated plots land near 0.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageFilter

from speco3.imaging import HasPixels

SIZE_TOLERANCE = 0.10
BLUR_PX = 1.5  # at half resolution: forgives offsets of about 3 pixels


def _ink(grey: Image.Image) -> np.ndarray:
    """Ink of a grey image at half resolution, blurred (cheap: about 10 ms for a full view)."""
    small = grey.reduce(2).filter(ImageFilter.GaussianBlur(BLUR_PX))
    return 1.0 - np.asarray(small, dtype=np.float32) / 255.0


def same_size_class(a: tuple[int, int], b: tuple[int, int], tolerance: float = SIZE_TOLERANCE) -> bool:
    return all(abs(x - y) <= tolerance * max(y, 1) for x, y in zip(a, b, strict=True))


def _open(image: bytes | HasPixels) -> Image.Image:
    if not isinstance(image, bytes | bytearray):  # a rendered image's own pixels: no PNG to decode
        return Image.fromarray(np.ascontiguousarray(image.rgb, dtype=np.uint8), "RGB")
    img = Image.open(io.BytesIO(image))
    img.load()
    return img


def render_similarity(ours: bytes | HasPixels, shipped: bytes) -> dict:
    """``render_width/height``, ``shipped_width/height``, ``same_size_class``, ``render_similarity`` (or
    ``render_error`` when one of the images cannot be decoded). ``ours`` is PNG bytes or a rendered image with
    its pixels (`speco3.render.RenderedImage`)."""
    try:
        with _open(ours) as a, _open(shipped) as b:
            size_a, size_b = a.size, b.size
            ink_b = _ink(b.convert("L"))
            ink_a = _ink(a.convert("L").resize(size_b, Image.Resampling.BILINEAR))
    except Exception as exc:  # PIL raises many kinds on damaged bytes
        return {"render_error": f"{type(exc).__name__}: {exc}"}
    da, db = ink_a - ink_a.mean(), ink_b - ink_b.mean()
    denom = float(np.sqrt(float((da * da).sum()) * float((db * db).sum())))
    sim = float((da * db).sum()) / denom if denom > 0 else 0.0
    return {"render_width": size_a[0], "render_height": size_a[1], "shipped_width": size_b[0],
            "shipped_height": size_b[1], "same_size_class": same_size_class(size_a, size_b),
            "render_similarity": round(sim, 4)}

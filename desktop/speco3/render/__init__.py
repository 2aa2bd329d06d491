"""Training-faithful spectrum renderer: :class:`~speco3.spectra.view.View` → pixels and PNG (`RenderedImage`).

The Spec-o3 model was trained on matplotlib plots (docs/design.md §3). :func:`render_view` draws the same plot with
pyqtgraph offscreen — same figure-size classes at 80 dpi, the same tight-layout placement and tight-bbox crop,
tick steps, labels, grid and stats box — much faster than matplotlib and without it as a dependency.

Thread safety: every thread gets its own reusable scene (Qt painting on ``QImage`` is thread-safe). When no
``QApplication`` is running, the first render in the main thread (or :func:`init_qt`) creates an offscreen one;
a worker thread cannot create it and gets a :class:`RenderError` instead. Output is deterministic: the same view
gives the same bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from speco3.errors import Speco3Error
from speco3.render import layout
from speco3.render.geometry import FigureLayout, compute_layout, token_grid
from speco3.spectra.model import within_limits
from speco3.spectra.view import View

if TYPE_CHECKING:  # Qt loads with the scene (speco3.render.qtscene)
    from PySide6.QtGui import QImage

logger = logging.getLogger(__name__)

__all__ = [
    "RenderError",
    "RenderedImage",
    "init_qt",
    "release_thread_scene",
    "render_view",
    "render_arrays",
    "renderer_fingerprint",
    "token_grid",
]


class RenderError(Speco3Error):
    """The renderer could not produce an image."""


@dataclass(frozen=True, eq=False)
class RenderedImage:
    """A rendered plot.

    The pixels stay in memory; the PNG is encoded when first asked for, so a caller that only needs the pixels
    (the model's image preparation, `speco3.imaging.prepare_image`) pays for no PNG round trip.

    Attributes
    ----------
    png : bytes
        PNG image (RGB), encoded on first access.
    rgb : ndarray
        ``(height, width, 3)`` uint8 RGB pixels (read-only), the same pixels the PNG holds.
    width, height : int
        Pixel size.
    plot_rect : tuple of float
        Data area in image pixels: ``(left, top, right, bottom)``.
    x_range, y_range : tuple of float
        Axis limits (wavelength in Å in the view's frame; flux).
    n_points : int
        Points drawn.
    corner : str
        Corner holding the stats box.
    """

    width: int
    height: int
    plot_rect: tuple[float, float, float, float]
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    n_points: int
    corner: str
    image: QImage = field(repr=False)  # the QImage drawn (speco3.render.qtscene)

    @cached_property
    def png(self) -> bytes:
        from speco3.render.qtscene import png_bytes

        try:
            return png_bytes(self.image)
        except RuntimeError as exc:
            raise RenderError(f"could not encode the rendered image: {exc}") from exc

    @cached_property
    def rgb(self) -> np.ndarray:
        from speco3.render.qtscene import rgb_array

        return rgb_array(self.image)

    @property
    def token_grid(self) -> tuple[int, int]:
        """``(nx, ny)`` image-token grid after Qwen2.5-VL's ``smart_resize``."""
        return token_grid(self.width, self.height)


def init_qt() -> None:
    """Make sure a Qt application exists (an offscreen one if needed) and the bundled fonts are loaded.

    Call it in the main thread before rendering from worker threads when no QApplication is running yet
    (command-line tools). A GUI should call it right after creating its QApplication: importing the Qt side
    also applies the ``None`` reference-count workaround for PySide6 6.12 on CPython 3.11
    (see :mod:`speco3.render.qtcompat`), which protects every PySide6 call in the process.
    """
    from speco3.render.qtscene import ensure_app

    ensure_app()


def release_thread_scene() -> None:
    """Drop the calling thread's render scene; call before a worker thread that rendered finishes."""
    import sys

    qtscene = sys.modules.get("speco3.render.qtscene")
    if qtscene is not None:
        qtscene.release_thread_scene()


def render_arrays(
    x: np.ndarray,
    y: np.ndarray,
    title: str,
    zoom: bool,
    wavelength_range: tuple[float, float] | None = None,
) -> RenderedImage:
    """Render prepared data (finite, sorted by wavelength) as the training renderer would.

    Parameters
    ----------
    x, y : ndarray
        Wavelength (Å) and flux of the points to draw.
    title : str
        Title line.
    zoom : bool
        True for a zoom window, False for the full view (figure-size classes differ).
    wavelength_range : (float, float) or None
        Requested range; used as the x axis when fewer than two points fall inside it.
    """
    from speco3.render.qtscene import thread_scene

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise RenderError(f"wavelength {x.shape} and flux {y.shape} must be 1D arrays of equal length")
    ok = within_limits(x, y)  # non-finite points, and values beyond ±1e150 whose spans and ticks overflow
    if not ok.all():
        x, y = x[ok], y[ok]
    if x.size > 1 and np.any(np.diff(x) < 0):
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
    try:
        scene = thread_scene()
        lay: FigureLayout = compute_layout(x, y, title, zoom, scene.measure, xlim_hint=wavelength_range)
        px = np.asarray(lay.x_to_px(x), dtype=np.float64)
        py = np.asarray(lay.y_to_px(y), dtype=np.float64)
        message = "No data in this range" if x.size == 0 else ""
        image = scene.render(lay, px, py, message=message)
    except (ValueError, RuntimeError, ZeroDivisionError, OverflowError) as exc:
        raise RenderError(f"could not render {title!r}: {exc}") from exc
    return RenderedImage(
        image=image,
        width=lay.width,
        height=lay.height,
        plot_rect=lay.axes,
        x_range=lay.xlim,
        y_range=lay.ylim,
        n_points=int(x.size),
        corner=lay.corner,
    )


def render_view(view: View) -> RenderedImage:
    """Render a view of a spectrum (full or zoomed) as the training renderer would (pixels and PNG)."""
    x, y = view.data()
    logger.debug("render %s range=%s frame=%s points=%d", view.display_title, view.wavelength_range, view.frame, x.size)
    return render_arrays(x, y, view.display_title, view.is_zoom, wavelength_range=view.wavelength_range)


def renderer_fingerprint() -> str:
    """``speco3.render <12 hex>``: a digest of this package's sources and fonts, recorded with training data (a
    change to the drawing code changes it)."""
    import hashlib
    from importlib import resources

    h = hashlib.sha256()
    root = resources.files(__package__)
    entries = sorted((e for e in root.iterdir() if e.name.endswith(".py")), key=lambda e: e.name)
    fonts = root / "fonts"
    if fonts.is_dir():
        entries += sorted(fonts.iterdir(), key=lambda e: e.name)
    for entry in entries:
        if entry.is_file():
            h.update(entry.name.encode())
            h.update(entry.read_bytes())
    return f"speco3.render {h.hexdigest()[:12]}"


# re-exported for callers that only need the rules
figure_size = layout.figure_size
x_tick_steps = layout.x_tick_steps

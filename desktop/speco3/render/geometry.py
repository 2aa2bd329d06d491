"""Figure geometry of the training renderer: tight layout and tight bounding box, without Qt.

matplotlib placed the axes with one pass of ``fig.tight_layout()`` (starting from the default subplot box
0.125/0.9/0.11/0.88) and then cropped the figure to the union of everything drawn plus 0.1 inch. We repeat
that computation here with text extents supplied by the caller (Qt font metrics in the renderer), so the
pyqtgraph image comes out with the same pixel size and the same axes placement.

All computations use figure pixels with y pointing *up* (matplotlib's convention); :class:`FigureLayout`
converts to image pixels (y down) at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from speco3.render import layout

logger = logging.getLogger(__name__)

PT = layout.DPI / 72.0  # pixels per point
TICK_PAD = 3.5 * PT  # xtick.major.pad / ytick.major.pad
LABEL_PAD = 4.0 * PT  # axes.labelpad
TITLE_PAD = 20.0 * PT  # set_title(pad=20)
OFFSET_PAD = 3.0 * PT  # Axis.OFFSETTEXTPAD
LAYOUT_PAD = 1.08 * 10.0 * PT  # tight_layout(pad=1.08) × font.size 10
SAVE_PAD = 0.1 * layout.DPI  # savefig(pad_inches=0.1)
BOX_PAD = 0.3  # boxstyle "round": pad in units of the font size

#: Text roles: (point size, bold).
ROLES: dict[str, tuple[float, bool]] = {
    "tick": (10.0, False),
    "label": (12.0, True),
    "title": (14.0, True),
    "stats": (9.0, False),
}

class Measure(Protocol):
    """Text measurement in pixels, in matplotlib's conventions."""

    def __call__(self, text: str, role: str) -> tuple[float, float, float]:
        """``(width, height, descent)`` of the ink of one line of text."""
        ...

    def font_metrics(self, role: str) -> tuple[float, float, float]:
        """``(ascent, descent, line_gap)`` of the font (OS/2 typo metrics, scaled to pixels)."""
        ...


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    @staticmethod
    def union(boxes: Sequence[Box]) -> Box:
        return Box(min(b.x0 for b in boxes), min(b.y0 for b in boxes), max(b.x1 for b in boxes), max(b.y1 for b in boxes))

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    @property
    def height(self) -> float:
        return self.y1 - self.y0


@dataclass(frozen=True)
class PlacedText:
    """A text line placed in image pixels: ``(x, baseline)`` is where the unrotated line starts.

    For ``rotation == 90`` the line runs upwards from ``(x, baseline)``.
    """

    text: str
    role: str
    x: float
    baseline: float
    rotation: int = 0


@dataclass
class FigureLayout:
    """Everything the painter needs, in image pixels (origin top-left, y down)."""

    width: int
    height: int
    axes: tuple[float, float, float, float]  # left, top, right, bottom
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    xmajor: np.ndarray
    xminor: np.ndarray
    ymajor: np.ndarray
    yminor: np.ndarray
    texts: list[PlacedText] = field(default_factory=list)
    stats_box: tuple[float, float, float, float] | None = None  # left, top, right, bottom
    stats_radius: float = 0.0
    corner: layout.Corner = "upper right"

    def x_to_px(self, x: np.ndarray | float) -> np.ndarray | float:
        left, _, right, _ = self.axes
        return left + (np.asarray(x) - self.xlim[0]) * (right - left) / (self.xlim[1] - self.xlim[0])

    def y_to_px(self, y: np.ndarray | float) -> np.ndarray | float:
        _, top, _, bottom = self.axes
        return bottom - (np.asarray(y) - self.ylim[0]) * (bottom - top) / (self.ylim[1] - self.ylim[0])


@dataclass
class _Text:
    """A text in figure pixels (y up) with matplotlib anchoring."""

    text: str
    role: str
    x: float
    y: float
    ha: str
    va: str
    rotation: int = 0
    lines: list[tuple[str, float, float, float]] = field(default_factory=list)  # (line, w, h, d)

    def box(self, measure: Measure) -> tuple[Box, list[tuple[str, float, float]]]:
        """Window box and per-line (text, x, baseline y) in figure pixels (matplotlib ≥ 3.11 layout)."""
        min_ascent, min_descent, line_gap = measure.font_metrics(self.role)
        split = self.text.split("\n")
        if len(split) == 1:
            line_gap = 0.0
        ws, placed, thisy, a, d = [], [], 0.0, 0.0, 0.0
        for line in split:
            w, h, d = measure(line, self.role) if line else (0.0, 0.0, 0.0)
            a = max(h - d, min_ascent) + line_gap / 2.0
            d = max(d, min_descent) + line_gap / 2.0
            thisy -= a
            ws.append(w)
            placed.append((line, w, thisy))
            thisy -= d
        width = max(ws)
        height = -(placed[-1][2] - d)
        # offset of the box top (local y = 0) above the anchor
        if self.va == "top":
            top = 0.0
        elif self.va == "bottom":
            top = height
        elif self.va == "baseline":
            top = a
        else:  # center_baseline (single line)
            top = a / 2.0
        left = {"left": 0.0, "center": -width / 2.0, "right": -width}[self.ha]
        lines = []
        if self.rotation == 90:
            # rotation_mode="anchor": align the unrotated box, then rotate 90° counter-clockwise about the anchor
            box = Box(self.x - top, self.y + left, self.x - top + height, self.y + left + width)
            for line, _w, by in placed:
                lines.append((line, self.x - (top + by), self.y + left))
            return box, lines
        x0 = self.x + left
        box = Box(x0, self.y + top - height, x0 + width, self.y + top)
        for line, w, by in placed:
            lx = x0 + {"left": 0.0, "center": (width - w) / 2.0, "right": width - w}[self.ha]
            lines.append((line, lx, self.y + top + by))
        return box, lines


@dataclass
class _Decor:
    texts: list[_Text]
    xmajor: np.ndarray
    xminor: np.ndarray
    ymajor: np.ndarray
    yminor: np.ndarray


def _decorations(ax: Box, xlim: tuple[float, float], ylim: tuple[float, float], x_steps: tuple[float, float],
                 title: str, measure: Measure) -> _Decor:
    """Ticks and texts around the axes box ``ax`` (figure pixels, y up)."""
    texts: list[_Text] = []
    xmaj_step, xmin_step = x_steps
    xmajor = layout.multiple_ticks(*xlim, xmaj_step)
    xminor = layout.minor_ticks(*xlim, xmajor, xmin_step)
    # like MultipleLocator, format with one tick beyond each end of the view
    xall = np.concatenate([xmajor[:1] - xmaj_step, xmajor, xmajor[-1:] + xmaj_step]) if xmajor.size else xmajor
    xl = layout.format_ticks(xall, *xlim)
    sx = ax.width / (xlim[1] - xlim[0])
    for v, lab in zip(xmajor, xl.labels[1:-1], strict=True):
        texts.append(_Text(lab, "tick", ax.x0 + (v - xlim[0]) * sx, ax.y0 - TICK_PAD, "center", "top"))
    nbins = layout.y_nbins(ax.height)
    yraw = layout.auto_ticks(*ylim, nbins)
    ymajor = yraw[(yraw >= ylim[0] - 1e-9 * abs(ylim[1] - ylim[0])) & (yraw <= ylim[1] + 1e-9 * abs(ylim[1] - ylim[0]))]
    ystep = float(yraw[1] - yraw[0]) if yraw.size > 1 else (ylim[1] - ylim[0])
    yminor = layout.minor_ticks(*ylim, ymajor, layout.minor_step(ystep))
    yl = layout.format_ticks(yraw, *ylim)
    labels = dict(zip(yraw.tolist(), yl.labels, strict=True))
    sy = ax.height / (ylim[1] - ylim[0])
    for v in ymajor:
        texts.append(_Text(labels[float(v)], "tick", ax.x0 - TICK_PAD, ax.y0 + (v - ylim[0]) * sy, "right", "center_baseline"))
    n_tick_texts = len(texts)
    boxes = [t.box(measure)[0] for t in texts]
    xboxes = boxes[: len(xmajor)]
    yboxes = boxes[len(xmajor) : n_tick_texts]
    bottom = min([b.y0 for b in xboxes] + [ax.y0])
    left = min([b.x0 for b in yboxes] + [ax.x0])
    cx = (ax.x0 + ax.x1) / 2.0
    if xl.offset_text:
        texts.append(_Text(xl.offset_text, "tick", ax.x1, bottom - OFFSET_PAD, "right", "top"))
    if yl.offset_text:
        texts.append(_Text(yl.offset_text, "tick", ax.x0, ax.y1 + OFFSET_PAD, "left", "baseline"))
    texts.append(_Text("Wavelength (Å)", "label", cx, bottom - LABEL_PAD, "center", "top"))
    texts.append(_Text("Flux", "label", left - LABEL_PAD, (ax.y0 + ax.y1) / 2.0, "center", "bottom", rotation=90))
    if title:
        texts.append(_Text(title, "title", cx, ax.y1 + TITLE_PAD, "center", "baseline"))
    return _Decor(texts, xmajor, xminor, ymajor, yminor)


def _tight_box(ax: Box, decor: _Decor, measure: Measure) -> Box:
    """Axes extent for tight_layout: like matplotlib's ``for_layout_only``, the title and x label count
    one pixel wide and the y label one pixel tall (their size cannot be improved by moving the axes)."""
    boxes = [ax]
    for t in decor.texts:
        b = t.box(measure)[0]
        if t.role == "title" or (t.role == "label" and t.rotation == 0):
            cx = (b.x0 + b.x1) / 2.0 - 0.5
            b = Box(cx, b.y0, cx + 1.0, b.y1)
        elif t.role == "label":
            cy = (b.y0 + b.y1) / 2.0 - 0.5
            b = Box(b.x0, cy, b.x1, cy + 1.0)
        boxes.append(b)
    return Box.union(boxes)


def _tight_layout(fig_w: float, fig_h: float, xlim: tuple[float, float], ylim: tuple[float, float],
                  x_steps: tuple[float, float], title: str, measure: Measure) -> Box:
    """One pass of matplotlib's tight_layout from the default subplot box; the default box if it fails."""
    default = Box(0.125 * fig_w, 0.11 * fig_h, 0.9 * fig_w, 0.88 * fig_h)
    tight = _tight_box(default, _decorations(default, xlim, ylim, x_steps, title, measure), measure)
    left = max(default.x0 - tight.x0, 0.0) + LAYOUT_PAD
    right = max(tight.x1 - default.x1, 0.0) + LAYOUT_PAD
    top = max(tight.y1 - default.y1, 0.0) + LAYOUT_PAD
    bottom = max(default.y0 - tight.y0, 0.0) + LAYOUT_PAD
    if left + right >= fig_w or top + bottom >= fig_h:
        logger.debug("tight layout not applied (margins %.1f/%.1f/%.1f/%.1f)", left, right, top, bottom)
        return default
    return Box(left, bottom, fig_w - right, fig_h - top)


def compute_layout(
    x: np.ndarray,
    y: np.ndarray,
    title: str,
    zoom: bool,
    measure: Measure,
    xlim_hint: tuple[float, float] | None = None,
) -> FigureLayout:
    """Lay out a figure the way the training renderer (matplotlib, tight layout, tight bbox) did.

    Parameters
    ----------
    x, y : ndarray
        The points drawn (finite, sorted by wavelength).
    title : str
        Title text.
    zoom : bool
        Zoomed window (True) or full view (False); selects the figure-size classes.
    measure : callable
        Text measurement ``measure(text, role) -> (width, height, descent)`` in pixels.
    xlim_hint : (float, float) or None
        Wavelength range to show when there are fewer than two points (a requested zoom range).
    """
    n = len(x)
    span = float(x[-1] - x[0]) if n else 0.0
    w_in, h_in = layout.figure_size(span, n, zoom)
    fig_w, fig_h = w_in * layout.DPI, h_in * layout.DPI
    if n >= 2 and span > 0:
        xlim = layout.with_margins(float(x[0]), float(x[-1]))
    elif xlim_hint is not None and xlim_hint[1] > xlim_hint[0]:
        xlim = (float(xlim_hint[0]), float(xlim_hint[1]))
    elif n:
        xlim = layout.nonsingular(float(x[0]), float(x[0]))
    else:
        xlim = (0.0, 1.0)
    if n:
        ylim = layout.with_margins(float(np.min(y)), float(np.max(y)))
    else:
        ylim = (0.0, 1.0)
    x_steps = layout.x_tick_steps(span if span > 0 else xlim[1] - xlim[0])
    ax = _tight_layout(fig_w, fig_h, xlim, ylim, x_steps, title, measure)
    decor = _decorations(ax, xlim, ylim, x_steps, title, measure)
    placed: list[tuple[_Text, Box, list]] = []
    for t in decor.texts:
        box, lines = t.box(measure)
        placed.append((t, box, lines))
    boxes = [ax] + [b for _, b, _ in placed]
    corner = layout.emptiest_corner(x, y)
    stats = _Text("\n".join(layout.stats_lines(x, y)), "stats", 0.0, 0.0, "left", "top")
    fx = 0.02 if "left" in corner else 0.98
    fy = 0.98 if "upper" in corner else 0.02
    stats.x = ax.x0 + fx * ax.width
    stats.y = ax.y0 + fy * ax.height
    stats.ha = "left" if "left" in corner else "right"
    stats.va = "top" if "upper" in corner else "bottom"
    sbox, slines = stats.box(measure)
    pad = BOX_PAD * ROLES["stats"][0] * PT
    sbox = Box(sbox.x0 - pad, sbox.y0 - pad, sbox.x1 + pad, sbox.y1 + pad)
    boxes.append(sbox)
    tight = Box.union(boxes)
    # savefig(bbox_inches="tight", pad_inches=0.1): crop to the union, pad, truncate to whole pixels
    x_off = tight.x0 - SAVE_PAD
    y_top = tight.y1 + SAVE_PAD
    width = int(tight.width + 2 * SAVE_PAD)
    height = int(tight.height + 2 * SAVE_PAD)

    def to_img(px: float, py: float) -> tuple[float, float]:
        return px - x_off, y_top - py

    texts = []
    for t, _box, lines in placed + [(stats, sbox, slines)]:
        for line, lx, ly in lines:
            ix, iy = to_img(lx, ly)
            texts.append(PlacedText(line, t.role, ix, iy, t.rotation))
    l_, t_ = to_img(ax.x0, ax.y1)
    r_, b_ = to_img(ax.x1, ax.y0)
    sl, st = to_img(sbox.x0, sbox.y1)
    sr, sb = to_img(sbox.x1, sbox.y0)
    return FigureLayout(
        width=max(width, 1),
        height=max(height, 1),
        axes=(l_, t_, r_, b_),
        xlim=xlim,
        ylim=ylim,
        xmajor=decor.xmajor,
        xminor=decor.xminor,
        ymajor=decor.ymajor,
        yminor=decor.yminor,
        texts=texts,
        stats_box=(sl, st, sr, sb),
        stats_radius=pad,
        corner=corner,
    )


def token_grid(width: int, height: int) -> tuple[int, int]:
    """``(nx, ny)`` image-token grid of an image of this size (the model's view)."""
    from speco3.imaging import FACTOR, smart_resize

    h, w = smart_resize(height, width)
    return w // FACTOR, h // FACTOR


__all__ = ["Box", "FigureLayout", "PlacedText", "ROLES", "compute_layout", "token_grid"]

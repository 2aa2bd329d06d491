"""Layout rules of the training renderer (docs/design.md §3), as pure functions without Qt.

The Spec-o3 training routine drew its images with matplotlib at 80 dpi and saved them with a tight bounding
box. Everything that decides *what* the picture shows — figure-size class, tick steps and tick labels, axis
margins, the stats text and the corner it sits in — lives here, so that the pyqtgraph renderer and the
matplotlib reference (``benchmarks/mpl_reference.py``) share one set of rules.

The y-axis locator and formatter follow matplotlib's defaults (``AutoLocator`` = ``MaxNLocator`` with steps
1, 2, 2.5, 5, 10; ``AutoMinorLocator``; ``ScalarFormatter`` with offset threshold 4 and power limits −5…6),
reimplemented here from their documented behaviour.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

logger = logging.getLogger(__name__)

DPI = 80
MARGIN = 0.05  # matplotlib's default axes.xmargin / axes.ymargin
MINUS = "\u2212"  # matplotlib draws tick labels with a true minus sign

Corner = Literal["upper right", "upper left", "lower left", "lower right"]
#: Order in which corners are tried when several are equally empty.
CORNERS: tuple[Corner, ...] = ("upper right", "upper left", "lower left", "lower right")

# x tick steps (major, minor) by wavelength span, widest first: (min span, major, minor)
_X_STEPS = (
    (5000.0, 1000.0, 200.0),
    (1000.0, 200.0, 50.0),
    (500.0, 100.0, 20.0),
    (300.0, 100.0, 25.0),
    (150.0, 50.0, 25.0),
    (100.0, 25.0, 5.0),
    (50.0, 10.0, 2.0),
    (20.0, 5.0, 1.0),
    (5.0, 2.0, 0.5),
)
_X_STEP_SMALLEST = (1.0, 0.2)


def figure_size(span: float, n_points: int, zoom: bool) -> tuple[float, float]:
    """Figure size in inches for a view.

    Parameters
    ----------
    span : float
        Wavelength span of the shown data in Å (max − min of the points drawn).
    n_points : int
        Number of points drawn.
    zoom : bool
        True for a zoomed window, False for the full spectrum (the classes differ).

    Returns
    -------
    (width, height) : tuple of float
    """
    if zoom:
        if span < 50:
            w, h = 6.0, 4.0
        elif span < 200:
            w, h = 7.0, 4.5
        elif span < 1000:
            w, h = 8.0, 5.0
        else:
            w, h = 9.0, 5.5
    elif span > 3000:
        w, h = 10.0, 6.0
    elif span > 1000:
        w, h = 8.0, 5.0
    elif span > 200:
        w, h = 7.0, 4.5
    else:
        w, h = 6.0, 4.0
    if n_points > 10_000:
        w *= 1.05
    elif n_points < 50:
        w *= 0.95
    return w, h


def x_tick_steps(span: float) -> tuple[float, float]:
    """Major and minor x tick step (Å) for a wavelength span (docs/design.md §3 table)."""
    for min_span, major, minor in _X_STEPS:
        if span >= min_span:
            return major, minor
    return _X_STEP_SMALLEST


def with_margins(lo: float, hi: float, margin: float = MARGIN) -> tuple[float, float]:
    """Axis limits for data spanning ``lo…hi``: matplotlib's 5 % margins, made non-singular."""
    lo, hi = nonsingular(lo, hi)
    pad = (hi - lo) * margin
    return lo - pad, hi + pad


def nonsingular(vmin: float, vmax: float, expander: float = 0.05) -> tuple[float, float]:
    """Widen a zero-width or non-finite interval the way matplotlib does for autoscaling."""
    if not (math.isfinite(vmin) and math.isfinite(vmax)):
        return -expander, expander
    if vmax < vmin:
        vmin, vmax = vmax, vmin
    maxabs = max(abs(vmin), abs(vmax))
    if maxabs < _TINY_ABS:  # matplotlib's rule: data this close to 0 (subnormals included) is drawn around 0
        return -expander, expander
    if vmax - vmin <= maxabs * 1e-15:
        if vmax == 0 and vmin == 0:
            return -expander, expander
        return vmin - expander * abs(vmin), vmax + expander * abs(vmax)
    return vmin, vmax


#: ``(1e6 / tiny) * finfo(float).tiny`` of ``matplotlib.transforms.nonsingular`` (tiny = 1e-15): about 2.2e-287.
_TINY_ABS = 1e21 * float(np.finfo(float).tiny)


def multiple_ticks(vmin: float, vmax: float, step: float) -> np.ndarray:
    """Multiples of ``step`` inside ``[vmin, vmax]`` (matplotlib's MultipleLocator, clipped to the view)."""
    if not step > 0 or not vmax > vmin:
        return np.empty(0)
    first = math.ceil(vmin / step - 1e-9)
    last = math.floor(vmax / step + 1e-9)
    if last - first > 10_000:
        logger.debug("refusing %d ticks for step %g", last - first, step)
        return np.empty(0)
    return np.arange(first, last + 1) * step


# -- y axis: matplotlib's AutoLocator ---------------------------------------------------------------------
_STEPS = np.array([1.0, 2.0, 2.5, 5.0, 10.0])
_EXTENDED_STEPS = np.concatenate([0.1 * _STEPS[:-1], _STEPS, [10.0 * _STEPS[1]]])


def y_nbins(axes_height_px: float, tick_label_pt: float = 10.0, dpi: float = DPI) -> int:
    """Number of y intervals matplotlib's ``nbins='auto'`` allows for an axes of this height."""
    length_pt = axes_height_px / dpi * 72.0
    return int(np.clip(math.floor(length_pt / (tick_label_pt * 2.0)), 1, 9))


def _scale_range(vmin: float, vmax: float, n: int, threshold: float = 100.0) -> tuple[float, float]:
    dv = abs(vmax - vmin)
    meanv = (vmax + vmin) / 2.0
    if abs(meanv) / dv < threshold:
        offset = 0.0
    else:
        offset = math.copysign(10 ** (math.log10(abs(meanv)) // 1), meanv)
    return 10 ** (math.log10(dv / n) // 1), offset


def _edge_close(ms: float, edge: float, step: float, offset: float) -> bool:
    if offset > 0:
        tol = min(0.4999, max(1e-10, 10 ** (math.log10(offset / step) - 12)))
    else:
        tol = 1e-10
    return abs(ms - edge) < tol


def auto_ticks(vmin: float, vmax: float, nbins: int) -> np.ndarray:
    """Major tick positions as matplotlib's MaxNLocator(steps=[1, 2, 2.5, 5, 10]) picks them.

    The returned ticks may extend one step beyond the view; callers clip to the view.
    """
    vmin, vmax = nonsingular(vmin, vmax, expander=1e-13)
    scale, offset = _scale_range(vmin, vmax, nbins)
    lo, hi = vmin - offset, vmax - offset
    steps = _EXTENDED_STEPS * scale
    raw_step = (hi - lo) / nbins
    istep = int(np.nonzero(steps >= raw_step)[0][0])
    ticks = np.empty(0)
    aoff = abs(offset)
    for step in steps[: istep + 1][::-1]:
        best = (lo // step) * step
        d, m = divmod(lo - best, step)
        low = d + 1 if _edge_close(m / step, 1, step, aoff) else d
        d, m = divmod(hi - best, step)
        high = d if _edge_close(m / step, 0, step, aoff) else d + 1
        ticks = np.arange(low, high + 1) * step + best
        if ((ticks <= hi) & (ticks >= lo)).sum() >= 2:
            break
    return ticks + offset


def minor_step(major_step: float) -> float:
    """Minor tick step of matplotlib's AutoMinorLocator (5 divisions for 1/2.5/5 mantissas, else 4)."""
    mantissa = 10 ** (math.log10(major_step) % 1)
    ndivs = 5 if np.isclose(mantissa, [1.0, 2.5, 5.0, 10.0]).any() else 4
    return major_step / ndivs


def minor_ticks(vmin: float, vmax: float, major: np.ndarray, step: float) -> np.ndarray:
    """Minor ticks in the view, excluding positions of major ticks."""
    ticks = multiple_ticks(vmin, vmax, step)
    if major.size and ticks.size:
        tol = step * 1e-6
        keep = np.min(np.abs(ticks[:, None] - major[None, :]), axis=1) > tol
        ticks = ticks[keep]
    return ticks


# -- tick labels: matplotlib's ScalarFormatter --------------------------------------------------------------
@dataclass(frozen=True)
class TickLabels:
    """Formatted tick labels of one axis and the offset / multiplier text shown at the axis end."""

    values: np.ndarray
    labels: list[str]
    offset_text: str = ""


def _offset_for(locs: np.ndarray, threshold: int = 4) -> float:
    if locs.size == 0:
        return 0.0
    lmin, lmax = float(locs.min()), float(locs.max())
    if lmin == lmax or lmin <= 0 <= lmax:
        return 0.0
    abs_min, abs_max = sorted([abs(lmin), abs(lmax)])
    sign = math.copysign(1, lmin)
    oom_max = math.ceil(math.log10(abs_max))
    oom = 1 + next(o for o in itertools.count(oom_max, -1) if abs_min // 10.0**o != abs_max // 10.0**o)
    if (abs_max - abs_min) / 10.0**oom <= 1e-2:
        oom = 1 + next(o for o in itertools.count(oom_max, -1) if abs_max // 10.0**o - abs_min // 10.0**o > 1)
    n = threshold - 1
    return sign * (abs_max // 10.0**oom) * 10.0**oom if abs_max // 10.0 ** (oom + n) else 0.0


def _fmt_number(value: float) -> str:
    """matplotlib's ``format_data`` style: shortest repr, exponent without padding."""
    text = f"{value:.10e}"
    mant, exp = text.split("e")
    mant = mant.rstrip("0").rstrip(".")
    e = int(exp)
    return mant if e == 0 else f"{mant}e{e}"


def format_ticks(values: np.ndarray, vmin: float, vmax: float) -> TickLabels:
    """Tick labels for ``values`` in the view ``vmin…vmax`` (ScalarFormatter rules, unicode minus)."""
    values = np.asarray(values, dtype=float)
    visible = values[(values >= vmin) & (values <= vmax)]
    offset = _offset_for(visible)
    oom = 0
    if visible.size:
        if offset:
            ref = math.floor(math.log10(vmax - vmin))
        else:
            top = float(np.abs(visible).max())
            ref = 0 if top == 0 else math.floor(math.log10(top))
        oom = ref if (ref <= -5 or ref >= 6) else 0
    locs = values if values.size >= 2 else np.concatenate([values, [vmin, vmax]])
    scaled = (locs - offset) / 10.0**oom
    rng = float(np.ptp(scaled)) if scaled.size else 0.0
    if rng == 0:
        rng = float(np.max(np.abs(scaled))) if scaled.size else 0.0
    if rng == 0:
        rng = 1.0
    if values.size < 2:
        scaled = scaled[: values.size]
    rng_oom = math.floor(math.log10(rng))
    sigfigs = max(0, 3 - rng_oom)
    thresh = 1e-3 * 10.0**rng_oom
    while sigfigs >= 0:
        if scaled.size and np.abs(scaled - np.round(scaled, decimals=sigfigs)).max() < thresh:
            sigfigs -= 1
        else:
            break
    sigfigs += 1
    labels = [(f"{0.0 if abs(v) < 1e-8 else v:1.{sigfigs}f}").replace("-", MINUS) for v in scaled]
    offset_text = ""
    if visible.size and (oom or offset):
        sci = f"1e{oom}" if oom else ""
        off = ""
        if offset:
            off = _fmt_number(offset)
            if offset > 0:
                off = "+" + off
        offset_text = (sci + off).replace("-", MINUS)
    return TickLabels(values=values, labels=labels, offset_text=offset_text)


# -- stats box ---------------------------------------------------------------------------------------------
def stats_lines(x: np.ndarray, y: np.ndarray) -> list[str]:
    """The three lines of the stats box: point count, λ range (1 decimal), flux range (2-digit exponent)."""
    n = int(len(x))
    if n == 0:
        return ["Data points: 0"]
    return [
        f"Data points: {n}",
        f"λ range: {float(np.min(x)):.1f} - {float(np.max(x)):.1f} Å",
        f"Flux range: {float(np.min(y)):.2e} - {float(np.max(y)):.2e}",
    ]


def emptiest_corner(x: np.ndarray, y: np.ndarray) -> Corner:
    """The quadrant of the data box holding the fewest points (ties: upper right, upper left, …).

    The data box is split at the middle of the x and y data ranges; this reproduces the corner the training
    renderer chose in every reference render.
    """
    if len(x) == 0:
        return "upper right"
    xmid = (float(np.min(x)) + float(np.max(x))) / 2.0
    ymid = (float(np.min(y)) + float(np.max(y))) / 2.0
    right = x > xmid
    upper = y > ymid
    counts = {
        "upper right": int(np.sum(right & upper)),
        "upper left": int(np.sum(~right & upper)),
        "lower left": int(np.sum(~right & ~upper)),
        "lower right": int(np.sum(right & ~upper)),
    }
    return min(CORNERS, key=lambda c: counts[c])

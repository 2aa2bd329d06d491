"""The viewer's line markers, telluric bands and array helpers (no Qt).

Line markers come from the task library (`speco3.agent.tasks`, the ``lines`` of each task file): the viewer
marks exactly the lines of the current task, and `GENERIC` when no task is chosen. Wavelengths are rest-frame
**vacuum** Å; the viewer converts them to air (IAU/Morton 2000 formula) when the spectrum says its wavelengths are
in air, and states the medium on screen.
"""

from __future__ import annotations

import logging

import numpy as np

from speco3.agent.tasks import Line, Task
from speco3.spectra.model import within_limits

log = logging.getLogger(__name__)

# Shown when no task is chosen (vacuum Å; the names carry the usual air-wavelength designation). A line that a
# built-in task also marks has the same name and wavelength there (tests/gui/test_line_markers.py).
GENERIC: tuple[Line, ...] = (
    Line("Hα", 6564.61), Line("Hβ", 4862.68), Line("Hγ", 4341.68), Line("Hδ", 4102.89), Line("Hε", 3971.20),
    Line("Ca II K", 3934.78, "absorption"), Line("Ca II H", 3969.59, "absorption"),
    Line("G band", 4305.0, "absorption"), Line("Mg b", 5176.7, "absorption"), Line("Na D", 5894.57, "absorption"),
    Line("Ca II 8542", 8544.44, "absorption"), Line("[O II]", 3728.48, "emission"),
    Line("[O III] 5007", 5008.24, "emission"), Line("[N II] 6583", 6585.27, "emission"),
    Line("[S II] 6716", 6718.29, "emission"),
)
# Telluric absorption in the observed frame (air Å): O2 B, H2O, O2 A, H2O.
TELLURIC_BANDS: tuple[tuple[float, float, str], ...] = (
    (6860.0, 6925.0, "O₂ B"), (7150.0, 7350.0, "H₂O"), (7590.0, 7700.0, "O₂ A"), (8120.0, 8350.0, "H₂O"),
    (8950.0, 9800.0, "H₂O"),
)


def vac_to_air(wavelength: np.ndarray | float) -> np.ndarray | float:
    """Vacuum → air wavelength (Å), IAU standard (Morton 2000), valid above 2000 Å."""
    w = np.asarray(wavelength, dtype=float)
    s2 = (1e4 / w) ** 2
    n = 1 + 0.0000834254 + 0.02406147 / (130 - s2) + 0.00015998 / (38.9 - s2)
    out = np.where(w > 2000, w / n, w)
    return float(out) if np.ndim(out) == 0 else out


def air_to_vac(wavelength: np.ndarray | float) -> np.ndarray | float:
    """Air → vacuum wavelength (Å), inverse of `vac_to_air` by fixed-point iteration."""
    w_air = np.asarray(wavelength, dtype=float)
    w = w_air.copy()
    for _ in range(3):
        w = w + (w_air - np.asarray(vac_to_air(w)))
    return float(w) if np.ndim(w) == 0 else w


def lines_for_task(task: Task | None) -> tuple[Line, ...]:
    """The lines to mark for ``task``: its own line list, or `GENERIC` without a task or when the list is empty."""
    return task.lines if task is not None and task.lines else GENERIC


def known_lines(tasks: dict[str, Task] | None = None) -> tuple[Line, ...]:
    """The lines a task editor offers: every line of ``tasks`` and `GENERIC`, one per name (a task's first: its
    kind says more than the generic list's), by wavelength."""
    seen: dict[str, Line] = {}
    for ln in (*(ln for t in (tasks or {}).values() for ln in t.lines), *GENERIC):
        seen.setdefault(ln.name, ln)
    return tuple(sorted(seen.values(), key=lambda ln: ln.wavelength))


def label_rows(positions: list[float], widths: list[float], n_rows: int = 3, gap: float = 6.0) -> list[int | None]:
    """Rows for labels so that none overlap: 0 is the first row, None hides the label.

    The viewer lays out its line, telluric band and evidence window labels with it (an ``n_rows`` as large as the
    number of labels hides none). Each label starts at its line's pixel position and extends ``widths[i]`` pixels to the right. Labels are
    placed in the order given (earlier lines win: task line lists put the defining features first), each in the
    first row where it keeps ``gap`` pixels from the labels already there; a label that fits in no row is hidden
    (its line stays drawn). Non-finite positions (lines outside the view) get None and take no room.
    """
    taken: list[list[tuple[float, float]]] = [[] for _ in range(max(1, n_rows))]
    out: list[int | None] = []
    for x, w in zip(positions, widths, strict=True):
        if not np.isfinite(x):
            out.append(None)
            continue
        lo, hi = float(x), float(x) + max(float(w), 0.0)
        for r, row in enumerate(taken):
            if all(hi + gap <= a or lo >= b + gap for a, b in row):
                row.append((lo, hi))
                out.append(r)
                break
        else:
            out.append(None)
    return out


# -- array helpers -------------------------------------------------------------------------------------------------
def boxcar(flux: np.ndarray, good: np.ndarray, width: int, ivar: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray | None]:
    """Inverse-variance weighted boxcar over good pixels.

    Returns the smoothed flux (NaN where the window holds no good pixel) and, when ``ivar`` is given, the 1σ error
    of the smoothed flux.
    """
    weights = np.where(good, ivar if ivar is not None else 1.0, 0.0)
    weights = np.where(np.isfinite(weights), weights, 0.0)
    if width <= 1:
        out = np.where(good, flux, np.nan)
        sig = None
        if ivar is not None:
            with np.errstate(divide="ignore"):
                sig = np.where(weights > 0, 1 / np.sqrt(np.where(weights > 0, weights, 1)), np.nan)
        return out, sig
    kernel = np.ones(int(width))
    f = np.where(good, flux, 0.0)
    num = np.convolve(f * weights, kernel, mode="same")
    den = np.convolve(weights, kernel, mode="same")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, num / den, np.nan)
        sig = np.where(den > 0, 1 / np.sqrt(den), np.nan) if ivar is not None else None
    return out, sig


def running_median(values: np.ndarray, width: int = 7) -> np.ndarray:
    """NaN-aware running median (odd ``width``); single-pixel spikes vanish, lines a few pixels wide stay."""
    n = values.size
    if n < width:
        return values.copy()
    half = width // 2
    padded = np.pad(values.astype(float), half, mode="edge")
    if np.isfinite(values).all():  # the common case (display_range passes finite values): the middle of each
        # window by a partial sort, no NaN bookkeeping (numpy only: the bundle leaves scipy out)
        return np.partition(np.lib.stride_tricks.sliding_window_view(padded, width), half, axis=1)[:, half]
    # np.nanmedian over the windows takes its slow masked-array path (20 ms for 20,000 pixels); sorting each window
    # (NaN sort last) and averaging its two middle non-NaN values is the same median, 5-7x faster
    windows = np.sort(np.lib.stride_tricks.sliding_window_view(padded, width), axis=1)
    k = width - np.count_nonzero(np.isnan(windows), axis=1)
    rows = np.arange(n)
    with np.errstate(invalid="ignore"):  # inf + -inf in a window: NaN, as np.nanmedian gives
        mid = 0.5 * (windows[rows, np.maximum(k - 1, 0) // 2] + windows[rows, np.minimum(k // 2, width - 1)])
    return np.where(k > 0, mid, np.nan)


def despike(values: np.ndarray, ratio: float = 0.25, n_sigma: float = 3.0) -> np.ndarray:
    """``values`` (finite, in order) with isolated one-pixel outliers set to the nearer of their two neighbours.

    A pixel is an isolated outlier when it stands more than ``n_sigma`` noise units beyond both neighbours and
    its excess over the local level (7-pixel running median) is more than 1/``ratio`` times that of its larger
    neighbour, on the same side. A real line, however narrow, is spread over two pixels or more by the
    spectrograph (a Gaussian of 1.5 pixels FWHM still puts 30 % of its peak in the next pixel), so it keeps every
    pixel; a cosmic ray or a hot or dead pixel does not. Two adjacent bad pixels are not touched.
    """
    v = np.asarray(values, dtype=float)
    if v.size < 3:
        return v.copy()
    excess = v - running_median(v, 7)
    noise = 1.4826 * float(np.median(np.abs(np.diff(v)))) / np.sqrt(2)  # robust per-pixel noise
    e = np.pad(excess, 1, mode="reflect")  # the end pixels are judged against their one neighbour
    mid, side = e[1:-1], np.maximum(e[:-2], e[2:])
    low = np.minimum(e[:-2], e[2:])
    w = np.pad(v, 1, mode="reflect")
    near_hi, near_lo = np.maximum(w[:-2], w[2:]), np.minimum(w[:-2], w[2:])
    up = (v > near_hi + n_sigma * noise) & (mid > 0) & (np.maximum(side, 0) < ratio * mid)
    down = (v < near_lo - n_sigma * noise) & (mid < 0) & (np.minimum(low, 0) > ratio * mid)
    return np.where(up, near_hi, np.where(down, near_lo, v))


def display_range(values: np.ndarray, edge_fraction: float = 0.03, edge_noise: float = 4.0, margin: float = 0.05
                  ) -> tuple[float, float] | None:
    """Y-range for the viewer: every finite value in view except isolated one-pixel spikes and noisy edges.

    Nothing real is cut: the range spans the extremes of the data after `despike` (which changes only single-pixel
    outliers), so a line two pixels wide, a deep band or a steep red end stays inside the plot. The outer
    ``edge_fraction`` of the window on each side is left out only where it is noisy: where the local pixel-to-pixel
    scatter (15-pixel running median of the absolute differences) is more than ``edge_noise`` times the 90th
    percentile of the scatter inside (the ragged LAMOST/SDSS ends), not where the flux just rises or falls.
    """
    raw = np.asarray(values, dtype=float)
    raw = raw[within_limits(raw)]  # finite, and within ±1e150: spans and margins of the rest stay finite
    n = raw.size
    if n == 0:
        return None
    v = despike(raw)
    keep = np.ones(n, dtype=bool)
    cut = int(n * edge_fraction) if n > 50 else 0
    if cut:
        scatter = running_median(np.abs(np.diff(raw, prepend=raw[1:2])), 15)  # of the data as it is
        limit = edge_noise * float(np.percentile(scatter[cut:n - cut], 90))
        keep[:cut] = scatter[:cut] <= limit
        keep[n - cut:] = scatter[n - cut:] <= limit
    lo, hi = float(v[keep].min()), float(v[keep].max())
    scale = max(abs(lo), abs(hi))
    if 0 < scale < 1e-200:  # so close to 0 (subnormals) that the view's scale would overflow: drawn around 0
        lo, hi = -0.05, 0.05
    span = hi - lo
    if span <= scale * 1e-12:  # flat (to the precision a view can show)
        span = abs(hi) * 0.1 or 1.0
    return lo - margin * span, hi + margin * span


def mask_runs(mask: np.ndarray, merge_gap: int = 2, max_runs: int = 300) -> list[tuple[int, int]]:
    """Index runs ``[start, stop)`` of True values; runs closer than ``merge_gap`` are merged."""
    if mask.size == 0 or not mask.any():
        return []
    m = np.concatenate([[False], mask.astype(bool), [False]])
    d = np.diff(m.astype(np.int8))
    starts, stops = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    runs: list[tuple[int, int]] = []
    for s, e in zip(starts, stops, strict=True):
        if runs and s - runs[-1][1] <= merge_gap:
            runs[-1] = (runs[-1][0], int(e))
        else:
            runs.append((int(s), int(e)))
    while len(runs) > max_runs:  # merge further rather than draw thousands of items
        merge_gap *= 2
        runs = mask_runs(mask, merge_gap, max_runs=10**9)
    return runs

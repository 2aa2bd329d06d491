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
from speco3.spectra.linelists import air_to_vac as air_to_vac  # noqa: I001 - re-exported (home: speco3.spectra.linelists)
from speco3.spectra.linelists import vac_to_air as vac_to_air
from speco3.spectra.model import within_limits

log = logging.getLogger(__name__)

# Shown when no task is chosen (vacuum Å; the names carry the usual air-wavelength designation). A line that a
# built-in task also marks has the same name and wavelength there (tests/gui/test_line_markers.py).
GENERIC: tuple[Line, ...] = (
    Line("Hα", 6564.61), Line("Hβ", 4862.68), Line("Hγ", 4341.68), Line("Hδ", 4102.89), Line("Hε", 3971.20),
    Line("Ca II K", 3934.78, "absorption"), Line("Ca II H", 3969.59, "absorption"),
    Line("G band", 4305.61, "absorption"), Line("Mg b", 5176.7, "absorption"), Line("Na D", 5894.57, "absorption"),
    Line("Ca II 8542", 8544.44, "absorption"), Line("[O II]", 3728.48, "emission"),
    Line("[O III] 5007", 5008.24, "emission"), Line("[N II] 6583", 6585.27, "emission"),
    Line("[S II] 6716", 6718.29, "emission"),
)
# Telluric absorption in the observed frame (air Å): O2 B, H2O, O2 A, H2O.
TELLURIC_BANDS: tuple[tuple[float, float, str], ...] = (
    (6860.0, 6925.0, "O₂ B"), (7150.0, 7350.0, "H₂O"), (7590.0, 7700.0, "O₂ A"), (8120.0, 8350.0, "H₂O"),
    (8950.0, 9800.0, "H₂O"),
)


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
        # window by a partial sort, no NaN bookkeeping
        return np.partition(np.lib.stride_tricks.sliding_window_view(padded, width), half, axis=1)[:, half]
    # np.nanmedian over the windows takes its slow masked-array path (20 ms for 20,000 pixels); sorting each window
    # (NaN sort last) and averaging its two middle non-NaN values is the same median, 5-7x faster
    windows = np.sort(np.lib.stride_tricks.sliding_window_view(padded, width), axis=1)
    k = width - np.count_nonzero(np.isnan(windows), axis=1)
    rows = np.arange(n)
    with np.errstate(invalid="ignore"):  # inf + -inf in a window: NaN, as np.nanmedian gives
        mid = 0.5 * (windows[rows, np.maximum(k - 1, 0) // 2] + windows[rows, np.minimum(k // 2, width - 1)])
    return np.where(k > 0, mid, np.nan)


_RING = np.array([-7, -6, -5, -4, -3, 3, 4, 5, 6, 7])  # the pixels `despike` takes a candidate's local level from


def despike(values: np.ndarray, ratio: float = 0.25, n_sigma: float = 3.0, tiny: float = 0.05,
            scatter: np.ndarray | None = None) -> np.ndarray:
    """``values`` (finite, in order) with isolated one-pixel outliers set to the nearer of their two neighbours.

    A pixel is an isolated outlier when it stands more than ``n_sigma`` noise units beyond both neighbours and
    its larger neighbour (on the same side) is not part of a feature: that neighbour's excess over the local level
    (the median of the pixels 3 to 7 away on either side: a line a few pixels wide does not lift it) is either
    within ``n_sigma`` noise units **and** less than ``ratio`` times the pixel's own excess, or less than ``tiny``
    times it (a cosmic ray far stronger than the line it sits beside). A real line is spread over two pixels or more by the spectrograph (a Gaussian of 1.5 pixels
    FWHM still puts 30 % of its peak in the next pixel), so its neighbour stands out of the noise or carries a
    good share of the peak, and every pixel of it is kept, however high the S/N (a ratio alone clipped the
    sharp peak of a well-exposed line whose neighbours carried less than a quarter of its excess). The noise is
    the smaller of the window's and the local robust pixel-to-pixel scatter (``scatter``: the 15-pixel running
    median of the absolute differences, computed when not given): the smaller noise keeps more. Two adjacent bad
    pixels are not touched.
    """
    v = np.asarray(values, dtype=float)
    if v.size < 3:
        return v.copy()
    if scatter is None:
        scatter = running_median(np.abs(np.diff(v, prepend=v[1:2])), 15)
    scale = 1.4826 / np.sqrt(2)  # robust per-pixel noise from the absolute differences of neighbours
    limit = n_sigma * scale * np.minimum(scatter, float(np.median(scatter)))
    w = np.pad(v, 1, mode="reflect")  # the end pixels are judged against their one neighbour
    near_hi, near_lo = np.maximum(w[:-2], w[2:]), np.minimum(w[:-2], w[2:])
    # candidates: pixels that stand out beyond both neighbours by more than the noise (few); the rest of the test
    # is for them only
    i = np.flatnonzero((v > near_hi + limit) | (v < near_lo - limit))
    if not i.size:
        return v.copy()
    n = v.size
    level = np.median(v[np.clip(i[:, None] + _RING, 0, n - 1)], axis=1)
    mid = v[i] - level
    e1, e2 = w[i] - level, w[i + 2] - level  # the neighbours (reflected at the ends)
    lim = limit[i]
    side, low = np.maximum(e1, e2), np.minimum(e1, e2)
    up = (mid > 0) & (((side <= lim) & (side < ratio * mid)) | (side < tiny * mid))
    down = (mid < 0) & (((low >= -lim) & (low > ratio * mid)) | (low > tiny * mid))
    out = v.copy()
    out[i[up]] = near_hi[i[up]]
    out[i[down]] = near_lo[i[down]]
    return out


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
    scatter = running_median(np.abs(np.diff(raw, prepend=raw[1:2])), 15) if n > 2 else None  # of the data as it is
    v = despike(raw, scatter=scatter)
    keep = np.ones(n, dtype=bool)
    cut = int(n * edge_fraction) if n > 50 else 0
    if cut and scatter is not None:
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


def mask_runs(mask: np.ndarray, merge_gap: int = 2, max_runs: int = 4000) -> list[tuple[int, int]]:
    """Index runs ``[start, stop)`` of True values; runs closer than ``merge_gap`` are merged (further, while there
    are more than ``max_runs``: one bar item draws them all, so only tens of thousands would cost; merging a spectrum
    with every tenth pixel masked down to a few hundred runs shaded all of it)."""
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

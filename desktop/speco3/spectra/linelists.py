"""Spectral lines and the line lists the viewer marks (no Qt): the one home of a line's type, of air/vacuum
conversion and of where a marker goes.

* `Line`: a name, a rest wavelength in Å (**vacuum**) and a kind. Task files carry their own lines
  (`speco3.agent.tasks`); the built-in lists here are chosen in the viewer independent of the task.
* `builtin_line_lists`: QSO, galaxy emission and absorption, stars by type and night-sky lines, from
  ``linelists.json`` beside this module, which cites the source of every list (SDSS's DR7 line table, linetools'
  tables, NIST, Osterbrock et al. 1996). A list in air is converted to vacuum when read, so every `Line` is in
  vacuum; a list in the observed frame (sky lines) does not move with the redshift.
* `read_line_list`: the user's own file, CSV or ECSV, with columns ``name`` and ``wavelength`` (and optionally
  ``kind``); an ECSV file may state ``medium: air`` and ``frame: observed`` in its meta and a wavelength unit (nm,
  µm); without them the file is read as rest-frame vacuum Å, and the viewer says so.
* `marker_position`: where a line is drawn for a spectrum in air or vacuum, at a redshift, in the frame shown;
  `marker_z` the other way round (a dragged marker, a measured line), `line_centroid` where a line in a window is.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np

from speco3.errors import Speco3Error
from speco3.spectra.model import Frame, Medium, to_frame

log = logging.getLogger(__name__)

LINE_KINDS = ("emission", "absorption", "band", "line")
#: What a user's line-list file may hold: bytes, rows, characters of a name.
MAX_FILE_BYTES = 2_000_000
MAX_LINES = 5000
MAX_NAME = 40


class LineListError(Speco3Error):
    """A line-list file cannot be used (unreadable, wrong columns, too large)."""


@dataclass(frozen=True)
class Line:
    """A spectral line or molecular band head that the viewer marks.

    ``wavelength`` is the rest wavelength in Å, **vacuum** (the viewer converts it to air for spectra in air).
    The name carries the usual designation, which by astronomers' convention is the rounded *air* wavelength:
    ``"He II 4686"`` for 4687.02 Å in vacuum.
    """

    name: str
    wavelength: float
    kind: str = "line"  # one of LINE_KINDS


@dataclass(frozen=True)
class LineList:
    """A named list of lines: ``frame`` "rest" lists move with the redshift, "observed" ones (sky) do not.
    ``medium`` is the medium its source gave (the lines themselves are vacuum); ``source`` cites it."""

    key: str
    title: str
    lines: tuple[Line, ...]
    frame: Frame = "rest"
    medium: Literal["air", "vacuum"] = "vacuum"
    source: str = ""


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


def marker_position(line: Line, medium: Medium, z_lines: float, z_spectrum: float, frame: Frame,
                    list_frame: Frame = "rest") -> float:
    """Where ``line`` is drawn: in air for a spectrum in air (vacuum otherwise, also when the medium is unknown),
    at redshift ``z_lines`` (a rest-frame list; an observed-frame list stays put), on the axis of ``frame`` (the
    rest frame of the spectrum's own redshift ``z_spectrum``)."""
    w = float(vac_to_air(line.wavelength)) if medium == "air" else line.wavelength
    observed = to_frame(w, z_lines, "rest", "observed") if list_frame == "rest" else w
    return to_frame(observed, z_spectrum, "observed", frame)


def marker_z(line: Line, medium: Medium, position: float, z_spectrum: float, frame: Frame) -> float:
    """The redshift at which the rest-frame ``line`` is drawn at ``position`` on the axis of ``frame`` (the inverse
    of `marker_position`): a marker dragged there, or the line's measured centroid (`line_centroid`)."""
    w = float(vac_to_air(line.wavelength)) if medium == "air" else line.wavelength
    return float(to_frame(position, z_spectrum, frame, "observed")) / w - 1.0


def line_centroid(wavelength: np.ndarray, flux: np.ndarray, good: np.ndarray, lo: float, hi: float,
                  kind: str = "line", near: float | None = None) -> float | None:
    """The flux-weighted centroid (Å, on ``wavelength``'s axis) of the line in the window ``[lo, hi]``.

    The continuum is the straight line through the medians of the outer fifth of the window's good pixels on each
    side; the weights are the flux above it for an emission line, below it for an absorption line, and for another
    kind on the side that holds more, over the run of pixels beyond the continuum around the line's peak (the
    noise elsewhere in the window does not pull the centroid). Of several lines in the window the one nearest
    ``near`` (where its marker is) counts, else the strongest. None when the window has fewer than 7 good pixels
    or nothing stands out of the continuum by three times its scatter."""
    x, y = np.asarray(wavelength, dtype=float), np.asarray(flux, dtype=float)
    sel = np.asarray(good, dtype=bool) & np.isfinite(x) & np.isfinite(y) & (x >= lo) & (x <= hi)
    x, y = x[sel], y[sel]
    if x.size < 7:
        return None
    edge = max(2, x.size // 5)
    xl, yl, xr, yr = (float(np.median(v)) for v in (x[:edge], y[:edge], x[-edge:], y[-edge:]))
    cont = yl + (yr - yl) * (x - xl) / (xr - xl) if xr > xl else np.full(x.size, yl)
    d = y - cont
    up, down = float(np.clip(d, 0, None).sum()), float(np.clip(-d, 0, None).sum())
    sign = 1.0 if kind == "emission" else -1.0 if kind == "absorption" else (1.0 if up >= down else -1.0)
    excess = sign * d
    edges = np.concatenate([d[:edge], d[-edge:]])
    noise = 1.4826 * float(np.median(np.abs(edges - np.median(edges))))
    strong = excess > max(3 * noise, 1e-9 * max(abs(yl), abs(yr)))
    # the lines in the window: local maxima (over 7 pixels) that stand out of the noise
    padded = np.pad(excess, 3, mode="constant", constant_values=-np.inf)
    peaks = np.flatnonzero(strong & (excess >= np.lib.stride_tricks.sliding_window_view(padded, 7).max(axis=1)))
    if not peaks.size:  # nothing stands out of the noise
        return None
    peak = int(peaks[np.argmax(excess[peaks])] if near is None else peaks[np.argmin(np.abs(x[peaks] - near))])
    # its pixels: out from the peak while beyond the continuum, up to where a neighbouring line's rise begins
    half = 0.5 * excess[peak]
    left = peak
    while left > 0 and excess[left - 1] > 0 and not (excess[left] < half and excess[left - 1] > excess[left]):
        left -= 1
    right = peak
    while right < x.size - 1 and excess[right + 1] > 0 and not (excess[right] < half
                                                                and excess[right + 1] > excess[right]):
        right += 1
    weights = excess[left:right + 1]
    x = x[left:right + 1]
    total = float(weights.sum())
    if not total > 0:
        return None
    return float((x * weights).sum() / total)


def _lines_in_vacuum(rows: list[tuple[str, float, str]], medium: str) -> tuple[Line, ...]:
    waves = np.array([w for _n, w, _k in rows], dtype=float)
    if medium == "air" and waves.size:
        waves = np.atleast_1d(np.asarray(air_to_vac(waves), dtype=float))
    return tuple(Line(n, round(float(w), 4), k) for (n, _w, k), w in zip(rows, waves, strict=True))


@cache
def builtin_line_lists() -> dict[str, LineList]:
    """The lists of ``linelists.json`` by key, in the file's order (read once)."""
    data = json.loads(resources.files("speco3.spectra").joinpath("linelists.json").read_text(encoding="utf-8"))
    out: dict[str, LineList] = {}
    for d in data["lists"]:
        rows = [(str(n), float(w), str(k)) for n, w, k in d["lines"]]
        out[d["key"]] = LineList(d["key"], d["title"], _lines_in_vacuum(rows, d["medium"]), d["frame"], d["medium"],
                                 d["source"])
    return out


def read_line_list(path: str | Path) -> LineList:
    """A user's line list: CSV (``name,wavelength[,kind]``, rest-frame vacuum Å) or ECSV (the same columns; the
    meta may say ``medium: air`` and ``frame: observed``, the wavelength column may carry a unit). The file is
    untrusted: bounded in size and rows, names cut to 40 characters, every wavelength checked."""
    from astropy import units as u  # astropy.table and units on demand (as the candidate lists read them)
    from astropy.table import Table

    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise LineListError(f"{p.name}: cannot read it ({exc.strerror or exc})") from exc
    if size > MAX_FILE_BYTES:
        raise LineListError(f"{p.name}: {size / 1e6:.1f} MB is too large for a line list (at most "
                            f"{MAX_FILE_BYTES / 1e6:.0f} MB)")
    ecsv = p.suffix.lower() == ".ecsv"
    try:
        table = Table.read(p, format="ascii.ecsv" if ecsv else "ascii.csv")
    except (OSError, ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise LineListError(f"{p.name}: not a readable {'ECSV' if ecsv else 'CSV'} table ({exc})") from exc
    names = {c.lower(): c for c in table.colnames}
    name_col = next((names[c] for c in ("name", "line", "ion", "label") if c in names), None)
    wave_col = next((names[c] for c in ("wavelength", "wave", "lambda", "wl") if c in names), None)
    if name_col is None or wave_col is None:
        found = ", ".join("".join(ch if ch.isprintable() else "?" for ch in c[:20]) for c in table.colnames[:8])
        raise LineListError(f"{p.name}: needs a 'name' and a 'wavelength' column (found: {found or 'none'})")
    if len(table) > MAX_LINES:
        raise LineListError(f"{p.name}: {len(table)} lines; at most {MAX_LINES} can be marked")
    meta = {str(k).lower(): str(v).strip().lower() for k, v in table.meta.items() if isinstance(v, str | int | float)}
    medium = meta.get("medium", "vacuum")
    frame = meta.get("frame", "rest")
    if medium not in ("air", "vacuum") or frame not in ("rest", "observed"):
        raise LineListError(f"{p.name}: medium must be air or vacuum and frame rest or observed (found "
                            f"{medium!r}, {frame!r})")
    column = table[wave_col]
    unit = getattr(column, "unit", None)
    try:
        factor = float((1 * unit).to(u.AA).value) if unit is not None else 1.0
        waves = np.asarray(column, dtype=float) * factor
    except (u.UnitsError, TypeError, ValueError) as exc:
        raise LineListError(f"{p.name}: column {wave_col!r} is not a wavelength ({exc})") from exc
    kind_col = names.get("kind")
    rows = []
    for i, w in enumerate(waves):
        if not (math.isfinite(w) and 100 <= w <= 1e6):
            raise LineListError(f"{p.name}: row {i + 1}: wavelength {float(w):g} Å is not a wavelength to mark")
        name = " ".join(str(table[name_col][i]).split())[:MAX_NAME] or f"line {i + 1}"
        kind = str(table[kind_col][i]).strip().lower() if kind_col else "line"
        rows.append((name, float(w), kind if kind in LINE_KINDS else "line"))
    return LineList(f"file:{p}", p.name, _lines_in_vacuum(rows, medium), "observed" if frame == "observed" else "rest",
                    "air" if medium == "air" else "vacuum", f"{p.name} (the user's file; {medium}, {frame} frame)")

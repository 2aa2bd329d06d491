"""Helpers shared by the readers: header values, dispersion axes, units, error conversions."""

from __future__ import annotations

import logging
import math
import re
from typing import Any

import numpy as np

from speco3.errors import SpectrumReadError
from speco3.spectra.model import (
    SNR_BAND,
    SNR_MIN_PIXELS,
    VALUE_LIMIT,
    Deferred,
    Spectrum,
    SpectrumMeta,
    within_limits,
)
from speco3.spectra.source import FastHeader, Source

log = logging.getLogger(__name__)

#: Factor that turns a spectral-axis unit into Ångström (lower-case keys, spaces removed).
WAVE_UNITS = {
    "": 1.0, "a": 1.0, "aa": 1.0, "ang": 1.0, "angs": 1.0, "angstrom": 1.0, "angstroms": 1.0, "0.1nm": 1.0,
    "nm": 10.0, "nanometer": 10.0, "nanometers": 10.0, "um": 1e4, "µm": 1e4, "micron": 1e4, "microns": 1e4,
    "micrometer": 1e4, "micrometers": 1e4, "mum": 1e4, "m": 1e10, "meter": 1e10, "cm": 1e8, "mm": 1e7,
}
#: CTYPE values of axes that are not wavelengths (FITS WCS paper III spectral types).
NON_WAVELENGTH = ("FREQ", "ENER", "WAVN", "VRAD", "VOPT", "ZOPT", "VELO", "BETA", "FELO", "VELO-LSR", "VLSR")
LOG_CTYPES = ("WAVE-LOG", "LOG-LINEAR", "LOGLIN", "AWAV-LOG", "LOG")


def fail(src: Source, reason: str) -> SpectrumReadError:
    """An error naming the source (``raise fail(src, "...")``)."""
    return SpectrumReadError(src.display, reason)


def hstr(header: FastHeader, key: str) -> str | None:
    """Stripped string value of a card, or None when missing/blank."""
    try:
        v = header.get(key)
    except Exception:  # malformed card
        return None
    if v is None:
        return None
    s = str(v).strip()
    return s or None


def hfloat(header: FastHeader, key: str) -> float | None:
    """Finite float value of a card (numbers or numeric strings), else None."""
    try:
        v = header.get(key)
    except Exception:
        return None
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(str(v).strip()) if isinstance(v, str) else float(v)
    except ValueError:
        return None
    return f if math.isfinite(f) else None


def hint(header: FastHeader, key: str) -> int | None:
    """Integer value of a card (NAXIS, BITPIX …; T/F is not one), else None."""
    try:
        v = header.get(key)
    except Exception:
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def hbool(header: FastHeader, key: str) -> bool | None:
    try:
        v = header.get(key)
    except Exception:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().upper() in ("T", "TRUE", "F", "FALSE"):
        return v.strip().upper().startswith("T")
    return None


def medium_from(header: FastHeader, default: str = "unknown") -> str:
    """``VACUUM = T/F`` → vacuum/air; otherwise ``default``."""
    v = hbool(header, "VACUUM")
    if v is None:
        return default
    return "vacuum" if v else "air"


def wave_unit_factor(unit: str | None) -> float | None:
    """Multiplier to Å for a unit string, or None when it is not a length unit."""
    if unit is None:
        return 1.0
    u = unit.strip().lower().replace(" ", "").replace("angstrom", "angstrom")
    u = u.replace("å", "a").replace("\u212b", "a")
    return WAVE_UNITS.get(u)


def sexagesimal_or_float(value: object, hours: bool) -> float | None:
    """RA/Dec from a header value: degrees, or 'hh:mm:ss' / 'dd:mm:ss' strings."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    s = str(value).strip()
    m = re.fullmatch(r"([+-]?)(\d+)[: ](\d+)[: ](\d+(?:\.\d*)?)", s)
    if not m:
        try:
            return float(s)
        except ValueError:
            return None
    sign = -1.0 if m.group(1) == "-" else 1.0
    deg = float(m.group(2)) + float(m.group(3)) / 60 + float(m.group(4)) / 3600
    return sign * deg * (15.0 if hours else 1.0)


def pow10_grid(start: float, step: float, n: int) -> np.ndarray:
    """10^(start + step·i), i = 0..n-1, as the outer product of two short power series.

    10^(start + step·(jB + k)) = 10^(start + step·B·j) · 10^(step·k) with B ≈ √n: 2√n calls of ``pow`` and one
    multiplication per pixel instead of n calls of ``pow`` (20x faster at 16,000 pixels). The result agrees with
    ``np.power(10, start + step * arange(n))`` to a few 1e-16 relative, the rounding of the exponent itself.
    """
    if n <= 64:
        return np.power(10.0, start + step * np.arange(n, dtype=np.float64))
    b = math.isqrt(n)
    coarse = np.power(10.0, start + (step * b) * np.arange(-(-n // b), dtype=np.float64))
    fine = np.power(10.0, step * np.arange(b, dtype=np.float64))
    return np.multiply.outer(coarse, fine).ravel()[:n]


def log_linear(n: int, c0: float, c1: float) -> np.ndarray:
    """λ = 10^(c0 + c1·i), i = 0..n-1 (SDSS/LAMOST COEFF0/COEFF1)."""
    return pow10_grid(c0, c1, n)


def wcs_axis(src: Source, header: FastHeader, n: int, axis: int = 1) -> tuple[np.ndarray, str]:
    """Wavelength in Å of a FITS image axis from its linear or log-linear WCS.

    Handles CDELTi or CDi_i, CRPIXi, DC-FLAG=1 / WFITTYPE / CTYPE log markers, CUNITi (nm, µm → Å),
    ``WAT1_001 units=``, and refuses non-wavelength axes (velocity, frequency) with a clear reason.

    Returns
    -------
    wavelength : ndarray
    medium : str
        "air" for CTYPE 'AWAV', else from the VACUUM card, else "unknown".
    """
    ctype = (hstr(header, f"CTYPE{axis}") or "").upper()
    cunit = hstr(header, f"CUNIT{axis}")
    base = ctype.split("-")[0] if ctype else ""
    if any(ctype == t or ctype.startswith(t + "-") or base == t for t in NON_WAVELENGTH):
        raise fail(src, f"non-wavelength spectral axis {ctype}" + (f" ({cunit})" if cunit else ""))
    if ctype.startswith("MULTISPE"):
        raise fail(src, "IRAF multispec axis: not a simple linear WCS")
    crval = hfloat(header, f"CRVAL{axis}")
    step = hfloat(header, f"CD{axis}_{axis}")
    if step is None:
        step = hfloat(header, f"CDELT{axis}")
    crpix = hfloat(header, f"CRPIX{axis}") or 1.0
    if crval is None or step is None:
        c0, c1 = hfloat(header, "COEFF0"), hfloat(header, "COEFF1")
        if c0 is not None and c1 is not None:
            return log_linear(n, c0, c1), medium_from(header)
        raise fail(src, f"no wavelength axis: CRVAL{axis}/CDELT{axis} (or CD{axis}_{axis}) missing")
    if step == 0:
        raise fail(src, f"degenerate wavelength axis: CDELT{axis} = 0")
    if cunit is None:
        wat = hstr(header, "WAT1_001") or ""
        m = re.search(r"units=(\S+)", wat)
        cunit = m.group(1) if m else None
    factor = wave_unit_factor(cunit)
    if factor is None:
        raise fail(src, f"spectral axis unit {cunit!r} is not a wavelength unit")
    dcflag = hfloat(header, "DC-FLAG")
    wfit = (hstr(header, "WFITTYPE") or "").upper()
    is_log = dcflag == 1 or ctype in LOG_CTYPES or ctype.endswith("-LOG") or wfit == "LOG-LINEAR"
    if is_log and crval > 10:
        raise fail(src, f"log-linear axis flagged but CRVAL{axis}={crval} is not a log10 wavelength")
    if is_log:  # 10^(crval + (i + 1 - crpix)·step)
        wave = pow10_grid(crval + (1.0 - crpix) * step, step, n)
    else:
        wave = np.arange(n, dtype=np.float64)  # crval + (i + 1 - crpix)·step, in place (one array, same rounding)
        wave += 1.0
        wave -= crpix
        wave *= step
        wave += crval
    if factor != 1.0:
        wave *= factor
    medium = "air" if ctype.startswith("AWAV") else medium_from(header)
    return wave, medium


def ivar_from_sigma(sigma: np.ndarray, bad_above: float = 1e9, *, overwrite: bool = False) -> np.ndarray:
    """1/σ² where 0 < σ < bad_above, else 0.

    With ``overwrite=True`` a float64 ``sigma`` is turned into the result in place (no new array): for callers
    that own a freshly read σ array.
    """
    s = np.asarray(sigma, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (s > 0) & (s < bad_above)  # False for NaN; ±inf fail one of the bounds
    if overwrite and s is sigma and s.flags.writeable:
        out = s
        np.copyto(out, 0.0, where=~ok)
    else:
        out = np.zeros_like(s)
    np.multiply(s, s, out=out, where=ok)
    np.divide(1.0, out, out=out, where=ok)
    return out


def ivar_from_variance(var: np.ndarray) -> np.ndarray:
    v = np.asarray(var, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (v > 0) & (v < np.inf)
    out = np.zeros_like(v)
    np.divide(1.0, v, out=out, where=ok)
    return out


def median_snr(wave: np.ndarray, flux: np.ndarray, ivar: np.ndarray | None, mask: np.ndarray) -> float | None:
    """The S/N of `SNR_DEFINITION` (None without ivar or good pixels)."""
    if ivar is None:
        return None
    good = ivar > 0
    good &= ~mask
    good &= np.isfinite(flux)
    band = good & (wave >= SNR_BAND[0]) & (wave <= SNR_BAND[1])
    if np.count_nonzero(band) >= SNR_MIN_PIXELS:
        good = band
    values = flux[good]  # two selections, then in place: each new array of a long spectrum costs page faults
    if not values.size:
        return None
    root = ivar[good]
    values *= np.sqrt(root, out=root)
    return float(np.median(values, overwrite_input=True))


def ascending(wave: np.ndarray, *arrays: np.ndarray | None) -> tuple[Any, ...]:
    """Reorder so that the wavelength ascends (reverse for descending axes, sort otherwise)."""
    if wave.size < 2 or bool(np.all(wave[1:] > wave[:-1])):  # compares in place of np.diff: no float temporary
        return (wave, *arrays)
    order = np.arange(wave.size)[::-1] if bool(np.all(wave[1:] < wave[:-1])) else np.argsort(wave, kind="stable")
    return (wave[order], *[None if a is None else a[order] for a in arrays])


def make_spectrum(
    wave: np.ndarray,
    flux: np.ndarray,
    ivar: np.ndarray | None,
    mask: np.ndarray | None,
    *,
    flux_unit: str = "",
    medium: str = "unknown",
    meta: SpectrumMeta | None = None,
    src: Source | None = None,
    model: np.ndarray | None = None,
) -> Spectrum:
    """Build a Spectrum after checking shapes; non-finite flux or ivar ≤ 0 count as bad pixels."""
    wave = np.asarray(wave, dtype=np.float64).ravel()
    flux = np.asarray(flux, dtype=np.float64).ravel()
    n = wave.size
    for label, arr in (("flux", flux), ("ivar", ivar), ("mask", mask), ("model", model)):
        if arr is not None and np.asarray(arr).size != n:
            where = src.display if src else "<spectrum>"
            raise SpectrumReadError(where, f"wrong shapes: {label} has {np.asarray(arr).size} values, wavelength {n}")
    if n == 0:
        raise SpectrumReadError(src.display if src else "<spectrum>", "spectrum has no pixels")
    ivar = None if ivar is None else np.asarray(ivar, dtype=np.float64).ravel()
    bad = np.zeros(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).ravel().copy()
    meta = meta or SpectrumMeta()
    wave, flux, overflow = _without_overflow(wave, flux, meta)
    bad |= ~np.isfinite(flux) | ~np.isfinite(wave)
    if ivar is not None:
        ok = ivar > IVAR_MIN
        bad |= ~ok
        ok &= ivar < np.inf
        if not ok.all():  # a clean ivar (the usual case) is kept as it is: no copy
            ivar = np.where(ok, ivar, 0.0)
    if overflow and not bool(np.isfinite(wave).any()):
        raise SpectrumReadError(src.display if src else "<spectrum>",
                                f"no usable wavelength: every value is non-finite or beyond ±{VALUE_LIMIT:g}")
    model = None if model is None else np.asarray(model, dtype=np.float64).ravel()
    wave, flux, ivar, bad, model = ascending(wave, flux, ivar, bad, model)
    spec = Spectrum(wave, flux, ivar, bad, flux_unit=flux_unit or "", medium=medium, meta=meta,  # type: ignore[arg-type]
                    model=model)
    survey_snr = meta.snr  # a reader's value is the survey's own figure: kept beside ours, under its name
    name = meta.extra.pop("snr_source", None)
    if survey_snr is not None:
        meta.extra["survey_snr"] = survey_snr
        meta.extra["survey_snr_name"] = name or "the file's S/N"
    # ours, on first access of meta.snr (viewers, the index)
    meta.snr = Deferred(lambda: median_snr(spec.wavelength, spec.flux, spec.ivar, spec.mask)) if ivar is not None \
        else None
    return spec


#: Smallest inverse variance kept: below it σ would exceed `VALUE_LIMIT` (the pixel's error counts as unknown).
IVAR_MIN = 1.0 / VALUE_LIMIT**2


def _without_overflow(wave: np.ndarray, flux: np.ndarray, meta: SpectrumMeta) -> tuple[np.ndarray, np.ndarray, int]:
    """``wave`` and ``flux`` with values beyond ±`VALUE_LIMIT` set to NaN (copies only when there are any), and
    how many pixels that hit; the count goes into ``meta.note``."""
    big_f = np.isfinite(flux) & ~within_limits(flux)
    big_w = np.isfinite(wave) & ~within_limits(wave)
    hits = int(np.count_nonzero(big_f | big_w))
    if not hits:
        return wave, flux, 0
    if big_f.any():
        flux = np.where(big_f, np.nan, flux)
    if big_w.any():
        wave = np.where(big_w, np.nan, wave)
    note = f"{hits} pixel{'s' if hits != 1 else ''} with values beyond ±{VALUE_LIMIT:g} masked (overflow)"
    meta.note = note if not meta.note else f"{meta.note}; {note}"
    return wave, flux, hits


def col(data: np.ndarray, *names: str) -> np.ndarray | None:
    """First column of a FITS record array whose name matches one of ``names`` (case-insensitive)."""
    lookup = {n.lower(): n for n in data.columns.names} if hasattr(data, "columns") else {}
    for name in names:
        real = lookup.get(name.lower())
        if real is not None:
            return data[real]
    return None


def clean_str(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        v = v.decode("ascii", "replace")
    s = str(v).strip()
    return s or None


def finite_or_none(v: object) -> float | None:  # anything float() takes, else None
    try:
        f = float(v)  # type: ignore[arg-type]  # any value: float() raises TypeError on the rest, caught here
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None

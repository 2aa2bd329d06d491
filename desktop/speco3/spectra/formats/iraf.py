"""IRAF multispec images (CTYPE1 'MULTISPE'): one spectrum per aperture.

The per-aperture dispersion comes from the ``WAT2_nnn`` cards, whose 68-character values are concatenated
without stripping (a number may straddle two cards): ``specN = "ap beam dtype w1 dw nw z aplow aphigh ..."``.
dtype 0 (linear) and 1 (log-linear) are read; dtype 2 (non-linear) is read for Chebyshev (ftype 1) and Legendre (ftype 2) functions; splines, pixel tables and sampled
dispersions (ftype 3-6) are refused with a clear reason. Data shape (naps, npix) or (nbands, naps, npix); band 1 is the spectrum, a band
whose BANDID starts with 'sigma' is the error.
"""

from __future__ import annotations

import re

import numpy as np

from speco3.spectra._common import fail, hstr, ivar_from_sigma, make_spectrum, medium_from, wave_unit_factor
from speco3.spectra.formats.generic import object_meta
from speco3.spectra.registry import FileContents
from speco3.spectra.source import Source

_SPEC = re.compile(r'spec(\d+)\s*=\s*"([^"]*)"')


def identify(src: Source) -> bool:
    return src.is_fits and (hstr(src.primary, "CTYPE1") or "").upper().startswith("MULTISPE")


def wat_string(header, axis: int = 2) -> str:
    """Concatenated WAT<axis>_nnn values (each padded back to 68 characters)."""
    keys = sorted((k for k in header if k.startswith(f"WAT{axis}_")), key=lambda k: int(k.split("_")[1]))
    return "".join(str(header[k]).ljust(68) for k in keys)


def read(src: Source) -> FileContents:
    src.silentfix()
    h = src.primary
    data = np.asarray(src.data(0), dtype=np.float64)
    if data.ndim == 1:
        data = data[None, None, :]
    elif data.ndim == 2:
        data = data[None, :, :]
    nbands, naps, npix = data.shape
    specs = {int(k): v.split() for k, v in _SPEC.findall(wat_string(h))}
    if not specs:
        raise fail(src, "IRAF multispec header without WAT2 'specN' dispersion entries")
    units = re.search(r"units=(\S+)", wat_string(h, 1))
    factor = wave_unit_factor(units.group(1) if units else None) or 1.0
    bands = [hstr(h, f"BANDID{k}") or "" for k in range(1, nbands + 1)]
    sigma_band = next((k for k, b in enumerate(bands) if k and b.lower().startswith("sigma")), None)
    out = FileContents()
    medium = medium_from(h)
    for a in range(naps):
        fields = specs.get(a + 1)
        if fields is None or len(fields) < 7:
            out.skipped.append((f"aperture {a + 1}", "no WAT2 dispersion entry"))
            continue
        dtype = int(float(fields[2]))
        w1, dw, nw, z = float(fields[3]), float(fields[4]), int(float(fields[5])), float(fields[6])
        nw = min(nw, npix)
        if dtype == 2:
            lam = _nonlinear(src, fields, nw) / (1.0 + z)
        elif dtype in (0, 1):
            lam = (w1 + dw * np.arange(nw)) / (1.0 + z)
            if dtype == 1:
                lam = np.power(10.0, lam)
        else:
            raise fail(src, f"IRAF multispec dispersion type {dtype} not understood (aperture {fields[0]})")
        meta = object_meta(h, hdu=0, row=a)
        meta.extra.update({"aperture": int(fields[0]), "beam": int(fields[1]), "bands": bands})
        meta.note = f"IRAF multispec aperture {fields[0]} of {naps}"  # an echelle order or a fibre (docs/user-guide/command-line.md)
        sigma = data[sigma_band, a, :nw] if sigma_band is not None else None
        out.spectra.append(make_spectrum(lam * factor, data[0, a, :nw], None if sigma is None else ivar_from_sigma(sigma),
                                         None, flux_unit=hstr(h, "BUNIT") or "", medium=medium, meta=meta, src=src))
    return out


def _nonlinear(src: Source, fields: list[str], nw: int) -> np.ndarray:
    """λ of a dtype-2 aperture: Σ weight·(zero point + function(pixel)) over the listed functions."""
    values = [float(v) for v in fields[9:]]
    pixels = np.arange(1, nw + 1, dtype=np.float64)
    lam = np.zeros(nw)
    k = 0
    while k + 3 <= len(values):
        weight, zero, ftype = values[k], values[k + 1], int(values[k + 2])
        if ftype not in (1, 2):
            kind = {3: "cubic spline", 4: "linear spline", 5: "pixel table", 6: "sampled"}.get(ftype, f"type {ftype}")
            raise fail(src, f"non-linear IRAF multispec dispersion (dtype 2, {kind} function) not supported "
                            f"(aperture {fields[0]})")
        order, pmin, pmax = int(values[k + 3]), values[k + 4], values[k + 5]
        coeffs = values[k + 6:k + 6 + order]
        if len(coeffs) != order or pmax == pmin:
            raise fail(src, f"truncated IRAF multispec function for aperture {fields[0]}")
        x = (2.0 * pixels - (pmax + pmin)) / (pmax - pmin)
        series = np.polynomial.chebyshev.chebval(x, coeffs) if ftype == 1 else np.polynomial.legendre.legval(x, coeffs)
        lam += weight * (zero + series)
        k += 6 + order
    if k == 0:
        raise fail(src, f"IRAF multispec dtype 2 without a dispersion function (aperture {fields[0]})")
    return lam


def register(reg) -> None:
    reg("iraf-multispec", identify, read, 60)

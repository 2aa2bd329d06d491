"""CSV / whitespace-separated text spectra: wavelength, flux and an optional error column.

Comment lines start with ``#``, ``%``, ``!`` or ``;``. A non-numeric first line is a header: its names pick the
columns (``wave``/``lambda``, ``flux``, ``err``/``sigma``/``ivar``) and may carry the wavelength unit (``nm``,
``um``, ``Angstrom``, in the name or in brackets). Without names, 2 or 3 numeric columns are taken in the order
wavelength, flux, [error].
"""

from __future__ import annotations

import io
import re

import numpy as np

from speco3.spectra._common import fail, ivar_from_sigma, make_spectrum, wave_unit_factor
from speco3.spectra.model import SpectrumMeta
from speco3.spectra.registry import FileContents
from speco3.spectra.source import Source

COMMENTS = ("#", "%", "!", ";")
_NUM = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eEdD][+-]?\d+)?$|^[+-]?(nan|inf)$", re.IGNORECASE)


def _split(line: str) -> list[str]:
    for sep in (",", ";", "\t"):
        if sep in line:
            return [t.strip() for t in line.split(sep)]
    return line.split()


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(COMMENTS)]


def identify(src: Source) -> bool:
    if src.text is None:
        return False
    lines = _lines(src.text)[:6]
    numeric = [ln for ln in lines if all(_NUM.match(t) for t in _split(ln))]
    return len(numeric) >= 2 and all(len(_split(ln)) >= 2 for ln in numeric)


def _unit_of(name: str) -> str | None:
    m = re.search(r"[\[(]([^\])]+)[\])]", name)
    if m:
        return m.group(1).strip()
    for u in ("nm", "um", "micron", "angstrom", "aa"):
        if re.search(rf"(^|[_\s]){u}($|[_\s])", name.lower()):
            return u
    return None


def read(src: Source) -> FileContents:
    lines = _lines(src.text or "")
    if not lines:
        raise fail(src, "text file without data lines")
    header = None
    if not all(_NUM.match(t) for t in _split(lines[0])):
        header = [t.lower() for t in _split(lines[0])]
        lines = lines[1:]
    rows = [_split(ln) for ln in lines]
    width = len(rows[0]) if rows else 0
    if any(len(r) != width for r in rows):
        bad = next(i for i, r in enumerate(rows) if len(r) != width)
        raise fail(src, f"ragged text table: line {bad + 1} has {len(rows[bad])} columns, expected {width}")
    try:
        table = np.loadtxt(io.StringIO("\n".join(",".join(r) for r in rows).replace("D", "E").replace("d", "e")),
                           delimiter=",", ndmin=2)
    except ValueError as exc:
        raise fail(src, f"non-numeric values in text table: {exc}") from exc
    iw, iflux, ierr, err_kind = 0, 1, (2 if width >= 3 else None), "sigma"
    unit = None
    if header is not None and len(header) == width:
        def find(*keys):
            return next((i for i, n in enumerate(header) if any(n.startswith(k) for k in keys)), None)

        iw = find("wave", "lambda", "wl", "lam") if find("wave", "lambda", "wl", "lam") is not None else 0
        iflux = find("flux", "f_lambda", "flam", "spec") if find("flux", "f_lambda", "flam", "spec") is not None else 1
        ivar_i = find("ivar", "inv")
        ierr = find("err", "sigma", "unc", "noise", "e_flux")
        if ivar_i is not None:
            ierr, err_kind = ivar_i, "ivar"
        unit = _unit_of(header[iw])
    elif width > 3:
        raise fail(src, f"{width} numeric columns and no header; expected 2-3 (wavelength, flux, [error])")
    if width < 2:
        raise fail(src, "text table needs at least 2 columns (wavelength, flux)")
    factor = wave_unit_factor(unit)
    if factor is None:
        raise fail(src, f"wavelength column unit {unit!r} is not a wavelength unit")
    wave = table[:, iw] * factor
    ivar = None
    if ierr is not None:
        ivar = table[:, ierr] if err_kind == "ivar" else ivar_from_sigma(table[:, ierr])
    meta = SpectrumMeta(survey="generic", extra={"columns": header} if header else {})
    return FileContents(spectra=[make_spectrum(wave, table[:, iflux], ivar, None, meta=meta, src=src)])


def register(reg) -> None:
    reg("ascii", identify, read, 5)

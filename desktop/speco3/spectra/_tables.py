"""Fast access to FITS binary-table columns.

astropy builds a full ``ColDefs``/``FITS_rec`` for a table before any column can be read; for catalogue rows with
100-250 columns (SDSS SPECOBJ/SPALL, DESI FIBERMAP/SCORES) that costs more than the spectrum itself. Here the
column layout is taken from the raw 80-character cards (TTYPEn/TFORMn/TSCALn/TZEROn) and only the wanted columns
are cut out of the raw row bytes with numpy. Anything unusual (variable-length arrays, bit columns, complex
scaling) falls back to astropy, so results are always those astropy would give.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

import numpy as np

from speco3.spectra.source import Source, _parse_value

if TYPE_CHECKING:
    from astropy.io.fits.hdu.base import _BaseHDU  # astropy ships no type information

log = logging.getLogger(__name__)

_TFORM = re.compile(r"^\s*(\d*)\s*([LXBIJKAEDCM])")
_SIZES = {"L": 1, "B": 1, "I": 2, "J": 4, "K": 8, "A": 1, "E": 4, "D": 8, "C": 8, "M": 16}
_DTYPES = {"L": "i1", "B": "u1", "I": ">i2", "J": ">i4", "K": ">i8", "E": ">f4", "D": ">f8", "C": ">c8", "M": ">c16"}


def _card_value(image: str) -> str:
    value = _parse_value(image[10:80])
    return "" if value is None else str(value)


class TableLayout:
    """Byte layout of a binary table from its header cards."""

    def __init__(self, hdu: _BaseHDU):
        cards = hdu.header._cards  # raw card images; no value parsing
        kw: dict[str, str] = {}
        for card in cards:
            image = card._image or card.image  # raw text: .image would verify (and warn) first
            key = image[:8].rstrip()
            if key.startswith(("TTYPE", "TFORM", "TSCAL", "TZERO", "TDIM", "NAXIS", "TFIELDS", "PCOUNT", "THEAP")):
                kw[key] = _card_value(image)
        self.ok = True
        self.nfields = int(kw.get("TFIELDS", "0") or 0)
        self.row_bytes = int(kw.get("NAXIS1", "0") or 0)
        self.nrows = int(kw.get("NAXIS2", "0") or 0)
        self.columns: dict[str, tuple[int, str, int, str]] = {}  # upper name -> (offset, code, repeat, real name)
        self.names: list[str] = []
        self.scaled: set[str] = set()
        offset = 0
        for i in range(1, self.nfields + 1):
            name = kw.get(f"TTYPE{i}", f"col{i}")
            m = _TFORM.match(kw.get(f"TFORM{i}", ""))
            if not m:  # P/Q descriptors (variable length) or garbage
                self.ok = False
                return
            repeat, code = int(m.group(1) or 1), m.group(2)
            size = (repeat + 7) // 8 if code == "X" else _SIZES[code] * repeat
            self.names.append(name)
            self.columns[name.upper()] = (offset, code, repeat, name)
            if f"TSCAL{i}" in kw or f"TZERO{i}" in kw or f"TDIM{i}" in kw:
                self.scaled.add(name.upper())
            offset += size
        if offset != self.row_bytes:
            self.ok = False


def layout(src: Source, key: int | str) -> TableLayout | None:
    """Cached layout of a table HDU of ``src`` (None when the HDU is missing or not a binary table)."""
    cache = src.__dict__.setdefault("_layouts", {})
    if key in cache:
        return cache[key]
    hdu = src.hdu(key)
    result = None
    if hdu is not None and str(hdu.header.get("XTENSION", "")).strip() == "BINTABLE":
        try:
            result = TableLayout(hdu)
        except (ValueError, KeyError) as exc:
            log.debug("table layout of %r: %s", key, exc)
    cache[key] = result
    return result


def column_names(src: Source, key: int | str) -> list[str]:
    """Column names of a table HDU ([] when not a table)."""
    lay = layout(src, key)
    if lay is not None:
        return lay.names
    hdu = src.hdu(key)
    return list(hdu.columns.names) if hdu is not None and hasattr(hdu, "columns") else []


def read_columns(src: Source, key: int | str, names: list[str] | tuple[str, ...], rows: slice | None = None
                 ) -> dict[str, np.ndarray]:
    """The wanted columns (case-insensitive; missing ones are left out) as numpy arrays.

    Scalar columns come back with shape (nrows,), vector columns (nrows, repeat), strings as ``str`` arrays.
    """
    lay = layout(src, key)
    wanted = [n for n in names if lay is not None and n.upper() in lay.columns]
    hdu = src.hdu(key)
    fast = (lay is not None and lay.ok and not any(n.upper() in lay.scaled for n in wanted)
            and hasattr(hdu, "_data_offset") and getattr(hdu, "_file", None) is not None
            and not getattr(hdu, "_data_loaded", False) and not any(lay.columns[n.upper()][1] == "X" for n in wanted))
    if fast and lay is not None:
        try:
            return _raw_columns(hdu, lay, wanted)
        except (OSError, ValueError, AttributeError) as exc:
            log.debug("fast table read of %r failed, using astropy: %s", key, exc)
    data = src.data(key)
    if data is None:
        return {}
    lookup = {c.upper(): c for c in data.columns.names}
    return {n: np.asarray(data[lookup[n.upper()]]) for n in names if n.upper() in lookup}


def _raw_columns(hdu: _BaseHDU, lay: TableLayout, wanted: list[str]) -> dict[str, np.ndarray]:
    f = hdu._file
    f.seek(hdu._data_offset)
    nbytes = lay.row_bytes * lay.nrows
    raw = f.read(nbytes)
    if len(raw) != nbytes:
        raise ValueError(f"table data truncated: {len(raw)} of {nbytes} bytes")
    table = np.frombuffer(raw, dtype=np.uint8).reshape(lay.nrows, lay.row_bytes)
    out: dict[str, np.ndarray] = {}
    for n in wanted:
        offset, code, repeat, _ = lay.columns[n.upper()]
        if code == "A":
            block = np.ascontiguousarray(table[:, offset:offset + repeat]).view(f"S{repeat}").reshape(lay.nrows)
            out[n] = np.char.rstrip(np.char.decode(block, "ascii", "replace"))
            continue
        size = _SIZES[code]
        block = np.ascontiguousarray(table[:, offset:offset + size * repeat]).view(_DTYPES[code])
        arr = block.reshape(lay.nrows, repeat) if repeat > 1 else block.reshape(lay.nrows)
        out[n] = (arr == ord("T")) if code == "L" else arr
    return out

"""Generic readers: 1D images with a linear/log-linear WCS, and 1D binary tables.

Images: λ from CRVAL1/CDELT1 (or CD1_1)/CRPIX1, log-linear when DC-FLAG=1, WFITTYPE or CTYPE1 say so; CUNIT1 or
WAT1 units scale to Å; non-wavelength axes (VRAD, FREQ, ...) are refused. An error spectrum stored in a separate
file with the IRAF-era suffix convention (``X_F``/``X_E``, ``X_nF``/``X_nE``, ``X_f``/``X_e``) is used as σ when it
has the same grid. Tables: wavelength/flux/error-like columns (or VO ``TUTYPn`` spectral/flux axis utypes), vector
columns one spectrum per row, scalar columns one spectrum per table, TUNITn nm/µm/Å.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra._common import (
    fail,
    hfloat,
    hint,
    hstr,
    ivar_from_sigma,
    ivar_from_variance,
    make_spectrum,
    sexagesimal_or_float,
    wave_unit_factor,
    wcs_axis,
)
from speco3.spectra._tables import column_names
from speco3.spectra.model import ERROR_SPECTRUM_NOTE, SpectrumMeta
from speco3.spectra.registry import FileContents
from speco3.spectra.source import FastHeader, Source, check_header_counts

log = logging.getLogger(__name__)

WAVE_COLS = ("WAVE", "WAVELENGTH", "LAMBDA", "LAM", "WAVELEN", "WAV", "AWAV", "LOGLAM", "LOGLAMBDA", "LOGWAVE")
FLUX_COLS = ("FLUX", "SPEC", "SPECTRUM", "FLUX_DENSITY", "FLAM", "F_LAMBDA", "FLUXDENSITY", "FLUX_DENS")
SIGMA_COLS = ("ERROR", "ERR", "ERR_FLUX", "FLUX_ERR", "FLUX_ERROR", "SIGMA", "NOISE", "UNCERTAINTY", "STAT_ERR", "E_FLUX")
IVAR_COLS = ("IVAR", "INVVAR", "INV_VAR", "IVAR_FLUX")
VAR_COLS = ("VAR", "VARIANCE", "FLUX_VAR")
MASK_COLS = ("DQ", "ANDMASK", "AND_MASK", "PIXMASK", "MASK", "QUALITY")
_SUFFIX = re.compile(r"^(?P<stem>.+_n?)(?P<kind>[FfEe])(?P<ext>\.fits?(?:\.gz)?)$")


def object_meta(h, **kw) -> SpectrumMeta:
    """Survey-agnostic metadata from common primary-header cards."""
    ra_raw, dec_raw = h.get("RA", h.get("RA_TARG")), h.get("DEC", h.get("DEC_TARG"))
    meta = SpectrumMeta(
        survey="generic",
        object_id=hstr(h, "OBJECT") or hstr(h, "TARGNAME") or hstr(h, "OBJNAME"),
        ra=sexagesimal_or_float(ra_raw, hours=True),
        dec=sexagesimal_or_float(dec_raw, hours=False),
        redshift=hfloat(h, "REDSHIFT") if h.get("REDSHIFT") is not None else None,
        **kw,
    )
    if meta.redshift is not None:
        meta.redshift_source = "header REDSHIFT"
    for k in ("TELESCOP", "INSTRUME", "DATE-OBS", "EXPTIME"):
        if h.get(k) is not None:
            meta.extra[k.lower()] = h.get(k)
    return meta


# -- images ----------------------------------------------------------------------------------------------
def _image_hdu(src: Source):
    h0 = src.primary
    if (hint(h0, "NAXIS") or 0) >= 1 and (hint(h0, "NAXIS1") or 0) > 1:
        return 0, src.hdu(0)
    h1 = src.hdu(1)
    if h1 is not None and isinstance(h1, fits.ImageHDU) and (h1.header.get("NAXIS") or 0) == 1:
        return 1, h1
    return None, None


def identify_image(src: Source) -> bool:
    if not src.is_fits:
        return False
    idx, hdu = _image_hdu(src)
    if hdu is None:
        return False
    h = src.header(idx)
    nax = hint(h, "NAXIS")
    small_bands = nax == 1 or (nax in (2, 3) and all((hint(h, f"NAXIS{k}") or 0) <= 5 for k in range(2, nax + 1)))
    has_axis = any(k in h for k in ("CRVAL1", "CTYPE1", "COEFF0"))
    return bool(small_bands and has_axis)


def _companion(src: Source) -> tuple[str, Path] | None:
    """(kind, path) of the flux/error partner of this file by the suffix convention, if it exists."""
    if src.path is None:
        return None
    m = _SUFFIX.match(src.path.name)
    if not m:
        return None
    kind = m.group("kind")
    other = {"F": "E", "f": "e", "E": "F", "e": "f"}[kind]
    partner = src.path.with_name(m.group("stem") + other + m.group("ext"))
    if not partner.exists():
        return None
    return ("error" if kind in "Ee" else "flux"), partner


def read_image(src: Source) -> FileContents:
    try:
        return _read_image(src)
    except fits.VerifyError:  # malformed cards (e.g. an unparsable AIRMASS): repair, then read again
        src.silentfix()
        return _read_image(src)


def _read_image(src: Source) -> FileContents:
    idx, _ = _image_hdu(src)
    h = src.header(idx)
    data = np.asarray(src.data(idx), dtype=np.float64)
    n = data.shape[-1]
    wave, medium = wcs_axis(src, h, n)
    bands = [hstr(h, f"BANDID{k}") or "" for k in range(1, 6)]
    flat = data.reshape(-1, n)
    flux = flat[0]
    sigma = own_sigma = None  # own_sigma: a σ array read here from the error file (turned into ivar in place)
    for k, label in enumerate(bands[: flat.shape[0]]):
        if k and label.lower().startswith("sigma"):
            sigma = flat[k]
    meta = object_meta(src.primary, hdu=idx)
    comp = _companion(src)
    if comp is not None:
        role, partner = comp
        if role == "error":
            meta.note = f"{ERROR_SPECTRUM_NOTE} (its flux spectrum is {partner.name})"
            meta.extra["role"] = "error"
        elif sigma is None:
            sigma = own_sigma = _partner_sigma(src, h, n, partner)
            if sigma is not None:
                meta.extra["error_file"] = partner.name
    if flat.shape[0] > 1:
        meta.extra["bands"] = [b for b in bands[: flat.shape[0]]]
    ivar = ivar_from_sigma(sigma, overwrite=sigma is own_sigma) if sigma is not None else None
    spec = make_spectrum(wave, flux, ivar, None, flux_unit=hstr(h, "BUNIT") or "", medium=medium, meta=meta, src=src)
    return FileContents(spectra=[spec], depends_on=[str(comp[1])] if comp else [])


_BITPIX = {8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}
_HEADER_BLOCKS = 64


def _raw_primary(fh: BinaryIO) -> tuple[FastHeader, np.dtype, int] | None:
    """(header, dtype, pixel count) of a plain primary image read from the raw bytes, the file left at its data;
    None when the file is anything but a plain image (scaled or blank-flagged data, odd cards): astropy reads it."""
    head = b""
    for _ in range(_HEADER_BLOCKS):
        block = fh.read(2880)
        if len(block) < 2880:
            return None
        head += block
        if any(block[k:k + 8] == b"END     " for k in range(0, 2880, 80)):
            break
    else:
        return None
    ph = FastHeader.from_string(head.decode("ascii", errors="replace"))
    naxis, bitpix = ph.get("NAXIS"), ph.get("BITPIX")
    dtype = _BITPIX.get(bitpix) if type(bitpix) is int else None
    if ph.get("SIMPLE") is not True or dtype is None or type(naxis) is not int or not 1 <= naxis <= 999:
        return None
    cards = [ph.get(f"NAXIS{k}") for k in range(1, naxis + 1)]
    dims = [d for d in cards if type(d) is int and d >= 0]
    if len(dims) < len(cards) or any(k in ph for k in ("BSCALE", "BZERO", "BLANK")):
        return None
    return ph, np.dtype(dtype), int(np.prod(dims))


def _partner_sigma(src: Source, h, n: int, partner: Path) -> np.ndarray | None:
    """σ from the error file of the same grid (its primary image), or None when it does not match or is unreadable.

    A plain image is read straight from its bytes: the header decoded from the raw cards (`FastHeader`), then the
    first row of pixels. That is about a third of a second ``fits.open``, which parses every card into astropy
    objects and inspects call signatures on the way. Anything else (scaled or blank-flagged data) goes through
    ``PrimaryHDU.readfrom``, after the same check of the header counts as every file gets.
    """
    try:
        with warnings.catch_warnings(), open(partner, "rb") as fh:
            warnings.simplefilter("ignore")
            raw = _raw_primary(fh)
            if raw is not None:
                ph, dtype, size = raw
                data = None
                if ph.get("NAXIS1") == n and hfloat(ph, "CRVAL1") == hfloat(h, "CRVAL1") and size and size % n == 0:
                    buf = fh.read(n * dtype.itemsize)
                    data = np.frombuffer(buf, dtype=dtype) if len(buf) == n * dtype.itemsize else None
                if data is not None:
                    return data.astype(np.float64)  # native byte order, writable: turned into ivar in place
            fh.seek(0)
            check_header_counts(fh, str(partner), max_hdus=1)
            hdu = fits.PrimaryHDU.readfrom(fh)
            ph = FastHeader.from_hdu(hdu)
            if ph.get("NAXIS1") != n or hfloat(ph, "CRVAL1") != hfloat(h, "CRVAL1"):
                log.info("%s: %s has a different grid; not used as error", src.display, partner.name)
                return None
            data = hdu.data
            if data is None or data.size % n:
                log.info("%s: error file %s holds no %d-pixel image", src.display, partner.name, n)
                return None
            return np.array(data, dtype=np.float64).reshape(-1, n)[0]  # a copy: the file is closed on return
    except (OSError, ValueError, TypeError, KeyError, IndexError, SpectrumReadError) as exc:
        log.info("%s: error file %s unreadable: %s", src.display, partner.name, exc)
        return None


# -- tables ----------------------------------------------------------------------------------------------
def _pick(names: list[str], wanted: tuple[str, ...]) -> str | None:
    upper = {n.upper(): n for n in names}
    for w in wanted:
        if w in upper:
            return upper[w]
    return None


@dataclass(frozen=True)
class TableColumns:
    """The columns of a spectrum table: wavelength and flux, and those of the optional arrays (None: absent)."""

    wave: str
    flux: str
    sigma: str | None
    ivar: str | None
    var: str | None
    mask: str | None


def _table_columns(hdu) -> TableColumns | None:
    names = list(hdu.columns.names)
    h = hdu.header
    utypes = {h.get(f"TUTYP{i + 1}", "").lower(): n for i, n in enumerate(names) if h.get(f"TUTYP{i + 1}")}
    wave = utypes.get("spec:data.spectralaxis.value") or _pick(names, WAVE_COLS)
    flux = utypes.get("spec:data.fluxaxis.value") or _pick(names, FLUX_COLS)
    if wave is None or flux is None:
        return None
    return TableColumns(wave=wave, flux=flux,
                        sigma=utypes.get("spec:data.fluxaxis.accuracy.staterror") or _pick(names, SIGMA_COLS),
                        ivar=_pick(names, IVAR_COLS), var=_pick(names, VAR_COLS), mask=_pick(names, MASK_COLS))


def _maybe_spectrum_table(src: Source, i: int) -> bool:
    """Cheap pre-check on raw column names (avoids building astropy column definitions for catalogues)."""
    names = {n.upper() for n in column_names(src, i)}
    return bool(names & set(WAVE_COLS)) or any(n.startswith("TUTYP") for n in src.hdu(i).header)


def _tables(src: Source) -> list[int]:
    out = []
    for i in range(1, 64):
        hdu = src.hdu(i)
        if hdu is None:
            break
        if isinstance(hdu, fits.BinTableHDU | fits.TableHDU) and _maybe_spectrum_table(src, i) and _table_columns(hdu):
            out.append(i)
    return out


def identify_table(src: Source) -> bool:
    return src.is_fits and bool(_tables(src))


def _unit(hdu, column: str) -> str | None:
    for c in hdu.columns:
        if c.name == column:
            return c.unit
    return None


def read_table(src: Source) -> FileContents:
    out = FileContents()
    h0 = src.primary
    for i in _tables(src):
        hdu = src.hdu(i)
        cols = _table_columns(hdu)
        d = src.data(i)
        if cols is None or d is None or len(d) == 0:
            out.skipped.append((f"HDU {i}", "empty table"))
            continue
        wunit = _unit(hdu, cols.wave)
        factor = wave_unit_factor(wunit)
        if factor is None:
            raise fail(src, f"HDU {i} column {cols.wave} has unit {wunit!r}, not a wavelength unit")
        is_log = cols.wave.upper().startswith("LOG")
        vector = np.ndim(d[cols.wave][0]) > 0
        rows = range(len(d)) if vector else [None]
        sdq = hdu.header.get("SDQFLAGS")
        for r in rows:
            def get(name: str, r=r, d=d) -> np.ndarray:
                return np.asarray(d[name][r] if r is not None else d[name], dtype=np.float64)

            wave = get(cols.wave)
            wave = np.power(10.0, wave) if is_log else wave * factor
            flux = get(cols.flux)
            ivar = None
            if cols.ivar is not None:
                ivar = get(cols.ivar)
            elif cols.sigma is not None:
                ivar = ivar_from_sigma(get(cols.sigma))
            elif cols.var is not None:
                ivar = ivar_from_variance(get(cols.var))
            mask = None
            if cols.mask is not None:
                bits = get(cols.mask).astype(np.int64)
                mask = (bits & int(sdq)) != 0 if sdq is not None and cols.mask.upper() == "DQ" else bits != 0
            name = str(hdu.name) if hdu.name else i
            meta = object_meta(h0, hdu=name, row=r if r is not None else None)
            if "SPORDER" in d.columns.names and r is not None:
                meta.extra["sporder"] = int(d["SPORDER"][r])
                meta.note = f"echelle order {int(d['SPORDER'][r])}"
            if (unit := _unit(hdu, cols.flux)) is None:
                unit = hstr(h0, "BUNIT") or ""
            out.spectra.append(make_spectrum(wave, flux, ivar, mask, flux_unit=unit, meta=meta, src=src,
                                             medium="air" if cols.wave.upper() == "AWAV" else
                                             ("vacuum" if h0.get("VACUUM") is True else "unknown")))
    return out


def register(reg) -> None:
    reg("generic-table", identify_table, read_table, 20)
    reg("generic-image", identify_image, read_image, 10)

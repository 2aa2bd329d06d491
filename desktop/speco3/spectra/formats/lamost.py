"""LAMOST readers: LRS old layout (5×N primary image), LRS new layout (one-row COADD table), MRS.

MRS choice: the blue and red coadds are returned as two spectra, ``#0`` (COADD_B) and ``#1`` (COADD_R), not merged
(the arms are ~900 Å apart and have their own S/N); the single exposures ('B-<LMJM>', 'R-<LMJM>') follow as
``#2...`` in file order. Only the LRS grid is rebuilt from COEFF0/COEFF1 (CTYPE1 'LINEAR' there is a trap: the
CRVAL1 value is log10 λ); MRS uses its float32 LOGLAM column as stored, since its steps vary.
"""

from __future__ import annotations

import numpy as np

from speco3.spectra._common import fail, hfloat, hint, hstr, log_linear, make_spectrum, medium_from
from speco3.spectra._tables import column_names, read_columns
from speco3.spectra.model import Spectrum, SpectrumMeta
from speco3.spectra.registry import FileContents
from speco3.spectra.source import Source

LRS_EXTRA = ("DESIG", "OBJNAME", "OBJTYPE", "LMJD", "MJD", "PLANID", "SPID", "FIBERID", "Z_ERR", "ZFLAG",
             "SNRU", "SNRG", "SNRR", "SNRI", "SNRZ", "HELIO_RV", "FIBERMAS", "NORM")


def _is_lamost(h) -> bool:
    return (hstr(h, "TELESCOP") or "").upper().startswith("LAMOST") or (hstr(h, "DATA_V") or "").upper().startswith("LAMOST")


def _meta(h, *, hdu, snr_key: str | None = "SNRG") -> SpectrumMeta:
    z = hfloat(h, "Z")
    if z is not None and z <= -9000:
        z = None
    cls = hstr(h, "CLASS")
    obsid = h.get("OBSID")
    extra = {k: h.get(k) for k in LRS_EXTRA if h.get(k) is not None}
    if snr_key:
        extra["snr_source"] = snr_key
    return SpectrumMeta(
        survey="LAMOST",
        data_release=hstr(h, "DATA_V"),
        object_id=str(obsid).strip() if obsid is not None else hstr(h, "DESIG"),
        ra=hfloat(h, "RA"),
        dec=hfloat(h, "DEC"),
        redshift=z,
        redshift_source="LAMOST 1D pipeline" if z is not None else None,
        cls=cls,
        subclass=hstr(h, "SUBCLASS"),
        snr=hfloat(h, snr_key) if snr_key else None,
        hdu=hdu,
        extra=extra,
    )


def _lrs_mask(ivar: np.ndarray, andmask: np.ndarray) -> np.ndarray:
    return (ivar <= 0) | (andmask != 0)


# -- LRS old layout --------------------------------------------------------------------------------------
def identify_lrs_old(src: Source) -> bool:
    if not src.is_fits:
        return False
    h = src.primary
    return h.get("NAXIS") == 2 and h.get("NAXIS2") == 5 and _is_lamost(h) and (hint(h, "NAXIS1") or 0) > 100


def read_lrs_old(src: Source) -> list[Spectrum]:
    h = src.primary
    data = src.data(0)
    if data is None or data.ndim != 2 or data.shape[0] != 5:
        raise fail(src, f"LAMOST LRS old layout expects a 5×N image, found {None if data is None else data.shape}")
    n = data.shape[1]
    c0, c1 = hfloat(h, "COEFF0"), hfloat(h, "COEFF1")
    wave = log_linear(n, c0, c1) if c0 is not None and c1 is not None else data[2]
    ivar = data[1]
    meta = _meta(h, hdu=0)
    meta.extra["wavelength_source"] = "COEFF0/COEFF1" if c0 is not None else "row 2"
    return [make_spectrum(wave, data[0], ivar, _lrs_mask(ivar, data[3]), medium=medium_from(h), meta=meta, src=src)]


# -- LRS new layout --------------------------------------------------------------------------------------
def identify_lrs_new(src: Source) -> bool:
    if not src.is_fits or not _is_lamost(src.primary):
        return False
    h1 = src.hdu(1)
    if h1 is None or str(h1.name).upper() != "COADD":
        return False
    return {"FLUX", "IVAR", "WAVELENGTH"} <= {c.upper() for c in column_names(src, 1)}


def read_lrs_new(src: Source) -> list[Spectrum]:
    h = src.primary
    d = read_columns(src, 1, ("FLUX", "IVAR", "WAVELENGTH", "ANDMASK", "NORMALIZATION"))
    nrows = len(d["FLUX"])
    if nrows != 1:
        raise fail(src, f"LAMOST LRS COADD table should have 1 row, found {nrows}")
    row = {k: np.asarray(v[0]) for k, v in d.items()}
    wave, flux, ivar = row["WAVELENGTH"], row["FLUX"], row["IVAR"]
    andmask = row.get("ANDMASK", np.zeros(flux.size))
    meta = _meta(h, hdu="COADD")
    meta.row = 0
    if "NORMALIZATION" in row:
        norm = row["NORMALIZATION"]
        meta.extra["has_normalization"] = bool(np.any(norm > -9000))
    return [make_spectrum(wave, flux, ivar, _lrs_mask(np.asarray(ivar), np.asarray(andmask)),
                          medium=medium_from(h), meta=meta, src=src)]


# -- MRS -------------------------------------------------------------------------------------------------
def identify_mrs(src: Source) -> bool:
    if not src.is_fits or not _is_lamost(src.primary):
        return False
    h1 = src.hdu(1)
    return h1 is not None and str(h1.name).upper() == "COADD_B" and bool(column_names(src, 1))


def _mrs_table(src: Source, idx: int, base: SpectrumMeta, medium: str) -> Spectrum:
    hdu = src.hdu(idx)
    d = read_columns(src, idx, ("FLUX", "IVAR", "LOGLAM", "ANDMASK", "PIXMASK"))
    if not {"FLUX", "IVAR", "LOGLAM"} <= set(d):
        raise fail(src, f"MRS HDU {hdu.name!r} lacks FLUX/IVAR/LOGLAM columns (has {column_names(src, idx)})")
    loglam = np.asarray(d["LOGLAM"], dtype=np.float64)
    ivar = np.asarray(d["IVAR"], dtype=np.float64)
    if "ANDMASK" in d:
        bad = np.asarray(d["ANDMASK"]) != 0
    elif "PIXMASK" in d:
        bad = np.asarray(d["PIXMASK"]) != 0
    else:
        bad = np.zeros(loglam.size, dtype=bool)
    bad |= ~(loglam > 0)
    loglam = np.where(loglam > 0, loglam, np.nan)
    wave = np.power(10.0, loglam)
    keep = np.isfinite(wave)  # padding rows of exposures have LOGLAM 0
    name = str(hdu.name)
    meta = SpectrumMeta(**{k: v for k, v in base.__dict__.items() if k not in ("extra", "hdu", "snr")})
    meta.extra = dict(base.extra)
    meta.hdu = name
    meta.snr = hfloat(hdu.header, "SNR")
    meta.extra["snr_source"] = "SNR"
    arm = "B" if name.upper().endswith("_B") or name.upper().startswith("B-") else "R"
    meta.extra["arm"] = arm
    if name.upper().startswith("COADD"):
        meta.note = f"MRS {'blue' if arm == 'B' else 'red'} arm coadd"
        meta.extra["lmjmlist"] = hstr(hdu.header, "LMJMLIST")
    else:
        meta.note = f"MRS single exposure {name}"
        meta.extra["lmjm"] = hdu.header.get("LMJM")
        meta.extra["exptime"] = hfloat(hdu.header, "EXPTIME")
    return make_spectrum(wave[keep], d["FLUX"][keep], ivar[keep], bad[keep], medium=medium, meta=meta, src=src)


def read_mrs(src: Source) -> FileContents:
    h = src.primary
    base = _meta(h, hdu=None, snr_key=None)
    base.cls = None  # MRS files carry no classification
    medium = medium_from(h)
    names = src.names()
    out = FileContents()
    order = [i for i, n in enumerate(names) if n in ("COADD_B", "COADD_R")]
    order += [i for i, n in enumerate(names) if n[:2] in ("B-", "R-")]
    for i, n in enumerate(names):
        if i and i not in order:
            out.skipped.append((f"HDU {i} {n!r}", "not an MRS coadd or exposure table"))
    for i in order:
        out.spectra.append(_mrs_table(src, i, base, medium))
    return out


def register(reg) -> None:
    reg("lamost-mrs", identify_mrs, read_mrs, 95)
    reg("lamost-lrs", identify_lrs_new, read_lrs_new, 95)
    reg("lamost-lrs-old", identify_lrs_old, read_lrs_old, 95)

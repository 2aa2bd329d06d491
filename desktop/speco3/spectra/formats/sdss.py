"""SDSS readers: ``spec-`` lite/full (DR8+ data model), ``spSpec`` (DR1-DR7), and the four-image re-packaging.

Bad pixels: ivar ≤ 0 (the pipeline zeroes ivar where fatal mask bits are set) and the NODATA bit (2^24) of the
and-mask. Other and-mask bits (bright sky etc.) flag usable pixels and are kept.
"""

from __future__ import annotations

import numpy as np

from speco3.spectra._common import (
    clean_str,
    fail,
    finite_or_none,
    hfloat,
    hstr,
    ivar_from_sigma,
    log_linear,
    make_spectrum,
    medium_from,
)
from speco3.spectra._tables import column_names, read_columns
from speco3.spectra.model import Spectrum, SpectrumMeta
from speco3.spectra.source import Source

NODATA = 1 << 24
SPEC_CLN = {0: ("UNKNOWN", None), 1: ("STAR", None), 2: ("GALAXY", None), 3: ("QSO", None),
            4: ("QSO", "HIZ_QSO"), 5: ("SKY", None), 6: ("STAR", "STAR_LATE"), 7: ("GALAXY", "GAL_EM")}


def _is_sdss(h) -> bool:
    return (hstr(h, "TELESCOP") or "").upper().startswith("SDSS")


# -- spec-PLATE-MJD-FIBER ----------------------------------------------------------------------------------
def identify_spec(src: Source) -> bool:
    if not src.is_fits:
        return False
    h1 = src.hdu(1)
    return h1 is not None and str(h1.name).upper() == "COADD" and "loglam" in column_names(src, 1)


CATALOGUE_COLUMNS = ("CLASS", "SUBCLASS", "Z", "Z_ERR", "ZWARNING", "PLATE", "MJD", "FIBERID", "RUN2D", "RUN1D",
                     "PLUG_RA", "PLUG_DEC", "SN_MEDIAN_ALL", "SPECOBJID", "SOURCETYPE", "OBJTYPE", "SURVEY")


def _catalogue_row(src: Source):
    """(HDU name, {column: value}) of the SPECOBJ/SPALL row, found at HDU 2 or by either name."""
    for key in (2, "SPECOBJ", "SPALL"):
        if "CLASS" in {c.upper() for c in column_names(src, key)}:
            cols = read_columns(src, key, CATALOGUE_COLUMNS)
            if cols and len(next(iter(cols.values()))) >= 1:
                return str(src.hdu(key).name or key).upper(), {k: v[0] for k, v in cols.items()}
    return None, None


def read_spec(src: Source) -> list[Spectrum]:
    h = src.primary
    d = read_columns(src, 1, ("flux", "loglam", "ivar", "and_mask", "model"))
    if not {"flux", "loglam", "ivar"} <= set(d):
        raise fail(src, f"SDSS COADD table lacks flux/loglam/ivar (has {column_names(src, 1)})")
    loglam = np.asarray(d["loglam"], dtype=np.float64)
    ivar = np.asarray(d["ivar"], dtype=np.float64)
    flux = d["flux"]
    and_mask = d.get("and_mask", np.zeros(len(flux), dtype=np.int32))
    bad = (ivar <= 0) | ((np.asarray(and_mask) & NODATA) != 0)
    cat_name, row = _catalogue_row(src)
    meta = SpectrumMeta(survey="SDSS", hdu="COADD")
    plate, mjd, fiber = h.get("PLATEID"), h.get("MJD"), h.get("FIBERID")
    if row is not None:
        def get(name):
            return row.get(name)

        plate, mjd, fiber = get("PLATE") or plate, get("MJD") or mjd, get("FIBERID") or fiber
        meta.cls = clean_str(get("CLASS"))
        meta.subclass = clean_str(get("SUBCLASS"))
        meta.redshift = finite_or_none(get("Z"))
        meta.redshift_source = cat_name if meta.redshift is not None else None
        meta.ra, meta.dec = finite_or_none(get("PLUG_RA")), finite_or_none(get("PLUG_DEC"))
        meta.snr = finite_or_none(get("SN_MEDIAN_ALL"))
        meta.extra["snr_source"] = "SN_MEDIAN_ALL"
        run2d = clean_str(get("RUN2D")) or hstr(h, "RUN2D")
        meta.data_release = f"run2d {run2d}" if run2d else None
        for k in ("Z_ERR", "ZWARNING", "SPECOBJID", "SOURCETYPE", "OBJTYPE", "SURVEY", "RUN1D"):
            v = get(k)
            if v is not None:
                meta.extra[k.lower()] = clean_str(v) if isinstance(v, str | bytes) else v.item() if hasattr(v, "item") else v
        if meta.cls is None:
            meta.note = "catalogue row without CLASS"
    else:
        meta.note = "no SPECOBJ/SPALL catalogue row: class and redshift unknown"
    if plate is not None and mjd is not None and fiber is not None:
        meta.object_id = f"{int(plate):04d}-{int(mjd)}-{int(fiber):04d}"
    meta.extra["layout"] = "full" if src.hdu(4) is not None else "lite"
    return [make_spectrum(np.power(10.0, loglam), flux, ivar, bad, flux_unit=hstr(h, "BUNIT") or "",
                          medium=medium_from(h, "vacuum"), meta=meta, src=src, model=d.get("model"))]


# -- spSpec ----------------------------------------------------------------------------------------------
def identify_spspec(src: Source) -> bool:
    if not src.is_fits:
        return False
    h = src.primary
    return (h.get("NAXIS") == 2 and h.get("NAXIS2") == 5 and _is_sdss(h)
            and (h.get("SPEC_CLN") is not None or hstr(h, "ARRAY1") == "SPECTRUM"))


def read_spspec(src: Source) -> list[Spectrum]:
    h = src.primary
    data = src.data(0)
    if data is None or data.ndim != 2 or data.shape[0] < 4:
        raise fail(src, f"spSpec expects a 5×N image, found {None if data is None else data.shape}")
    n = data.shape[1]
    c0, c1 = hfloat(h, "COEFF0"), hfloat(h, "COEFF1")
    if c0 is None or c1 is None:
        c0, c1 = hfloat(h, "CRVAL1"), hfloat(h, "CD1_1")
    if c0 is None or c1 is None:
        raise fail(src, "spSpec header has neither COEFF0/COEFF1 nor CRVAL1/CD1_1")
    ivar = ivar_from_sigma(data[2])
    mask_bits = np.nan_to_num(data[3]).astype(np.int64)
    bad = (ivar <= 0) | ((mask_bits & NODATA) != 0)
    cln = h.get("SPEC_CLN")
    cls, sub = SPEC_CLN.get(int(cln), (None, None)) if isinstance(cln, int | float) else (None, None)
    plate, mjd, fiber = h.get("PLATEID"), h.get("MJD"), h.get("FIBERID")
    meta = SpectrumMeta(
        survey="SDSS",
        data_release="DR7 spSpec" if cln is not None else None,
        object_id=f"{int(plate):04d}-{int(mjd)}-{int(fiber):04d}"
        if plate is not None and mjd is not None and fiber is not None else None,
        ra=hfloat(h, "RAOBJ"),
        dec=hfloat(h, "DECOBJ"),
        redshift=hfloat(h, "Z"),
        redshift_source="spSpec header",
        cls=cls,
        subclass=sub,
        snr=hfloat(h, "SN_G"),
        hdu=0,
        extra={"snr_source": "SN_G", **{k.lower(): h.get(k) for k in ("SPEC_CLN", "OBJTYPE", "Z_ERR", "Z_CONF",
                                                                      "Z_STATUS", "Z_WARNIN") if h.get(k) is not None}},
    )
    return [make_spectrum(log_linear(n, c0, c1), data[0], ivar, bad, flux_unit=hstr(h, "BUNIT") or "",
                          medium=medium_from(h, "vacuum"), meta=meta, src=src)]


# -- re-packaged: four 1D images (flux, ivar, log10 λ, mask) -------------------------------------------------
def identify_repackaged(src: Source) -> bool:
    if not src.is_fits:
        return False
    h = src.primary
    if h.get("NAXIS") != 1 or not _is_sdss(h):
        return False
    n = h.get("NAXIS1")
    hdus = [src.hdu(i) for i in (1, 2, 3)]
    return all(x is not None and x.header.get("NAXIS") == 1 and x.header.get("NAXIS1") == n for x in hdus)


def read_repackaged(src: Source) -> list[Spectrum]:
    h = src.primary
    flux, ivar, loglam = src.data(0), src.data(1), np.asarray(src.data(2), dtype=np.float64)
    if not (np.nanmin(loglam) > 2.5 and np.nanmax(loglam) < 5.5):
        raise fail(src, "HDU2 does not hold log10 wavelengths (values outside 2.5-5.5)")
    mask = np.asarray(src.data(3))
    ivar = np.asarray(ivar, dtype=np.float64)
    values = np.unique(mask)
    # A 0/1 mask that is mostly 1 is a 'good pixel' mask (its zeros coincide with ivar = 0).
    good_mask = set(values.tolist()) <= {0, 1} and mask.mean() > 0.5
    bad = (mask == 0) if good_mask else (mask != 0)
    plate, mjd = h.get("PLATEID"), h.get("MJD")
    name = hstr(h, "NAME")
    meta = SpectrumMeta(
        survey="SDSS",
        data_release=f"run2d {hstr(h, 'RUN2D')}" if hstr(h, "RUN2D") else None,
        object_id=hstr(h, "OBJECT") or (f"{plate}-{mjd}" if plate and mjd else name),
        hdu=0,
        note="re-packaged SDSS spectrum (flux, ivar, log10 λ, mask images); class and redshift not stored",
        extra={"plate": plate, "mjd": mjd, "name": name, "mask_convention": "1=good" if good_mask else "nonzero=bad"},
    )
    return [make_spectrum(np.power(10.0, loglam), flux, ivar, bad, flux_unit=hstr(h, "BUNIT") or "",
                          medium=medium_from(h, "vacuum"), meta=meta, src=src)]


def register(reg) -> None:
    reg("sdss-spec", identify_spec, read_spec, 90)
    reg("sdss-spspec", identify_spspec, read_spspec, 90)
    reg("sdss-repackaged", identify_repackaged, read_repackaged, 85)

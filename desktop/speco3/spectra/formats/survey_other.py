"""Other instrument layouts: AAOmega/2dF (2dfdr), APOGEE apStar and apVisit, Spextool merged spectra."""

from __future__ import annotations

import numpy as np

from speco3.spectra._common import (
    clean_str,
    fail,
    hfloat,
    hstr,
    ivar_from_sigma,
    ivar_from_variance,
    make_spectrum,
    medium_from,
    wave_unit_factor,
    wcs_axis,
)
from speco3.spectra.formats.generic import object_meta
from speco3.spectra.registry import FileContents
from speco3.spectra.source import Source

#: APOGEE PIXMASK bits that make a pixel unusable: BADPIX, CRPIX, SATPIX, UNFIXABLE, BADDARK, BADFLAT, BADERR.
APOGEE_BAD = 0b1111111
FIBRE_TYPES = {"P": "program", "S": "sky", "N": "unused", "F": "guide", "U": "unused"}


# -- AAOmega / 2dF ------------------------------------------------------------------------------------------
def identify_2df(src: Source) -> bool:
    if not src.is_fits or (src.primary.get("NAXIS") or 0) not in (1, 2):
        return False
    return "VARIANCE" in src.names()


def read_2df(src: Source) -> FileContents:
    h = src.primary
    flux = np.atleast_2d(np.asarray(src.data(0), dtype=np.float64))
    var = np.atleast_2d(np.asarray(src.data("VARIANCE"), dtype=np.float64))
    if var.shape != flux.shape:
        raise fail(src, f"wrong shapes: VARIANCE {var.shape} vs flux {flux.shape}")
    nspec, npix = flux.shape
    names = src.names()
    if "WAVELENGTH" in names:
        w = np.atleast_2d(np.asarray(src.data("WAVELENGTH"), dtype=np.float64))
        if w.shape[-1] != npix:
            raise fail(src, f"wrong shapes: WAVELENGTH {w.shape} vs flux {flux.shape}")
        if np.nanmax(w) < 10:  # log10 λ (Marz convention)
            w = np.power(10.0, w)
        waves = np.broadcast_to(w, flux.shape)
        wave_src = "WAVELENGTH HDU"
    else:
        waves = np.broadcast_to(wcs_axis(src, h, npix)[0], flux.shape)
        wave_src = "WCS"
    fibres = src.data("FIBRES") if "FIBRES" in names else None
    medium = medium_from(h, "air")  # 2dfdr wavelengths are in air unless VACUUM says otherwise
    out = FileContents()
    for i in range(nspec):
        meta = object_meta(h, hdu=0, row=i)
        meta.survey = "AAOmega/2dF"
        meta.extra["wavelength_source"] = wave_src
        if fibres is not None and len(fibres) == nspec:
            f = fibres[i]
            ftype = clean_str(f["TYPE"]) if "TYPE" in fibres.columns.names else "P"
            if ftype and ftype != "P":
                out.skipped.append((f"fibre {i + 1}", f"fibre type {ftype} ({FIBRE_TYPES.get(ftype, 'non-program')})"))
                continue
            meta.object_id = clean_str(f["NAME"]) or meta.object_id
            meta.ra = float(np.degrees(f["RA"])) if "RA" in fibres.columns.names else None  # 2dfdr: radians
            meta.dec = float(np.degrees(f["DEC"])) if "DEC" in fibres.columns.names else None
            if "MAGNITUDE" in fibres.columns.names:
                meta.extra["magnitude"] = float(f["MAGNITUDE"])
        if not np.isfinite(flux[i]).any():
            out.skipped.append((f"fibre {i + 1}", "no data (all NaN)"))
            continue
        out.spectra.append(make_spectrum(waves[i], flux[i], ivar_from_variance(var[i]), None,
                                         flux_unit=hstr(h, "BUNIT") or "", medium=medium, meta=meta, src=src))
    return out


# -- APOGEE ------------------------------------------------------------------------------------------------
def _is_apogee(h) -> bool:
    return (hstr(h, "TELESCOP") or "").lower() in ("apo25m", "lco25m", "apo1m") and h.get("OBJID") is not None


def identify_apstar(src: Source) -> bool:
    if not src.is_fits:
        return False
    h = src.primary
    return _is_apogee(h) and (hstr(h, "CTYPE1") or "").upper() == "LOG-LINEAR" and src.hdu(3) is not None


def identify_apvisit(src: Source) -> bool:
    if not src.is_fits:
        return False
    h = src.primary
    h4 = src.hdu(4)
    return _is_apogee(h) and h.get("CRVAL1") is None and h4 is not None and h4.header.get("NAXIS") == 2


def _apogee_meta(h, **kw):
    meta = object_meta(h, **kw)
    meta.survey = "APOGEE"
    meta.object_id = hstr(h, "OBJID")
    meta.snr = hfloat(h, "SNR")
    meta.extra["snr_source"] = "SNR"
    meta.extra["vhelio"] = hfloat(h, "VHELIO")
    return meta


def read_apstar(src: Source) -> FileContents:
    h = src.primary
    flux = np.atleast_2d(np.asarray(src.data(1), dtype=np.float64))
    err = np.atleast_2d(np.asarray(src.data(2), dtype=np.float64))
    bits = np.atleast_2d(np.asarray(src.data(3))).astype(np.int64)
    if not flux.shape == err.shape == bits.shape:
        raise fail(src, f"wrong shapes: flux {flux.shape}, error {err.shape}, mask {bits.shape}")
    wave = wcs_axis(src, h, flux.shape[1])[0]
    nvisits = int(h.get("NVISITS") or 1)
    out = FileContents()
    for i in range(flux.shape[0]):
        meta = _apogee_meta(h, hdu=1, row=i)
        if flux.shape[0] == 1:
            meta.note = "combined spectrum (1 visit)"
        elif i < 2:
            meta.note = f"combined spectrum ({'pixel' if i == 0 else 'global'}-weighted, {nvisits} visits)"
        else:
            meta.note = f"visit {i - 1} of {nvisits}"
            meta.snr = None
        meta.extra["frame"] = "rest (apStar spectra are shifted to the star's rest frame)"
        out.spectra.append(make_spectrum(wave, flux[i], ivar_from_sigma(err[i]), (bits[i] & APOGEE_BAD) != 0,
                                         flux_unit=hstr(src.hdu(1).header, "BUNIT") or "", medium="vacuum",
                                         meta=meta, src=src))
    return out


def read_apvisit(src: Source) -> FileContents:
    h = src.primary
    flux, err = np.asarray(src.data(1), dtype=np.float64), np.asarray(src.data(2), dtype=np.float64)
    bits, wave = np.asarray(src.data(3)).astype(np.int64), np.asarray(src.data(4), dtype=np.float64)
    if not flux.shape == err.shape == bits.shape == wave.shape:
        raise fail(src, f"wrong shapes: flux {flux.shape}, error {err.shape}, mask {bits.shape}, wavelength {wave.shape}")
    if not (np.nanmin(wave) > 1000):
        raise fail(src, "apVisit HDU4 does not hold wavelengths in Å")
    meta = _apogee_meta(h, hdu=1)
    meta.note = f"visit spectrum, {flux.shape[0]} chips joined"
    meta.extra["mjd"] = h.get("MJD5")
    spec = make_spectrum(wave.ravel(), flux.ravel(), ivar_from_sigma(err.ravel()), (bits.ravel() & APOGEE_BAD) != 0,
                         flux_unit=hstr(src.hdu(1).header, "BUNIT") or "", medium="vacuum", meta=meta, src=src)
    return FileContents(spectra=[spec])


# -- Spextool ----------------------------------------------------------------------------------------------
def identify_spextool(src: Source) -> bool:
    if not src.is_fits:
        return False
    h = src.primary
    return h.get("NAXIS") == 2 and h.get("NAXIS2") in (3, 4) and h.get("XUNITS") is not None


def read_spextool(src: Source) -> FileContents:
    h = src.primary
    d = np.asarray(src.data(0), dtype=np.float64)
    xunit = hstr(h, "XUNITS")
    factor = wave_unit_factor(xunit)
    if factor is None:
        raise fail(src, f"Spextool XUNITS {xunit!r} is not a wavelength unit")
    meta = object_meta(h, hdu=0)
    meta.extra["xunits"] = xunit
    mask = d[3] != 0 if d.shape[0] == 4 else None
    spec = make_spectrum(d[0] * factor, d[1], ivar_from_sigma(d[2]), mask, flux_unit=hstr(h, "YUNITS") or "",
                         medium=medium_from(h), meta=meta, src=src)
    return FileContents(spectra=[spec])


def register(reg) -> None:
    reg("apogee-apstar", identify_apstar, read_apstar, 70)
    reg("apogee-apvisit", identify_apvisit, read_apvisit, 70)
    reg("aaomega-2df", identify_2df, read_2df, 65)
    reg("spextool", identify_spextool, read_spextool, 65)

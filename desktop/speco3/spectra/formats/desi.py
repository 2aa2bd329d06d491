"""DESI readers: ``coadd-*`` and ``spectra-*`` files, and ``redrock-*`` / ``zbest-*`` recognised as catalogues.

The B, R and Z arms are merged onto one grid: the union of the arms' pixel centres (all on one 0.8 Å lattice),
where pixels that coincide in the overlaps are combined by inverse-variance weighting of the good pixels
(ivar > 0, mask 0). Each pixel enters once: no double counting. The merged ivar is the sum of the good ivars.

One spectrum per FIBERMAP row with a non-negative TARGETID; unassigned fibres (negative TARGETID) are skipped and
listed in ``FileContents.skipped``. Class and redshift come from a redrock (or zbest) file found among the FITS
files of the same folder, matched on TARGETID.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import numpy as np
from astropy.io import fits

from speco3.spectra._common import clean_str, fail, finite_or_none, hstr, make_spectrum
from speco3.spectra._tables import column_names, read_columns
from speco3.spectra.model import SKY_FIBRE_NOTE, SpectrumMeta
from speco3.spectra.registry import CompanionFileError, FileContents
from speco3.spectra.source import Source

log = logging.getLogger(__name__)

ARMS = ("B", "R", "Z")
TARGET_COLUMNS = ("DESI_TARGET", "BGS_TARGET", "MWS_TARGET", "SCND_TARGET")
_REDROCK_CACHE: dict[tuple[str, int, int], dict[int, dict]] = {}


def identify(src: Source) -> bool:
    if not src.is_fits:
        return False
    h1 = src.hdu(1)
    if h1 is None or str(h1.name).upper() != "FIBERMAP":
        return False
    names = src.names()
    return any(f"{a}_FLUX" in names and f"{a}_WAVELENGTH" in names for a in ARMS)


def identify_redrock(src: Source) -> bool:
    if not src.is_fits:
        return False
    h1 = src.hdu(1)
    return h1 is not None and str(h1.name).upper() in ("REDSHIFTS", "ZBEST") and hasattr(h1, "columns")


def read_redrock(src: Source) -> FileContents:
    n = src.hdu(1).header.get("NAXIS2", 0)
    raise CompanionFileError(src.display, f"DESI redrock catalogue ({n} targets): redshifts only, no spectra; "
                                          "coadd files in this folder use it for class and z")


def _redrock_table(path: Path) -> dict[int, dict] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key in _REDROCK_CACHE:
        return _REDROCK_CACHE[key]
    table: dict[int, dict] | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fits.open(path, memmap=False) as hdul:
                for name in ("REDSHIFTS", "ZBEST"):
                    if name in hdul and {"TARGETID", "Z"} <= set(hdul[name].columns.names):
                        d = hdul[name].data
                        cols = d.columns.names
                        table = {}
                        for i, tid in enumerate(np.asarray(d["TARGETID"]).tolist()):
                            table[int(tid)] = {
                                "z": float(d["Z"][i]),
                                "zerr": float(d["ZERR"][i]) if "ZERR" in cols else None,
                                "zwarn": int(d["ZWARN"][i]) if "ZWARN" in cols else None,
                                "spectype": clean_str(d["SPECTYPE"][i]) if "SPECTYPE" in cols else None,
                                "subtype": clean_str(d["SUBTYPE"][i]) if "SUBTYPE" in cols else None,
                                "deltachi2": float(d["DELTACHI2"][i]) if "DELTACHI2" in cols else None,
                            }
                        break
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("sibling %s is not a readable redrock file: %s", path, exc)
    if len(_REDROCK_CACHE) > 256:
        _REDROCK_CACHE.clear()
    _REDROCK_CACHE[key] = table  # type: ignore[assignment]
    return table


def _redrock_siblings(src: Source) -> list[Path]:
    """Redrock/zbest FITS files in the folder of ``src``; the one with the same suffix first."""
    if src.path is None:
        return []
    folder = src.path.parent
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [folder / n for n in names if n.lower().startswith(("redrock", "zbest")) and ".fit" in n.lower()]
    suffix = src.path.name.split("-", 1)[-1]
    return sorted(found, key=lambda p: (p.name.split("-", 1)[-1] != suffix, p.name))


def _merge_arms(src: Source, arms: list[str], rows: np.ndarray):
    """Union grid and (flux, ivar, bad) of shape (len(rows), n_union)."""
    waves = [np.asarray(src.data(f"{a}_WAVELENGTH"), dtype=np.float64) for a in arms]
    union = np.unique(np.round(np.concatenate(waves), 3))
    nu = union.size
    num = np.zeros((rows.size, nu))
    den = np.zeros((rows.size, nu))
    raw = np.zeros((rows.size, nu))
    cnt = np.zeros(nu)
    for a, w in zip(arms, waves, strict=True):
        idx = np.searchsorted(union, np.round(w, 3))
        flux = np.asarray(src.data(f"{a}_FLUX"), dtype=np.float64)[rows]
        if flux.shape[-1] != w.size:
            raise fail(src, f"wrong shapes: {a}_FLUX has {flux.shape[-1]} pixels, {a}_WAVELENGTH {w.size}")
        ivar = np.asarray(src.data(f"{a}_IVAR"), dtype=np.float64)[rows]
        mask_hdu = src.hdu(f"{a}_MASK")
        mask = np.asarray(src.data(f"{a}_MASK"))[rows] if mask_hdu is not None else np.zeros(flux.shape, int)
        good = (ivar > 0) & (mask == 0) & np.isfinite(flux) & np.isfinite(ivar)
        wgt = np.where(good, ivar, 0.0)
        num[:, idx] += wgt * np.where(good, flux, 0.0)
        den[:, idx] += wgt
        raw[:, idx] += np.nan_to_num(flux)
        cnt[idx] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        merged = np.where(den > 0, num / np.where(den > 0, den, 1.0), raw / cnt)
    return union, merged, den, den <= 0


def read(src: Source) -> FileContents:
    h0 = src.primary
    names = src.names()
    fm_names = column_names(src, "FIBERMAP")
    wanted = [c for c in fm_names if c.endswith(TARGET_COLUMNS)
              or c in ("TARGETID", "TARGET_RA", "TARGET_DEC", "OBJTYPE", "FIBER", "EXPID", "NIGHT", "MJD")]
    fm = read_columns(src, "FIBERMAP", wanted)
    if "TARGETID" not in fm:
        raise fail(src, "DESI FIBERMAP has no TARGETID column")
    tids = np.asarray(fm["TARGETID"]).astype(np.int64)
    nspec = tids.size
    arms = [a for a in ARMS if f"{a}_FLUX" in names]
    out = FileContents()
    keep = []
    for i, t in enumerate(tids.tolist()):
        if t < 0:
            out.skipped.append((f"row {i}, TARGETID {t}", "unassigned fibre (negative TARGETID)"))
        else:
            keep.append(i)
    if not keep:
        return out
    rows = np.asarray(keep)
    for a in arms:
        shape = src.hdu(f"{a}_FLUX").header
        if shape.get("NAXIS2", 1) != nspec:
            raise fail(src, f"wrong shapes: {a}_FLUX has {shape.get('NAXIS2')} rows, FIBERMAP {nspec}")
    wave, flux, ivar, bad = _merge_arms(src, arms, rows)
    score_names = column_names(src, "SCORES") if "SCORES" in names else []
    snr_col = next((c for c in ("MEDIAN_COADD_SNR_R", "MEDIAN_CALIB_SNR_R") if c in score_names), None)
    scores = read_columns(src, "SCORES", ("TARGETID", snr_col)) if snr_col else {}
    deps = _redrock_siblings(src)
    tables = [(p, t) for p in deps if (t := _redrock_table(p))]
    is_coadd = "EXP_FIBERMAP" in names or "COADD_FIBERSTATUS" in fm_names
    header_extra = {k.lower(): h0.get(k) for k in ("TILEID", "NIGHT", "SURVEY", "PROGRAM", "HPXPIXEL", "SPGRP")
                    if h0.get(k) is not None}
    deps_env = {str(h0.get(k)).upper(): h0.get(k.replace("NAM", "VER")) for k in h0 if k.startswith("DEPNAM")}
    unit = hstr(src.hdu(f"{arms[0]}_FLUX").header, "BUNIT") or ""
    for j, i in enumerate(keep):
        tid = int(tids[i])
        meta = SpectrumMeta(survey="DESI", data_release=clean_str(deps_env.get("SPECPROD")), object_id=str(tid),
                            ra=finite_or_none(fm["TARGET_RA"][i]) if "TARGET_RA" in fm else None,
                            dec=finite_or_none(fm["TARGET_DEC"][i]) if "TARGET_DEC" in fm else None,
                            hdu="FIBERMAP", row=i)
        meta.extra.update(header_extra)
        meta.extra["kind"] = "coadd" if is_coadd else "spectra"
        for c in wanted:
            if c not in ("TARGETID", "TARGET_RA", "TARGET_DEC"):
                v = fm[c][i]
                meta.extra[c.lower()] = clean_str(v) if isinstance(v, str | bytes) else v.item()
        if scores and snr_col is not None and int(scores["TARGETID"][i]) == tid:
            meta.snr = finite_or_none(scores[snr_col][i])
            meta.extra["snr_source"] = snr_col
        for p, table in tables:
            z = table.get(tid)
            if z is not None:
                meta.redshift, meta.redshift_source = z["z"], "redrock"
                meta.cls, meta.subclass = z["spectype"], z["subtype"] or None
                meta.extra.update({"zerr": z["zerr"], "zwarn": z["zwarn"], "deltachi2": z["deltachi2"],
                                   "redrock_file": p.name})
                if str(p) not in out.depends_on:
                    out.depends_on.append(str(p))
                break
        if meta.extra.get("objtype") == "SKY":
            meta.note = SKY_FIBRE_NOTE
        out.spectra.append(make_spectrum(wave, flux[j], ivar[j], bad[j], flux_unit=unit, medium="vacuum",
                                         meta=meta, src=src))
    out.depends_on.extend(str(p) for p in deps if str(p) not in out.depends_on)
    return out


def register(reg) -> None:
    reg("desi", identify, read, 90)
    reg("desi-redrock", identify_redrock, read_redrock, 89)

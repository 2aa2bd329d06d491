"""Per-file work of the archive scan, run in worker processes: read a file, summarise its spectra as rows.

Kept free of SQLite so that it pickles cheaply; the parent process writes the rows.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from speco3.errors import SpectrumReadError
from speco3.spectra.model import pipeline_fit
from speco3.spectra.registry import CompanionFileError, NoSpectraError, read_file

log = logging.getLogger(__name__)

#: File name endings the scan looks at (case-insensitive).
EXTENSIONS = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz", ".fts.gz", ".fz", ".fits.fz", ".csv", ".txt")
META_COLUMNS = ("survey", "data_release", "object_id", "ra", "dec", "redshift", "redshift_source", "cls",
                "subclass", "snr", "hdu", "row", "note")


def wanted(name: str) -> bool:
    low = name.lower()
    return not low.startswith(".") and low.endswith(EXTENSIONS)


def _num(v: object) -> float | None:  # anything float() takes, else None
    if v is None:
        return None
    try:
        f = float(v)  # type: ignore[arg-type]  # any value: float() raises TypeError on the rest, caught here
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def scan_file(args: tuple[str, str]) -> dict[str, Any]:
    """Read one file. ``args`` = (root, rel).

    Returns format, rows (one per spectrum), skipped, depends, error (with its kind), and ``companion``: the reason
    when the file is a companion of others (see :class:`CompanionFileError`), which then has no rows and no error.
    """
    root, rel = args
    path = os.path.join(root, rel)
    out: dict[str, Any] = {"rel": rel, "format": None, "rows": [], "skipped": [], "depends": [], "error": None,
                           "error_kind": None, "companion": None}
    try:
        contents = read_file(path)
    except CompanionFileError as exc:  # read with the files it serves; neither a spectrum nor an error
        out.update(format=exc.format or None, companion=exc.reason)
        return out
    except NoSpectraError as exc:
        out.update(error=exc.reason, error_kind="no spectra")
        return out
    except SpectrumReadError as exc:
        out.update(error=exc.reason, error_kind="read error")
        return out
    except Exception as exc:  # a reader bug must not stop the scan of an archive
        log.exception("unexpected failure reading %s", path)
        out.update(error=f"unexpected {type(exc).__name__}: {exc}", error_kind="bug")
        return out
    out["format"] = contents.format
    out["skipped"] = [list(s) for s in contents.skipped]
    rootp = Path(root)
    for dep in contents.depends_on:
        p = Path(dep)
        try:
            out["depends"].append(p.resolve().relative_to(rootp).as_posix())
        except ValueError:
            out["depends"].append(str(p))
    for spec in contents.spectra:
        m = spec.meta
        good = spec.good
        wave = spec.wavelength[good] if good.any() else spec.wavelength
        row = {k: getattr(m, k) for k in META_COLUMNS}
        fit = pipeline_fit(m)
        row.update(
            idx=m.index,
            format=contents.format,
            ra=_num(m.ra), dec=_num(m.dec), redshift=_num(m.redshift), snr=_num(m.snr),
            survey_snr=_num(m.extra.get("survey_snr")),
            z_err=fit.z_err, zwarn=fit.zwarn, zwarn_name=fit.zwarn_name, deltachi2=fit.deltachi2,
            hdu=None if m.hdu is None else str(m.hdu),
            object_id=None if m.object_id is None else str(m.object_id),
            n_pixels=spec.n_pixels,
            wmin=float(np.nanmin(wave)), wmax=float(np.nanmax(wave)),
            masked_fraction=float(spec.masked_fraction),
            flux_unit=spec.flux_unit, medium=spec.medium,
        )
        out["rows"].append(row)
    return out

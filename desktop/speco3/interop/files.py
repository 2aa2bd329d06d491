"""Files handed to other VO applications: a spectrum as a VOTable or FITS table, a candidate table as a VOTable.

Spectrum columns carry the IVOA Spectrum Data Model utypes and UCD1+ words that SPLAT-VO, TOPCAT and
specutils look for (``spec:Spectrum.Data.SpectralAxis.Value`` / ``em.wl``, ``...FluxAxis.Value`` /
``phot.flux.density;em.wl``, ``...FluxAxis.Accuracy.StatError`` / ``stat.error;phot.flux.density;em.wl``,
``...FluxAxis.Quality`` / ``meta.code.qual``); the target's name, position and redshift are PARAMs (VOTable) or
header cards (FITS: ``TUCDn``/``TUTYPn`` for the columns). Errors are 1σ from ivar, NaN where unknown; quality is
1 where the pixel is masked. Candidate tables keep the vetting columns and mark RA/Dec with ``pos.eq.*;meta.main``
so that Aladin and TOPCAT find the positions.

`TempFolder` is the private folder these files live in while a peer may still read them; it is removed on
``cleanup()`` (the app calls it when SAMP is switched off or the window closes). `Outbox` is the folder of a
process that exits right after sending (``spec-o3 samp send``): a peer may reply first and load the file later
(SAMP does not order the two), so its files stay and are removed only once older than ``max_age_s`` — the way
astropy's and TOPCAT's own examples leave sent files for the receiver rather than delete them on exit.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from astropy.units import UnitsWarning

from speco3.spectra.model import Spectrum
from speco3.votable import votable_of, write_votable

if TYPE_CHECKING:  # astropy's table and units load when a file is written
    from astropy.table import Table
    from astropy.units import UnitBase

log = logging.getLogger(__name__)

#: (column, utype, ucd) of a spectrum table; units are filled per spectrum.
SPECTRUM_COLUMNS = (
    ("WAVELENGTH", "spec:Spectrum.Data.SpectralAxis.Value", "em.wl"),
    ("FLUX", "spec:Spectrum.Data.FluxAxis.Value", "phot.flux.density;em.wl"),
    ("ERROR", "spec:Spectrum.Data.FluxAxis.Accuracy.StatError", "stat.error;phot.flux.density;em.wl"),
    ("QUALITY", "spec:Spectrum.Data.FluxAxis.Quality", "meta.code.qual"),
)
MIME = {"votable": "application/x-votable+xml", "fits": "application/fits"}
#: UCDs given to candidate-table columns (TOPCAT and Aladin locate positions by them).
TABLE_UCDS = {"ra": "pos.eq.ra;meta.main", "dec": "pos.eq.dec;meta.main", "redshift": "src.redshift",
              "snr": "stat.snr", "object_id": "meta.id", "spectrum_key": "meta.id;meta.main", "key": "meta.id;meta.main",
              "name": "meta.id", "p_yes": "stat.probability"}


def flux_unit(text: str) -> UnitBase | None:
    """An astropy unit for the file's flux unit text, or None when astropy cannot parse it."""
    import astropy.units as u

    if not text or not text.strip():
        return None
    for fmt in ("fits", "vounit", None):
        try:
            return u.Unit(text.strip(), format=fmt, parse_strict="raise")
        except (ValueError, TypeError):
            continue
    return None


def spectrum_table(spec: Spectrum) -> Table:
    """The spectrum as an astropy Table with units, UCDs and utypes in the column metadata."""
    import astropy.units as u
    from astropy.table import Table

    sigma = spec.sigma
    err = np.full(spec.n_pixels, np.nan) if sigma is None else np.where(np.isfinite(sigma), sigma, np.nan)
    unit = flux_unit(spec.flux_unit)
    data = {"WAVELENGTH": spec.wavelength, "FLUX": spec.flux, "ERROR": err, "QUALITY": spec.mask.astype(np.int16)}
    units = {"WAVELENGTH": u.AA, "FLUX": unit, "ERROR": unit, "QUALITY": None}
    table = Table()
    for name, utype, ucd in SPECTRUM_COLUMNS:
        table[name] = data[name]
        table[name].unit = units[name]
        table[name].meta.update(ucd=ucd, utype=utype)
    desc = {"WAVELENGTH": f"Wavelength ({spec.medium})", "FLUX": f"Flux ({spec.flux_unit or 'arbitrary units'})",
            "ERROR": "1 sigma flux error from the inverse variance (NaN: unknown)",
            "QUALITY": "1 where the pixel is masked (bad)"}
    for name, text in desc.items():
        table[name].description = text
    return table


def _target(spec: Spectrum) -> dict[str, Any]:
    m = spec.meta
    return {"name": str(m.object_id or spec.name), "ra": m.ra, "dec": m.dec, "z": m.redshift}


def write_spectrum_votable(spec: Spectrum, path: Path) -> Path:
    from astropy.io.votable.tree import Param

    table = spectrum_table(spec)
    with warnings.catch_warnings():  # "Angstrom" is deprecated in VOUnit, yet it is what SPLAT-VO and TOPCAT read
        warnings.simplefilter("ignore", UnitsWarning)
        vot = votable_of(table, spec.name)
    resource = vot.resources[0]
    resource.utype = "spec:Spectrum"
    vt = resource.tables[0]
    vt.utype = "spec:Spectrum"
    # from_table has copied each column's meta ucd/utype onto its FIELD
    t = _target(spec)
    params = [Param(vot, name="TARGET", datatype="char", arraysize="*", value=t["name"], ucd="meta.id;src",
                    utype="spec:Spectrum.Target.Name")]
    for name, value, ucd, utype, unit in (
            ("RA", t["ra"], "pos.eq.ra;meta.main", "spec:Spectrum.Target.Pos", "deg"),
            ("DEC", t["dec"], "pos.eq.dec;meta.main", "spec:Spectrum.Target.Pos", "deg"),
            ("REDSHIFT", t["z"], "src.redshift", "spec:Spectrum.Target.Redshift", None)):
        if value is not None and math.isfinite(float(value)):
            params.append(Param(vot, name=name, datatype="double", value=float(value), ucd=ucd, utype=utype,
                                unit=unit))
    vt.params.extend(params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnitsWarning)
        vot.to_xml(str(path))
    return path


def write_spectrum_fits(spec: Spectrum, path: Path) -> Path:
    from astropy.io import fits

    table = spectrum_table(spec)
    hdu = fits.BinTableHDU(table, name="SPECTRUM")
    for i, name in enumerate(table.colnames, start=1):
        hdu.header[f"TUCD{i}"] = table[name].meta["ucd"]
        hdu.header[f"TUTYP{i}"] = table[name].meta["utype"]
    primary = fits.PrimaryHDU()
    t = _target(spec)
    primary.header["OBJECT"] = (t["name"].encode("ascii", "backslashreplace").decode("ascii")[:68], "Target")
    for key, value, comment in (("RA", t["ra"], "[deg] target right ascension"),
                                ("DEC", t["dec"], "[deg] target declination"), ("Z", t["z"], "redshift")):
        if value is not None and math.isfinite(float(value)):
            primary.header[key] = (float(value), comment)
    primary.header["ORIGIN"] = "spec-o3"
    fits.HDUList([primary, hdu]).writeto(path, overwrite=True)
    return path


def write_spectrum(spec: Spectrum, folder: Path, fmt: str = "votable") -> Path:
    """Write ``spec`` into ``folder`` as ``votable`` or ``fits``; returns the file."""
    if fmt not in MIME:
        raise ValueError(f"unknown spectrum format {fmt!r} (votable, fits)")
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec.name)[:80] or "spectrum"
    path = Path(tempfile.mkstemp(prefix=f"{stem}-", suffix=".vot" if fmt == "votable" else ".fits",
                                 dir=folder)[1])
    return (write_spectrum_votable if fmt == "votable" else write_spectrum_fits)(spec, path)


def write_table_votable(table: Table, path: Path, name: str = "spec-o3 candidates") -> Path:
    """A candidate table as a VOTable, with position/identifier UCDs on the columns that have them."""
    return write_votable(table, path, name, TABLE_UCDS)


class TempFolder:
    """A private temporary folder (mode 0700) created on first use and removed by `cleanup`."""

    def __init__(self, prefix: str = "speco3-samp-"):
        self.prefix = prefix
        self._path: Path | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        with self._lock:
            if self._path is None or not self._path.is_dir():
                self._path = Path(tempfile.mkdtemp(prefix=self.prefix))
            return self._path

    @property
    def exists(self) -> bool:
        return self._path is not None and self._path.is_dir()

    def cleanup(self) -> None:
        with self._lock:
            if self._path is not None:
                shutil.rmtree(self._path, ignore_errors=True)
                log.debug("removed %s", self._path)
            self._path = None


class Outbox:
    """A lasting folder (mode 0700) for files sent by a short-lived process; see module doc.

    Files older than ``max_age_s`` are removed when the folder is first used and on `cleanup`; newer ones stay,
    so a peer that loads a file after replying still finds it when the sender has exited.
    """

    def __init__(self, folder: str | os.PathLike, max_age_s: float = 24 * 3600.0):
        self.folder = Path(folder)
        self.max_age_s = float(max_age_s)
        self._pruned = False

    @property
    def path(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self._pruned:
            self._pruned = True
            try:  # private, like TempFolder: the copies are the user's spectra
                os.chmod(self.folder, 0o700)
            except OSError as exc:
                log.debug("outbox: cannot make %s private (%s)", self.folder, exc)
            self.prune()
        return self.folder

    @property
    def exists(self) -> bool:
        return self.folder.is_dir()

    def prune(self) -> int:
        """Remove the files older than ``max_age_s``; returns how many."""
        cutoff, removed = time.time() - self.max_age_s, 0
        for p in self.folder.glob("*") if self.folder.is_dir() else ():
            try:
                if p.is_file() and p.stat().st_mtime < cutoff:
                    p.unlink()
                    removed += 1
            except OSError as exc:  # another process pruned it first, or it is not ours to remove
                log.debug("outbox: %s not removed (%s)", p, exc)
        return removed

    def cleanup(self) -> None:
        self.prune()

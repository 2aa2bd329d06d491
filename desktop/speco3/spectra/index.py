"""Archive index: a SQLite catalogue of every spectrum under a folder, for browsing 100,000s of rows.

One row per spectrum (metadata, pixel count, wavelength range, masked fraction, file size and mtime) and one row
per unreadable file (``error`` set). Keys are archive-relative POSIX paths plus ``#index``, so they survive moving
the archive or sharing the database. Scans are incremental (files whose size/mtime are unchanged are not read;
files that depend on a changed sibling, e.g. a DESI coadd on its redrock file, are re-read; deleted files
are removed) and run on a process pool. WAL mode; filter and sort columns are indexed so that
``query(limit, offset)`` and ``count()`` stay fast.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path, PurePosixPath
from typing import Any

from speco3.config import ensure, writable_cache
from speco3.errors import Speco3Error, SpectrumReadError
from speco3.fileio import Progress
from speco3.spectra._scan import scan_file, wanted
from speco3.spectra.model import SKY_FIBRE_NOTE, Spectrum, spectrum_address
from speco3.spectra.source import read_limits, set_read_limits

log = logging.getLogger(__name__)

SORTABLE = ("key", "file_name", "survey", "cls", "subclass", "redshift", "snr", "survey_snr", "z_err", "zwarn",
            "deltachi2", "object_id", "format",
            "n_pixels", "wmin", "wmax", "masked_fraction", "ra", "dec", "file_mtime", "file_size", "data_release")
#: Formats whose reading depends on other files of their folder (redrock siblings, error companions).
FOLDER_SENSITIVE = {"desi", "generic-image"}
POOL_THRESHOLD = 24  # below this many files, reading in-process beats starting workers

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS files (
    rel TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, format TEXT, n_spectra INTEGER,
    error TEXT, error_kind TEXT, skipped TEXT, depends TEXT, scanned_at REAL);
CREATE TABLE IF NOT EXISTS spectra (
    key TEXT PRIMARY KEY, rel TEXT NOT NULL, idx INTEGER NOT NULL, format TEXT COLLATE NOCASE,
    survey TEXT COLLATE NOCASE, data_release TEXT, object_id TEXT, ra REAL, dec REAL, redshift REAL,
    redshift_source TEXT, cls TEXT COLLATE NOCASE, subclass TEXT COLLATE NOCASE, snr REAL,
    file_name TEXT, hdu TEXT, row INTEGER, note TEXT, n_pixels INTEGER, wmin REAL, wmax REAL,
    masked_fraction REAL, flux_unit TEXT, medium TEXT, file_size INTEGER, file_mtime REAL, error TEXT,
    has_error INTEGER NOT NULL DEFAULT 0, survey_snr REAL, z_err REAL, zwarn INTEGER, zwarn_name TEXT,
    deltachi2 REAL);
CREATE INDEX IF NOT EXISTS ix_spectra_rel ON spectra(rel);
CREATE INDEX IF NOT EXISTS ix_spectra_survey ON spectra(survey, key);
CREATE INDEX IF NOT EXISTS ix_spectra_cls ON spectra(cls, key);
CREATE INDEX IF NOT EXISTS ix_spectra_z ON spectra(redshift, key);
CREATE INDEX IF NOT EXISTS ix_spectra_snr ON spectra(snr, key);
CREATE INDEX IF NOT EXISTS ix_spectra_name ON spectra(file_name, key);
CREATE INDEX IF NOT EXISTS ix_spectra_format ON spectra(format, key);
CREATE INDEX IF NOT EXISTS ix_spectra_err ON spectra(has_error, key);
CREATE INDEX IF NOT EXISTS ix_spectra_obj ON spectra(object_id);
CREATE INDEX IF NOT EXISTS ix_spectra_cls_snr ON spectra(cls, snr, key);
CREATE INDEX IF NOT EXISTS ix_spectra_cls_z ON spectra(cls, redshift, key);
"""
#: Bumped when the tables change; an index with another version is rebuilt (it is a cache).
SCHEMA_VERSION = "4"  # 3: companion files (DESI redrock) are recorded in files only; 4: snr is ours
# (`speco3.spectra.model.SNR_DEFINITION`), the survey's own figure is survey_snr; the pipeline's z_err, zwarn (its
# name: zwarn_name) and deltachi2 (`speco3.spectra.model.pipeline_fit`)
# what queries select: the stored columns, then how many spectra the entry's file holds (`IndexEntry.in_file`)
COLUMNS = ("key", "rel", "idx", "format", "survey", "data_release", "object_id", "ra", "dec", "redshift",
           "redshift_source", "cls", "subclass", "snr", "file_name", "hdu", "row", "note", "n_pixels", "wmin",
           "wmax", "masked_fraction", "flux_unit", "medium", "file_size", "file_mtime", "error", "survey_snr",
           "z_err", "zwarn", "zwarn_name", "deltachi2", "has_error")
SELECT = ",".join(COLUMNS[:-1]) + ",(SELECT n_spectra FROM files WHERE files.rel = spectra.rel)"


class ArchiveIndexError(Speco3Error):
    """The index database cannot be opened (not SQLite, damaged, or not writable)."""


@dataclass
class IndexEntry:
    """One row of the index: a spectrum (or an unreadable file when ``error`` is set)."""

    key: str
    path: str
    index: int
    format: str | None = None
    survey: str | None = None
    data_release: str | None = None
    object_id: str | None = None
    ra: float | None = None
    dec: float | None = None
    redshift: float | None = None
    redshift_source: str | None = None
    cls: str | None = None
    subclass: str | None = None
    snr: float | None = None
    file_name: str | None = None
    hdu: str | None = None
    row: int | None = None
    note: str | None = None
    n_pixels: int | None = None
    wmin: float | None = None
    wmax: float | None = None
    masked_fraction: float | None = None
    flux_unit: str | None = None
    medium: str | None = None
    file_size: int | None = None
    file_mtime: float | None = None
    error: str | None = None
    survey_snr: float | None = None  # the survey's own S/N (`snr` is ours, one definition for every survey)
    z_err: float | None = None  # the pipeline's fit (`speco3.spectra.model.PipelineFit`)
    zwarn: int | None = None
    zwarn_name: str | None = None
    deltachi2: float | None = None
    in_file: int | None = None  # spectra in this entry's file (None: not known)

    @property
    def name(self) -> str:
        """Display name: the file name, plus ``#N`` when the file holds several spectra (``#0`` for the first)."""
        base = self.file_name or PurePosixPath(self.key.rsplit("#", 1)[0]).name
        return base if self.index == 0 and (self.in_file or 1) < 2 else f"{base}#{self.index}"

    @property
    def address(self) -> str:
        """The spectrum's address ``PATH#N`` (`speco3.spectra.model.spectrum_address`): its key in a vetting store."""
        return spectrum_address(self.path, self.index)

    @property
    def unusable(self) -> str | None:
        """Why this spectrum has nothing to vet (a sky fibre, every pixel masked), else None."""
        if (self.note or "").startswith(SKY_FIBRE_NOTE):
            return "a sky fibre"
        if self.masked_fraction is not None and self.masked_fraction >= 1.0:
            return "every pixel is masked"
        return None

    def load(self) -> Spectrum:
        """Read this spectrum from disk (raises SpectrumReadError for error rows or changed files)."""
        if self.error:
            raise SpectrumReadError(self.path, self.error)
        return read_spectrum_at(self.path, self.index)


def read_spectrum_at(path: str, index: int) -> Spectrum:
    from speco3.spectra.registry import read_spectrum

    return read_spectrum(path, index)


@dataclass
class ScanSummary:
    root: str
    files_seen: int = 0
    files_read: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    spectra_written: int = 0
    errors: int = 0
    companions: int = 0
    seconds: float = 0.0
    by_format: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class ArchiveIndex:
    """SQLite index of an archive folder.

    Parameters
    ----------
    db_path : path-like
        The database file (created if missing). One connection per instance; safe to share between threads.
    """

    def __init__(self, db_path: str | os.PathLike):
        self.db_path = Path(db_path)
        ensure(self.db_path.parent)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(str(self.db_path), check_same_thread=False, timeout=30)
            self._open()
        except sqlite3.DatabaseError as exc:
            raise ArchiveIndexError(f"{self.db_path}: not a usable archive index ({exc})") from exc

    def _open(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        has_meta = self._db.execute("SELECT name FROM sqlite_master WHERE name='meta'").fetchone()
        version = has_meta and self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if has_meta and (not version or version[0] != SCHEMA_VERSION):
            log.info("index %s has an old schema; rebuilding it", self.db_path)
            self._db.executescript("DROP TABLE IF EXISTS spectra; DROP TABLE IF EXISTS files;")
        self._db.executescript(SCHEMA)
        self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
        self._db.commit()

    @classmethod
    def for_root(cls, root: str | os.PathLike) -> ArchiveIndex:
        """The index of ``root`` in ``cache_dir()/indexes/<hash of resolved root>.sqlite`` (a temporary folder for this
        process when the cache folder cannot be written: `speco3.config.writable_cache`).

        Raises
        ------
        ArchiveIndexError
            When ``root`` is not an existing folder; nothing is created then (no database, no cache folder).
        """
        path = Path(root).expanduser()
        if not path.is_dir():
            why = "is a file, not a folder" if path.exists() else "archive folder not found"
            raise ArchiveIndexError(f"{path}: {why}; no index was created")
        resolved = str(path.resolve())
        digest = hashlib.sha256(resolved.encode("utf-8")).hexdigest()[:20]
        index = cls(writable_cache("indexes") / f"{digest}.sqlite")
        if index.root is None:
            index._set_meta("root", resolved)
        return index

    # -- plumbing ---------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> ArchiveIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set_meta(self, key: str, value: str) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    @property
    def root(self) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key='root'").fetchone()
        return row[0] if row else None

    # -- scanning ---------------------------------------------------------------------------------------
    def scan(self, root: str | os.PathLike, progress: Progress | None = None, workers: int = 2) -> ScanSummary:
        """Index ``root`` recursively; only new or changed files (and their dependants) are read.

        ``progress(rel_path, files_done, files_to_read)`` after each file read; it may raise to stop (the files
        read so far are kept).
        """
        t0 = time.perf_counter()
        rootp = Path(root).expanduser().resolve()
        if not rootp.is_dir():
            raise SpectrumReadError(str(rootp), "archive folder not found")
        self._set_meta("root", str(rootp))
        found = dict(_walk(rootp))
        with self._lock:
            known = {r: (s, m, f, d) for r, s, m, f, d in
                     self._db.execute("SELECT rel, size, mtime_ns, format, depends FROM files")}
        summary = ScanSummary(root=str(rootp), files_seen=len(found))
        changed = {r for r, st in found.items() if r not in known or known[r][:2] != st}
        deleted = set(known) - set(found)
        touched = changed | deleted
        touched_dirs = {str(PurePosixPath(r).parent) for r in touched}
        for rel, (_, _, fmt, deps) in known.items():
            if rel in changed or rel in deleted:
                continue
            dep_list = json.loads(deps) if deps and deps != "[]" else []
            if any(d in touched for d in dep_list) or (
                    fmt in FOLDER_SENSITIVE and str(PurePosixPath(rel).parent) in touched_dirs):
                changed.add(rel)
        with self._lock, self._db:
            for rel in deleted:
                self._db.execute("DELETE FROM spectra WHERE rel=?", (rel,))
                self._db.execute("DELETE FROM files WHERE rel=?", (rel,))
        summary.files_removed = len(deleted)
        todo = sorted(changed)
        summary.files_unchanged = len(found) - len(todo)
        try:
            self._read_all(rootp, todo, found, summary, progress, workers)
        finally:
            summary.by_format = self.summary()["by_format"]
            summary.seconds = round(time.perf_counter() - t0, 3)
        return summary

    def _read_all(self, rootp: Path, todo: list[str], found: dict, summary: ScanSummary,
                  progress: Progress | None, workers: int) -> None:
        args = [(str(rootp), rel) for rel in todo]
        batch: list[dict] = []
        if workers > 1 and len(todo) >= POOL_THRESHOLD:
            ctx = multiprocessing.get_context("spawn")  # fork is unsafe in the threaded GUI process
            # the read limit holds for the reads in flight together: each worker gets its share of it
            limits = read_limits()
            share = replace(limits, ceiling=max(limits.ceiling // workers, 1 << 20))
            pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=set_read_limits,
                                       initargs=(share,))
            results: Iterable[dict] = pool.map(scan_file, args, chunksize=max(1, min(64, len(args) // (workers * 8))))
        else:
            pool = None
            results = map(scan_file, args)
        try:
            for done, res in enumerate(results, 1):
                batch.append(res)
                if len(batch) >= 256:
                    self._write(batch, found, summary)
                    batch = []
                if progress is not None:
                    progress(res["rel"], done, len(todo))
        finally:
            if batch:
                self._write(batch, found, summary)
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _write(self, batch: list[dict], found: dict, summary: ScanSummary) -> None:
        now = time.time()
        with self._lock, self._db:
            for res in batch:
                rel = res["rel"]
                size, mtime_ns = found[rel]
                name = PurePosixPath(rel).name
                self._db.execute("DELETE FROM spectra WHERE rel=?", (rel,))
                rows = res["rows"]
                self._db.execute(
                    "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (rel, size, mtime_ns, res["format"], len(rows), res["error"], res["error_kind"],
                     json.dumps(res["skipped"]), json.dumps(res["depends"]), now))
                base = {"rel": rel, "file_name": name, "file_size": size, "file_mtime": mtime_ns / 1e9}
                if res.get("companion"):  # no spectrum row: never listed, vetted or counted as an error
                    self._db.execute("UPDATE files SET error_kind='companion' WHERE rel=?", (rel,))
                    summary.companions += 1
                elif res["error"]:
                    summary.errors += 1
                    rows = [{"idx": 0, "format": res["format"], "error": res["error"], "has_error": 1,
                             "note": res["error_kind"]}]
                for r in rows:
                    rec = {**base, **r, "key": f"{rel}#{r['idx']}"}
                    self._db.execute(f"INSERT OR REPLACE INTO spectra ({','.join(COLUMNS)}) VALUES "
                                     f"({','.join('?' * len(COLUMNS))})", [rec.get(c) for c in COLUMNS[:-1]]
                                     + [rec.get("has_error", 0)])
                summary.files_read += 1
                summary.spectra_written += len(res["rows"])

    # -- queries ----------------------------------------------------------------------------------------
    @staticmethod
    def _where(survey=None, cls=None, z_min=None, z_max=None, snr_min=None, text=None, has_error=None,
               format=None, usable=None, zwarn_clean=None, z_err_max=None, deltachi2_min=None) -> tuple[str, list]:
        clauses, params = [], []
        for column, value in (("survey", survey), ("cls", cls), ("format", format)):
            if value is None or value == "":
                continue
            values = [value] if isinstance(value, str) else list(value)
            clauses.append(f"{column} IN ({','.join('?' * len(values))})")  # columns are COLLATE NOCASE
            params += values
        if z_min is not None:
            clauses.append("redshift >= ?")
            params.append(float(z_min))
        if z_max is not None:
            clauses.append("redshift <= ?")
            params.append(float(z_max))
        if snr_min is not None:
            clauses.append("snr >= ?")
            params.append(float(snr_min))
        if text:
            like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            clauses.append("(" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in
                                             ("key", "object_id", "cls", "subclass", "note")) + ")")
            params += [like] * 5
        if has_error is not None:
            clauses.append("has_error = ?")
            params.append(1 if has_error else 0)
        if usable is not None:  # a sky fibre or a spectrum whose every pixel is masked has nothing to vet
            clause = "(COALESCE(note, '') NOT LIKE ? AND COALESCE(masked_fraction, 0) < 1.0)"
            clauses.append(clause if usable else f"NOT {clause}")
            params.append(SKY_FIBRE_NOTE + "%")
        if zwarn_clean is not None:  # the pipeline's redshift warning bits: none (or none stated) / some
            clauses.append("COALESCE(zwarn, 0) = 0" if zwarn_clean else "COALESCE(zwarn, 0) != 0")
        # the pipeline's z error and redrock's DELTACHI2: a spectrum whose file states none is kept (as for zwarn)
        if z_err_max is not None:
            clauses.append("(z_err IS NULL OR z_err <= ?)")
            params.append(float(z_err_max))
        if deltachi2_min is not None:
            clauses.append("(deltachi2 IS NULL OR deltachi2 >= ?)")
            params.append(float(deltachi2_min))
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def query(self, survey=None, cls=None, z_min=None, z_max=None, snr_min=None, text=None, has_error=None,
              format=None, usable=None, sort: str = "file_name", descending: bool = False, limit: int | None = None,
              offset: int = 0, zwarn_clean=None, z_err_max=None, deltachi2_min=None) -> list[IndexEntry]:
        """Entries matching the filters, sorted (ties broken by key), paged by ``limit``/``offset``.

        ``usable=True`` leaves out sky fibres and spectra with every pixel masked (`is_unusable`); False keeps only
        those; None (the default) both."""
        if sort not in SORTABLE:
            raise ValueError(f"cannot sort by {sort!r}; choose one of {', '.join(SORTABLE)}")
        where, params = self._where(survey, cls, z_min, z_max, snr_min, text, has_error, format, usable, zwarn_clean,
                                    z_err_max, deltachi2_min)
        direction = "DESC" if descending else "ASC"
        # ties (and "key") in file order, then by position in the file: #2 before #10
        tie = f"rel {direction}, idx {direction}"
        order = f"{sort} {direction}, {tie}" if sort != "key" else tie
        sql = f"SELECT {SELECT} FROM spectra{where} ORDER BY {order}"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            params += [-1 if limit is None else int(limit), int(offset)]
        root = self.root or ""
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [self._entry(root, r) for r in rows]

    def count(self, survey=None, cls=None, z_min=None, z_max=None, snr_min=None, text=None, has_error=None,
              format=None, usable=None, zwarn_clean=None, z_err_max=None, deltachi2_min=None) -> int:
        where, params = self._where(survey, cls, z_min, z_max, snr_min, text, has_error, format, usable, zwarn_clean,
                                    z_err_max, deltachi2_min)
        with self._lock:
            return int(self._db.execute(f"SELECT COUNT(*) FROM spectra{where}", params).fetchone()[0])

    def get(self, key: str) -> IndexEntry | None:
        """The entry with this key (``rel/path.fits#N``), or None."""
        with self._lock:
            row = self._db.execute(f"SELECT {SELECT} FROM spectra WHERE key=?", (key,)).fetchone()
        return self._entry(self.root or "", row) if row else None

    def near(self, ra: float, dec: float, radius_deg: float) -> list[IndexEntry]:
        """Readable entries whose position lies in the RA/Dec box around (ra, dec) that holds the radius."""
        import math

        d_lo, d_hi = dec - radius_deg, dec + radius_deg
        cos = math.cos(math.radians(min(abs(dec) + radius_deg, 89.999)))
        dra = 180.0 if cos <= 0 or radius_deg / cos >= 180.0 else radius_deg / cos
        lo, hi = (ra - dra) % 360.0, (ra + dra) % 360.0
        ra_sql = "(ra BETWEEN ? AND ?)" if dra >= 180.0 or lo <= hi else "(ra >= ? OR ra <= ?)"
        ra_args = (0.0, 360.0) if dra >= 180.0 else (lo, hi)
        sql = (f"SELECT {SELECT} FROM spectra WHERE has_error=0 AND dec BETWEEN ? AND ? AND "
               f"{ra_sql} ORDER BY key")
        with self._lock:
            rows = self._db.execute(sql, (d_lo, d_hi, *ra_args)).fetchall()
        return [self._entry(self.root or "", r) for r in rows]

    def errors(self) -> list[IndexEntry]:
        """Rows of files that could not be read, by key."""
        return self.query(has_error=True, sort="key")

    def skipped(self) -> dict[str, list[list[str]]]:
        """Entries that readers skipped on purpose (e.g. unassigned DESI fibres), by file."""
        with self._lock:
            rows = self._db.execute("SELECT rel, skipped FROM files WHERE skipped IS NOT NULL AND skipped != '[]'")
            return {rel: json.loads(s) for rel, s in rows}

    def companions(self) -> list[str]:
        """Companion files (e.g. DESI redrock catalogues), read with the files they serve and never listed."""
        with self._lock:
            rows = self._db.execute("SELECT rel FROM files WHERE error_kind='companion' ORDER BY rel")
            return [r[0] for r in rows]

    def summary(self) -> dict[str, Any]:
        """Counts: files, spectra, errors, companion files, spectra by format and by survey, skipped entries."""
        with self._lock:
            q = self._db.execute
            files = q("SELECT COUNT(*) FROM files").fetchone()[0]
            spectra = q("SELECT COUNT(*) FROM spectra WHERE has_error=0").fetchone()[0]
            errors = q("SELECT COUNT(*) FROM spectra WHERE has_error=1").fetchone()[0]
            by_format = dict(q("SELECT format, COUNT(*) FROM spectra WHERE has_error=0 GROUP BY format ORDER BY 2 DESC"))
            by_survey = dict(q("SELECT COALESCE(survey,'?'), COUNT(*) FROM spectra WHERE has_error=0 "
                               "GROUP BY 1 ORDER BY 2 DESC"))
            by_kind = dict(q("SELECT error_kind, COUNT(*) FROM files WHERE error IS NOT NULL GROUP BY 1"))
        n_skipped = sum(len(v) for v in self.skipped().values())
        return {"root": self.root, "files": files, "spectra": spectra, "errors": errors,
                "companions": len(self.companions()), "by_format": by_format,
                "by_survey": by_survey, "errors_by_kind": by_kind, "skipped": n_skipped}

    @staticmethod
    def _entry(root: str, r: tuple) -> IndexEntry:
        d = dict(zip((*COLUMNS[:-1], "in_file"), r, strict=True))
        rel = d.pop("rel")
        return IndexEntry(path=str(Path(root) / rel), index=d.pop("idx"), **d)


def _walk(root: Path) -> Iterable[tuple[str, tuple[int, int]]]:
    """(rel POSIX path, (size, mtime_ns)) of every candidate file under root; hidden folders are skipped."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            log.warning("cannot list %s: %s", folder, exc)
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if not e.name.startswith("."):
                        stack.append(Path(e.path))
                elif wanted(e.name) and e.is_file():
                    st = e.stat()
                    yield Path(e.path).relative_to(root).as_posix(), (st.st_size, st.st_mtime_ns)
            except OSError as exc:
                log.warning("cannot stat %s: %s", e.path, exc)

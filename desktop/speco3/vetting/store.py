"""`VettingStore`: model verdicts, human decisions and session state in one SQLite file.

Durability first: WAL journal, ``synchronous=FULL``, every write in its own committed transaction (a decision is on
disk when `record_decision` returns; a crash or ``kill -9`` loses at most the write in flight). The schema is
versioned with ``PRAGMA user_version``; a file from a newer version is refused rather than damaged. Decisions are
append-only (the latest one per spectrum and task counts; the history stays for the audit). One store may be shared
by threads (a lock serialises access) and by processes (SQLite locking with a busy timeout).

Several writers on one store (one machine, a local disk): screening runs claim each spectrum before they screen it
(`claim`, one ``BEGIN IMMEDIATE`` transaction) and the verdict releases it in the transaction that writes it
(`record_claimed_verdict`); a claim held by a live run is left to it, one whose lease ran out or whose process is
gone on this host is taken over. Every write is a short transaction; a writer waits for the others (busy timeout,
then a few retries) rather than fail, so a decision is never lost to a screening run writing beside it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speco3 import __version__
from speco3.agent.trace import TRACE_FILE, Trace, TraceError
from speco3.config import data_dir
from speco3.errors import StoreError
from speco3.vetting.records import (
    DECISIONS,
    VERDICTS,
    Annotation,
    ClaimHolder,
    Decision,
    Evidence,
    ModelVerdict,
    Notes,
    RolloutRecord,
    SpectrumInfo,
    Work,
    evidence_from_json,
    evidence_json,
    now_iso,
    stored_json,
)
from speco3.vetting.schema import (
    SCHEMA_VERSION,
    VERDICT_COLUMNS,
    additive,
    migrate,
    storable_text,
)
from speco3.vetting.trace_roots import TraceOutside, suggest_root, trusted_roots

logger = logging.getLogger(__name__)
#: A decision row with the vetter's z, confidence and class (table decision_fit; NULL when not given).
_DECISION_SELECT = ("SELECT d.*, f.z AS vetter_z, f.z_conf, f.cls AS vetter_class, f.subclass AS vetter_subclass "
                    "FROM decisions d LEFT JOIN decision_fit f USING (spectrum_key, task, vetter, decided_at)")

# Outcomes that a later run should retry rather than count as done.
RETRY_OUTCOMES = ("cancelled", "engine_error")


#: Seconds a claim holds without being renewed (a run renews its claims every third of it while it screens them).
LEASE_S = 60.0
#: Seconds a writer waits for another one's write lock (SQLite's busy timeout), and how many times it waits again.
BUSY_TIMEOUT_S = 30.0
BUSY_RETRIES = 3

#: What `VettingStore.claim` found: the spectrum is now this run's (``claimed``), another live run screens it
#: (``held``), or another run finished it since this one began (``done``).
CLAIMED, HELD, DONE_ELSEWHERE = "claimed", "held", "done"


@dataclass(frozen=True)
class Claim:
    """The answer of `VettingStore.claim`: ``state`` and the other run concerned (``held``: the one screening it;
    ``claimed``: the run whose expired or orphaned claim was taken over, None when the spectrum was free)."""

    state: str
    holder: ClaimHolder | None = None


def _sqlite_reason(exc: sqlite3.Error) -> str:
    """The SQLite error in words a user can act on (read-only place, full disk, a lock held too long)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11; the message's words before that
    if code is None:
        text = str(exc).lower()
        code = (sqlite3.SQLITE_READONLY if "readonly" in text else sqlite3.SQLITE_FULL if "is full" in text
                else sqlite3.SQLITE_BUSY if "locked" in text else None)
    if code is not None:
        primary = code & 0xFF
        if primary == sqlite3.SQLITE_READONLY:
            return f"the store cannot be written: its file, folder or file system is read-only ({exc})"
        if primary == sqlite3.SQLITE_FULL:
            return f"the disk holding the store is full ({exc})"
        if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return (f"another process kept the store locked for more than "
                    f"{BUSY_TIMEOUT_S * (BUSY_RETRIES + 1):.0f} s ({exc})")
        if primary in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN):
            return f"the file system refused a read or write ({exc})"
    return str(exc)


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "locked" in str(exc).lower()
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


#: A run of this work on this spectrum recorded after the verdict id given (input errors count for any K).
_SCREENED_SINCE = ("SELECT 1 FROM model_verdicts WHERE spectrum_key=? AND task=? AND model_id=? AND prompt_version=? "
                   "AND (COALESCE(k_max, rollouts, 1)=? OR outcome='input_error') AND id>? LIMIT 1")
_CLAIM_WHERE = "spectrum_key=? AND task=? AND model_id=? AND prompt_version=? AND rollouts=?"


#: State key naming the archive folder a store vets (set by the app and `spec-o3 vet`; reports are titled by it).
ARCHIVE_ROOT_STATE = "archive_root"


class ReadOnlyStoreError(StoreError):
    """The store cannot be written where it is: its file or its folder is read-only (the app then keeps the session
    in memory until the user chooses another place)."""


def read_only_place(path: Path) -> str | None:
    """Why a store at ``path`` cannot be written (the file, or the nearest existing folder above it, is read-only,
    or on a read-only file system), else None. A store needs its folder writable too: SQLite keeps its journal
    files beside the store."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        ro_fs = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        ro_fs = False
    if ro_fs:
        return f"{folder} is on a read-only file system; choose a folder you can write to"
    if path.exists() and not os.access(path, os.W_OK):
        return "the store file is read-only; choose a file you can write to"
    if not os.access(folder, os.W_OK):
        return f"the folder {folder} is read-only; choose a folder you can write to"
    return None


class VettingStore:
    """The vetting database at ``path`` (created when missing).

    Parameters
    ----------
    path : path-like
        SQLite file. Its folder is created.
    readonly : bool
        Open for reading only (exports, reports).
    """

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        try:
            if readonly:
                if not self.path.is_file():
                    raise StoreError(f"{self.path}: no such vetting store")
                uri = f"file:{self.path.resolve().as_posix()}?mode=ro"
                if read_only_place(self.path):  # SQLite cannot make its shared-memory file beside it
                    wal = Path(f"{self.path}-wal")
                    if wal.exists() and wal.stat().st_size:
                        raise StoreError(f"{self.path}: is in a read-only place with unmerged changes in {wal.name} "
                                         "(it was not closed); copy the store and its -wal file to a folder you "
                                         "can write to and read the copy")
                    uri += "&immutable=1"  # nothing can change it there, and it holds everything (no -wal)
                self._db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False,
                                           isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False,
                                           isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._init()
        except sqlite3.OperationalError as exc:  # a read-only place, a full disk, a lock held too long
            why = None if readonly else read_only_place(self.path)
            if why:
                raise ReadOnlyStoreError(f"{self.path}: cannot write the vetting store there: {why}") from exc
            reason = _sqlite_reason(exc)
            if not readonly and not os.access(self.path.parent, os.W_OK):
                reason = f"its folder {self.path.parent} is not writable (a read-only file system?) ({exc})"
            raise StoreError(f"{self.path}: cannot open: {reason}") from exc
        except sqlite3.DatabaseError as exc:
            why = None if readonly else read_only_place(self.path)
            if why:
                raise ReadOnlyStoreError(f"{self.path}: cannot write the vetting store there: {why}") from exc
            raise StoreError(f"{self.path}: not a usable vetting store ({exc})") from exc
        except OSError as exc:
            why = None if readonly else read_only_place(self.path)
            if why:
                raise ReadOnlyStoreError(f"{self.path}: cannot write the vetting store there: {why}") from exc
            raise StoreError(f"{self.path}: cannot open ({exc.strerror or exc})") from exc

    def _init(self) -> None:
        db = self._db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: written by a newer Spec-o3 (schema {version} > {SCHEMA_VERSION})")
        if self.readonly:
            if version == 0:
                raise StoreError(f"{self.path}: not a vetting store (no schema)")
            # tables created on open that an older store lacks: empty temporary ones (the file stays untouched), so
            # that reads joining them answer with empty fields
            have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for stmt in additive(have):
                db.execute(stmt.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
            return
        self._while_busy("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        if version < SCHEMA_VERSION:
            with self._tx() as cur:
                # read again under the write lock: another connection may have just created the store (its tables
                # then stand beside a version this one read as 0 before they were committed)
                if cur.execute("PRAGMA user_version").fetchone()[0] == 0:
                    tables = {r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                    if tables - {"sqlite_sequence"}:
                        raise StoreError(f"{self.path}: an SQLite file of another application "
                                         f"(tables {sorted(tables)})")
                version = migrate(cur)
            if version:
                logger.info("%s: vetting store migrated from schema %d to %d", self.path, version, SCHEMA_VERSION)
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if additive(have):
            with self._tx() as cur:  # read again under the write lock: another process may have just made them
                have = {r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                for stmt in additive(have):
                    cur.execute(stmt)

    def _while_busy(self, sql: str) -> None:
        """Run ``sql`` again while another connection holds the lock it needs, up to the time a write waits. SQLite
        answers BUSY at once, without its busy handler, when two connections open a new store together and one of
        them asks for WAL mode while the other holds a lock it must upgrade (seen with two `vet` runs starting on one
        new store)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S * (BUSY_RETRIES + 1)
        pause = 0.01
        while True:
            try:
                self._db.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        """One committed write transaction."""
        if self.readonly:
            raise StoreError(f"{self.path}: opened read-only")
        with self._lock:
            cur = self._db.cursor()
            try:
                for attempt in range(BUSY_RETRIES + 1):  # each BEGIN waits up to the busy timeout for the lock
                    try:
                        cur.execute("BEGIN IMMEDIATE")
                        break
                    except sqlite3.OperationalError as exc:
                        if not _busy(exc) or attempt == BUSY_RETRIES:
                            raise
                        logger.warning("%s: still locked by another writer after %.0f s; waiting again", self.path,
                                       BUSY_TIMEOUT_S * (attempt + 1))
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    cur.execute("ROLLBACK")
                raise
            finally:
                cur.close()

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(storable_text(a) for a in args)).fetchall()
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: read failed: {_sqlite_reason(exc)}") from exc

    def _write(self, sql: str, args: tuple) -> int:
        """One statement in its own transaction; the id of the row it inserted (0 when it inserted none)."""
        try:
            with self._tx() as cur:
                cur.execute(sql, tuple(storable_text(a) for a in args))
                return int(cur.lastrowid or 0) if cur.rowcount > 0 else 0
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: write failed: {_sqlite_reason(exc)}") from exc

    # -- spectra -----------------------------------------------------------------------------------
    def record_spectrum(self, info: SpectrumInfo) -> None:
        """Insert or update what exports show about a spectrum (with the pipeline's view: one transaction)."""
        stamp = now_iso()
        try:
            with self._tx() as cur:
                cur.execute(
                    "INSERT INTO spectra VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(spectrum_key) DO UPDATE SET "
                    "name=excluded.name, path=excluded.path, idx=excluded.idx, survey=excluded.survey, "
                    "object_id=excluded.object_id, ra=excluded.ra, dec=excluded.dec, redshift=excluded.redshift, "
                    "snr=excluded.snr, file_sha256=COALESCE(excluded.file_sha256, file_sha256), "
                    "updated_at=excluded.updated_at",
                    tuple(storable_text(a) for a in (info.spectrum_key, info.name, info.path, info.index, info.survey,
                                                     info.object_id, info.ra, info.dec, info.redshift, info.snr,
                                                     info.file_sha256, stamp)))
                cur.execute(
                    "INSERT OR REPLACE INTO spectrum_pipeline VALUES (?,?,?,?,?,?,?,?,?,?)",
                    tuple(storable_text(a) for a in (info.spectrum_key, info.cls, info.subclass, info.z_err,
                                                     info.zwarn, info.zwarn_name, info.deltachi2, info.survey_snr,
                                                     info.survey_snr_name, stamp)))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: write failed ({exc})") from exc

    def spectrum_info(self, key: str) -> SpectrumInfo | None:
        rows = self._query("SELECT s.*, p.cls, p.subclass, p.z_err, p.zwarn, p.zwarn_name, p.deltachi2, p.survey_snr, "
                           "p.survey_snr_name FROM spectra s LEFT JOIN spectrum_pipeline p USING (spectrum_key) "
                           "WHERE spectrum_key=?", (key,))
        if not rows:
            return None
        r = dict(rows[0])
        r.pop("updated_at")
        r["index"] = r.pop("idx")
        return SpectrumInfo(**r)

    # -- model verdicts ----------------------------------------------------------------------------
    @staticmethod
    def _check_verdict(v: ModelVerdict, rollouts: Sequence[RolloutRecord]) -> None:
        if v.verdict is not None and v.verdict not in VERDICTS:
            raise StoreError(f"model verdict must be YES, NO or None, got {v.verdict!r}")
        if not v.spectrum_key or not v.task:
            raise StoreError("a model verdict needs a spectrum key and a task")
        for r in rollouts:
            if r.verdict is not None and r.verdict not in VERDICTS:
                raise StoreError(f"rollout verdict must be YES, NO or None, got {r.verdict!r}")

    @staticmethod
    def _insert_verdict(cur: sqlite3.Cursor, v: ModelVerdict, rollouts: Sequence[RolloutRecord]) -> int:
        """Insert the verdict row and its rollouts' rows in the caller's transaction; set and return its id."""
        row = (v.spectrum_key, v.task, v.verdict, v.outcome, v.model_id, v.quant, v.text_sha256, v.mmproj_sha256,
               v.prompt_version, v.file_sha256, json.dumps(v.engine_settings, sort_keys=True), v.turns, v.tokens,
               v.seconds, v.zooms, v.detail, v.answer, v.trace_dir, v.created_at, v.app_version, v.rollouts, v.p_yes,
               v.p_yes_token, v.agreement, None if v.abstained is None else int(v.abstained), v.format_failures,
               None if v.outcomes is None else json.dumps(v.outcomes), v.k_max, v.stop_reason)
        cur.execute(f"INSERT INTO model_verdicts ({', '.join(VERDICT_COLUMNS)}) "
                    f"VALUES ({','.join('?' * len(VERDICT_COLUMNS))})", tuple(storable_text(a) for a in row))
        v.id = int(cur.lastrowid or 0)
        for r in rollouts:
            r.verdict_id = v.id
            cur.execute("INSERT INTO rollouts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", tuple(
                storable_text(a) for a in (
                    v.id, r.idx, r.outcome, r.verdict, r.p_yes_token, r.seed, r.temperature, r.top_p, r.top_k,
                    r.turns, r.tokens, r.zooms, r.seconds, r.detail, r.answer, r.trace_dir,
                    json.dumps(r.windows))))
        return v.id

    def record_model_verdict(self, v: ModelVerdict, rollouts: Sequence[RolloutRecord] = ()) -> int:
        """Store one model run and its rollouts (one transaction); returns its id."""
        self._check_verdict(v, rollouts)
        try:
            with self._tx() as cur:
                return self._insert_verdict(cur, v, rollouts)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: write failed: {_sqlite_reason(exc)}") from exc

    def record_claimed_verdict(self, v: ModelVerdict, rollouts: Sequence[RolloutRecord], work: Work,
                               holder: ClaimHolder, *, since_id: int | None) -> int | None:
        """Store a verdict of a run that claimed its spectrum (`claim`) and release the claim, in one transaction.

        ``since_id``: the last verdict id when the run began; when another run recorded this work on this spectrum
        after it (this run was stopped past its lease and its claim taken over), nothing is written and None is
        returned: the first verdict to finish counts. ``since_id`` None (a run asked for explicitly, e.g. the app's
        single-spectrum run) always writes. Any claim on the spectrum for this work is released: the taker of an
        expired claim finds this verdict when it ends.
        """
        self._check_verdict(v, rollouts)
        key = storable_text(v.spectrum_key)
        where = (key, work.task, work.model_id, work.prompt_version, work.rollouts)
        try:
            with self._tx() as cur:
                if since_id is not None and cur.execute(_SCREENED_SINCE, (*where, since_id)).fetchone():
                    cur.execute(f"DELETE FROM claims WHERE {_CLAIM_WHERE} AND run_id=?", (*where, holder.run_id))
                    return None
                vid = self._insert_verdict(cur, v, rollouts)
                if since_id is None:  # a run asked for: it leaves another run's claim alone
                    cur.execute(f"DELETE FROM claims WHERE {_CLAIM_WHERE} AND run_id=?", (*where, holder.run_id))
                else:
                    cur.execute(f"DELETE FROM claims WHERE {_CLAIM_WHERE}", where)
                return vid
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: write failed: {_sqlite_reason(exc)}") from exc

    # -- claims: several runs sharing one store ---------------------------------------------------------------------
    def last_verdict_id(self) -> int:
        """The id of the newest verdict row (0 when none): a run's start mark for `claim`."""
        return int(self._query("SELECT COALESCE(MAX(id), 0) FROM model_verdicts")[0][0])

    def claim(self, key: str, work: Work, holder: ClaimHolder, *, since_id: int, lease_s: float = LEASE_S) -> Claim:
        """Claim spectrum ``key`` for ``work`` by ``holder`` for ``lease_s`` seconds, in one ``BEGIN IMMEDIATE``
        transaction (see module doc).

        ``DONE_ELSEWHERE`` when a verdict of this work on it was recorded after ``since_id``; ``HELD`` when another
        run holds a claim on it that is alive (its lease runs and its process, on this host, exists); else the claim
        is written (a dead run's claim is taken over) and the answer is ``CLAIMED``.
        """
        key = storable_text(key)
        where = (key, work.task, work.model_id, work.prompt_version, work.rollouts)
        try:
            with self._tx() as cur:
                if cur.execute(_SCREENED_SINCE, (*where, since_id)).fetchone():
                    return Claim(DONE_ELSEWHERE)
                row = cur.execute(f"SELECT run_id, host, pid, expires_at FROM claims WHERE {_CLAIM_WHERE}",
                                  where).fetchone()
                now = time.time()
                previous = None
                if row is not None and row[0] != holder.run_id:
                    previous = ClaimHolder(row[0], row[1], int(row[2]))
                    if row[3] > now and not previous.gone():
                        return Claim(HELD, previous)
                cur.execute("INSERT INTO claims VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(spectrum_key, task, model_id, "
                            "prompt_version, rollouts) DO UPDATE SET "
                            "run_id=excluded.run_id, host=excluded.host, pid=excluded.pid, "
                            "claimed_at=excluded.claimed_at, expires_at=excluded.expires_at",
                            (*where, holder.run_id, holder.host, holder.pid, now_iso(), now + lease_s))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: claim failed: {_sqlite_reason(exc)}") from exc
        if previous is not None:
            logger.warning("%s: taking over the claim of a run that is gone (%s)", key, previous)
        return Claim(CLAIMED, previous)

    def renew_claims(self, holder: ClaimHolder, lease_s: float = LEASE_S) -> int:
        """Extend every claim of ``holder`` by ``lease_s`` from now; returns how many it still holds."""
        try:
            with self._tx() as cur:
                cur.execute("UPDATE claims SET expires_at=? WHERE run_id=?", (time.time() + lease_s, holder.run_id))
                return int(cur.rowcount)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: renewing claims failed: {_sqlite_reason(exc)}") from exc

    def release_claims(self, holder: ClaimHolder, keys: Iterable[str] | None = None, work: Work | None = None
                       ) -> None:
        """Drop the claims of ``holder`` (only those on ``keys`` for ``work`` when given): spectra it will not end."""
        try:
            with self._tx() as cur:
                if keys is None or work is None:
                    cur.execute("DELETE FROM claims WHERE run_id=?", (holder.run_id,))
                    return
                for key in keys:
                    cur.execute(f"DELETE FROM claims WHERE {_CLAIM_WHERE} AND run_id=?",
                                (storable_text(key), work.task, work.model_id, work.prompt_version, work.rollouts,
                                 holder.run_id))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: releasing claims failed: {_sqlite_reason(exc)}") from exc

    def claims(self) -> list[tuple[str, Work, ClaimHolder, float]]:
        """Every claim in the store: (spectrum key, work, holder, expiry as a Unix time)."""
        try:
            rows = self._query("SELECT * FROM claims ORDER BY claimed_at")
        except StoreError:  # a read-only store never opened by a version with claims has no such table
            if self.readonly:
                return []
            raise
        return [(r["spectrum_key"], Work(r["task"], r["model_id"], r["prompt_version"], r["rollouts"]),
                 ClaimHolder(r["run_id"], r["host"], r["pid"]), r["expires_at"]) for r in rows]

    def rollouts(self, verdict_id: int) -> list[RolloutRecord]:
        """The rollouts of one model run, in order (none for runs stored before rollouts were)."""
        try:
            rows = self._query("SELECT * FROM rollouts WHERE verdict_id=? ORDER BY idx", (verdict_id,))
        except StoreError:  # a read-only store of schema 1 has no rollouts table
            if self.readonly:
                return []
            raise
        out = []
        for row in rows:
            d = dict(row)
            d["windows"] = stored_json(d["windows"], [], self._where("rollouts", d, "windows"))
            out.append(RolloutRecord(**d))
        return out

    def _where(self, table: str, d: dict[str, Any], column: str) -> str:
        """What a message about a damaged value names: the store, the table, the row and the column."""
        row = d["id"] if d.get("id") is not None else repr(d.get("spectrum_key", "?"))
        return f"{self.path}: {table} row {row}, column {column}"

    def _verdict(self, row: sqlite3.Row) -> ModelVerdict:
        d = dict(row)
        d["engine_settings"] = stored_json(d["engine_settings"], {}, self._where("model_verdicts", d, "engine_settings"))
        if d.get("abstained") is not None:
            d["abstained"] = bool(d["abstained"])
        if d.get("outcomes") is not None:
            d["outcomes"] = stored_json(d["outcomes"], None, self._where("model_verdicts", d, "outcomes"))
        v = ModelVerdict(**d)
        conf = v.confidence()
        if conf is not None:  # rows written before the group outcomes were headed a tie by its first rollout
            v.outcome = conf.outcome
        return v

    def latest_model_verdict(self, key: str, task: str) -> ModelVerdict | None:
        rows = self._query("SELECT * FROM model_verdicts WHERE spectrum_key=? AND task=? ORDER BY id DESC LIMIT 1",
                           (key, task))
        return self._verdict(rows[0]) if rows else None

    def has_model_verdict(self, key: str, task: str, model_id: str, prompt_version: str) -> bool:
        """True when this spectrum was already done for this task with this model and prompt version.

        Runs that were cancelled or hit an engine error do not count (a resumed run retries them).
        """
        marks = ",".join("?" * len(RETRY_OUTCOMES))
        rows = self._query(
            f"SELECT 1 FROM model_verdicts WHERE spectrum_key=? AND task=? AND model_id=? AND prompt_version=? "
            f"AND outcome NOT IN ({marks}) LIMIT 1", (key, task, model_id, prompt_version, *RETRY_OUTCOMES))
        return bool(rows)

    def done_keys(self, task: str, model_id: str, prompt_version: str) -> set[str]:
        """All spectrum keys `has_model_verdict` would report as done (one query, for resuming big batches)."""
        marks = ",".join("?" * len(RETRY_OUTCOMES))
        rows = self._query(
            f"SELECT DISTINCT spectrum_key FROM model_verdicts WHERE task=? AND model_id=? AND prompt_version=? "
            f"AND outcome NOT IN ({marks})", (task, model_id, prompt_version, *RETRY_OUTCOMES))
        return {r[0] for r in rows}

    def done_files(self, task: str, model_id: str, prompt_version: str, rollouts: int | None = None
                   ) -> dict[str, str | None]:
        """`done_keys` with the file sha256 recorded by each key's latest counted run (None when unknown).

        ``rollouts``: only runs of that many rollouts count (rows written before rollouts were stored count as 1); an
        adaptive run (``--rollouts auto``) counts by its budget ``k_max``, whatever number of rollouts it used.
        """
        marks = ",".join("?" * len(RETRY_OUTCOMES))
        k_filter = "" if rollouts is None else " AND COALESCE(k_max, rollouts, 1)=?"
        k_args = () if rollouts is None else (rollouts,)
        rows = self._query(
            f"SELECT spectrum_key, file_sha256 FROM model_verdicts WHERE id IN (SELECT MAX(id) FROM model_verdicts "
            f"WHERE task=? AND model_id=? AND prompt_version=? AND outcome NOT IN ({marks}){k_filter} "
            "GROUP BY spectrum_key)", (task, model_id, prompt_version, *RETRY_OUTCOMES, *k_args))
        return {r[0]: r[1] for r in rows}

    def file_stamps(self) -> dict[str, tuple[int, int, str, int]]:
        """path -> (size, mtime_ns, sha256, stamped_ns) of every file hashed by a batch run."""
        rows = self._query("SELECT path, size, mtime_ns, sha256, stamped_ns FROM file_stamps")
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    def record_file_stamp(self, path: str, size: int, mtime_ns: int, sha256: str, stamped_ns: int) -> None:
        """Remember that ``path`` had ``sha256`` while its size and mtime were these (``stamped_ns``: when seen)."""
        self._write("INSERT INTO file_stamps VALUES (?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET size=excluded.size, "
                    "mtime_ns=excluded.mtime_ns, sha256=excluded.sha256, stamped_ns=excluded.stamped_ns",
                    (path, size, mtime_ns, sha256, stamped_ns))

    def model_verdicts(self, task: str | None = None, *, latest: bool = True) -> list[ModelVerdict]:
        """Model verdicts (latest per spectrum and task by default), oldest first."""
        where = "WHERE task=?" if task else ""
        args = (task,) if task else ()
        if latest:
            sql = (f"SELECT * FROM model_verdicts WHERE id IN (SELECT MAX(id) FROM model_verdicts {where} "
                   "GROUP BY spectrum_key, task) ORDER BY id")
        else:
            sql = f"SELECT * FROM model_verdicts {where} ORDER BY id"
        return [self._verdict(r) for r in self._query(sql, args)]

    def verdict_scores(self, task: str) -> list[tuple[str, float | None, float | None]]:
        """(spectrum key, ``p_yes``, ``p_yes_token``) of the latest model verdict of every spectrum screened for
        ``task``, oldest first, as `model_verdicts` orders them: one query and no row objects (the stopping test
        reads 170,000 of them on each refresh). Runs stored without the fold (schema 1) have no scores (None)."""
        sql = ("SELECT spectrum_key, {cols} FROM model_verdicts WHERE id IN (SELECT MAX(id) FROM model_verdicts "
               "WHERE task=? GROUP BY spectrum_key) ORDER BY id")
        try:
            rows = self._query(sql.format(cols="p_yes, p_yes_token"), (task,))
        except StoreError:  # a read-only store of schema 1 has no such columns
            if not self.readonly:
                raise
            rows = self._query(sql.format(cols="NULL, NULL"), (task,))
        return [(r[0], r[1], r[2]) for r in rows]

    def decision_labels(self, task: str) -> dict[str, str]:
        """Spectrum key -> its latest decision (YES, NO or UNSURE) for ``task``, in the order those decisions were
        made (as `decisions`): one query and no row objects."""
        rows = self._query("SELECT spectrum_key, decision FROM decisions WHERE id IN (SELECT MAX(id) FROM decisions "
                           "WHERE task=? GROUP BY spectrum_key) ORDER BY id", (task,))
        return {r[0]: r[1] for r in rows}

    # -- human decisions ---------------------------------------------------------------------------
    def record_decision(self, d: Decision, *, if_undecided: bool = False) -> int:
        """Store a human decision durably (committed with ``synchronous=FULL`` before returning).

        ``if_undecided``: only when the spectrum has no decision for the task yet, checked in the same transaction
        (several processes recording a benchmark's ground truth write it once); returns 0 when one was there.
        """
        if d.decision not in DECISIONS:
            raise StoreError(f"decision must be one of {', '.join(DECISIONS)}, got {d.decision!r}")
        if not d.spectrum_key or not d.task:
            raise StoreError("a decision needs a spectrum key and a task")
        if (problem := d.fit_problem()) is not None:
            raise StoreError(f"decision not stored: {problem}")
        flags = [str(f).strip() for f in d.flags if str(f).strip()]
        fit = (d.vetter_z, d.z_conf, d.vetter_class, d.vetter_subclass)
        unless = " WHERE NOT EXISTS (SELECT 1 FROM decisions WHERE spectrum_key=? AND task=?)" if if_undecided else ""
        try:
            with self._tx() as cur:  # the decision and the vetter's z and class: both or neither
                cur.execute(
                    "INSERT INTO decisions (spectrum_key, task, decision, flags, comment, vetter, model_verdict_seen, "
                    f"model_verdict_id, decided_at, app_version, evidence) SELECT ?,?,?,?,?,?,?,?,?,?,?{unless}",
                    tuple(storable_text(a) for a in (
                        d.spectrum_key, d.task, d.decision, json.dumps(flags), d.comment or "", d.vetter or "",
                        d.model_verdict_seen, d.model_verdict_id, d.decided_at, d.app_version,
                        evidence_json(d.evidence), *((d.spectrum_key, d.task) if if_undecided else ()))))
                d.id = int(cur.lastrowid or 0) if cur.rowcount > 0 else 0
                if d.id and any(v is not None for v in fit):
                    cur.execute("INSERT OR REPLACE INTO decision_fit VALUES (?,?,?,?,?,?,?,?)",
                                tuple(storable_text(a) for a in (d.spectrum_key, d.task, d.vetter or "", d.decided_at,
                                                                 *fit)))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: write failed: {_sqlite_reason(exc)}") from exc
        return d.id

    def _decision(self, row: sqlite3.Row) -> Decision:
        d = dict(row)
        d["flags"] = stored_json(d["flags"], [], self._where("decisions", d, "flags"))
        # absent in a read-only store of an older schema
        d["evidence"] = evidence_from_json(d.get("evidence"), self._where("decisions", d, "evidence"))
        return Decision(**d)

    def decision(self, key: str, task: str) -> Decision | None:
        """The latest decision on a spectrum for a task."""
        rows = self._query(f"{_DECISION_SELECT} WHERE d.spectrum_key=? AND d.task=? ORDER BY d.id DESC LIMIT 1",
                           (key, task))
        return self._decision(rows[0]) if rows else None

    def decision_history(self, key: str, task: str) -> list[Decision]:
        return [self._decision(r) for r in self._query(
            f"{_DECISION_SELECT} WHERE d.spectrum_key=? AND d.task=? ORDER BY d.id", (key, task))]

    def decisions(self, task: str | None = None) -> list[Decision]:
        """The latest decision per spectrum and task, ordered by when that decision was made."""
        where = "WHERE task=?" if task else ""
        args = (task,) if task else ()
        sql = (f"{_DECISION_SELECT} WHERE d.id IN (SELECT MAX(id) FROM decisions {where} "
               "GROUP BY spectrum_key, task) ORDER BY d.id")
        return [self._decision(r) for r in self._query(sql, args)]

    def decision_count(self, task: str) -> int:
        """How many spectra have a decision for ``task`` (one SQL count, for the queue position shown per switch)."""
        return int(self._query("SELECT COUNT(DISTINCT spectrum_key) FROM decisions WHERE task=?", (task,))[0][0])

    # -- notes (flags and comment) kept apart from decisions ------------------------------------------
    def save_annotation(self, key: str, task: str, flags: list[str], comment: str, vetter: str = "",
                        evidence: Sequence[Evidence] = ()) -> None:
        """Store the vetter's current flags, comment and marked evidence windows on a spectrum at once, decided or
        not (one row, replaced).

        Empty flags, comment and evidence remove the row. The latest decision keeps the notes it was made with;
        readers that want the notes as the vetter left them use `notes`.
        """
        if not key or not task:
            raise StoreError("notes need a spectrum key and a task")
        clean = [str(f).strip() for f in flags if str(f).strip()]
        if not clean and not (comment or "").strip() and not evidence:
            self._write("DELETE FROM annotations WHERE spectrum_key=? AND task=?", (key, task))
            return
        self._write("INSERT INTO annotations (spectrum_key, task, flags, comment, vetter, updated_at, app_version, "
                    "evidence) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(spectrum_key, task) DO UPDATE SET "
                    "flags=excluded.flags, comment=excluded.comment, vetter=excluded.vetter, "
                    "updated_at=excluded.updated_at, app_version=excluded.app_version, evidence=excluded.evidence",
                    (key, task, json.dumps(clean), comment or "", vetter or "", now_iso(), __version__,
                     evidence_json(evidence)))

    def _annotation_rows(self, where: str, args: tuple) -> list[sqlite3.Row]:
        try:
            return self._query(f"SELECT * FROM annotations {where} ORDER BY updated_at", args)
        except StoreError:  # a read-only store of the first schema has no notes table
            if self.readonly:
                return []
            raise

    def _annotation(self, row: sqlite3.Row) -> Annotation:
        d = dict(row)
        d["flags"] = stored_json(d["flags"], [], self._where("annotations", d, "flags"))
        d["evidence"] = evidence_from_json(d.get("evidence"), self._where("annotations", d, "evidence"))
        return Annotation(**d)

    def annotation(self, key: str, task: str) -> Annotation | None:
        rows = self._annotation_rows("WHERE spectrum_key=? AND task=?", (key, task))
        return self._annotation(rows[0]) if rows else None

    def annotations(self, task: str | None = None) -> list[Annotation]:
        """Every stored note (per spectrum and task), oldest change first."""
        rows = self._annotation_rows("WHERE task=?" if task else "", (task,) if task else ())
        return [self._annotation(r) for r in rows]

    def notes(self, key: str, task: str) -> Notes:
        """(flags, comment, evidence) as the vetter last left them: the newer of the stored notes and the latest
        decision."""
        ann, dec = self.annotation(key, task), self.decision(key, task)
        if ann is not None and (dec is None or ann.updated_at >= dec.decided_at):
            return Notes(list(ann.flags), ann.comment, list(ann.evidence))
        if dec is not None:
            return Notes(list(dec.flags), dec.comment, list(dec.evidence))
        return Notes([], "", [])

    # -- audit draws (speco3.vetting.stopping) ---------------------------------------------------------------------
    def _audit_rows(self, sql: str, args: tuple) -> list[sqlite3.Row]:
        try:
            return self._query(sql, args)
        except StoreError:  # a read-only store written before audit draws has no such tables
            if self.readonly:
                return []
            raise

    def audit_frame(self, task: str) -> list[str]:
        """The frame of the task's audit draw in its random order (empty without a draw)."""
        return [r[0] for r in self._audit_rows(
            "SELECT spectrum_key FROM audit_frame WHERE task=? ORDER BY position", (task,))]

    def audit_draws(self, task: str) -> list[dict[str, Any]]:
        """The task's draws, first to last: seed, frame size, spectra added, drawn so far, target, vetter, time."""
        return [dict(r) for r in self._audit_rows("SELECT * FROM audit_draws WHERE task=? ORDER BY id", (task,))]

    def create_audit_draw(self, task: str, frame: Sequence[str], seed: int, n: int, *, head: int = 0,
                          recall: float | None = None, confidence: float | None = None, vetter: str = "") -> None:
        """Store the frame of ``task`` in its drawn order and the first draw of ``n`` (one transaction); refused when
        the task has a draw already (a draw is never redrawn: `extend_audit_draw`). ``head``: how many screened
        spectra had a decision then (0: the draw is uniform over the whole screened archive)."""
        if not frame or n <= 0:
            raise StoreError("an audit draw needs a frame and at least one spectrum")
        try:
            with self._tx() as cur:
                if cur.execute("SELECT 1 FROM audit_draws WHERE task=? LIMIT 1", (task,)).fetchone():
                    raise StoreError(f"task {task!r} has an audit draw already: a draw is never redrawn")
                cur.executemany("INSERT INTO audit_frame VALUES (?,?,?)",
                                ((task, i, storable_text(key)) for i, key in enumerate(frame)))
                cur.execute("INSERT INTO audit_draws (task, seed, frame, head, added, drawn, recall, confidence, "
                            "vetter, created_at, app_version) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (task, int(seed), len(frame), head, min(n, len(frame)), min(n, len(frame)), recall,
                             confidence, vetter, now_iso(), __version__))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: write failed ({exc})") from exc

    def extend_audit_draw(self, task: str, n: int, *, recall: float | None = None, confidence: float | None = None,
                          vetter: str = "") -> int:
        """Draw the next ``n`` spectra of the task's sequence (never past the frame); returns how many are drawn."""
        if n <= 0:
            raise StoreError("extend an audit draw by at least one spectrum")
        try:
            with self._tx() as cur:
                last = cur.execute("SELECT seed, frame, drawn, recall, confidence, head FROM audit_draws WHERE task=? "
                                   "ORDER BY id DESC LIMIT 1", (task,)).fetchone()
                if last is None:
                    raise StoreError(f"task {task!r} has no audit draw to extend")
                drawn = min(last[2] + n, last[1])
                cur.execute("INSERT INTO audit_draws (task, seed, frame, head, added, drawn, recall, confidence, "
                            "vetter, created_at, app_version) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (task, last[0], last[1], last[5], drawn - last[2], drawn,
                             last[3] if recall is None else recall, last[4] if confidence is None else confidence,
                             vetter, now_iso(), __version__))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: write failed ({exc})") from exc
        return drawn

    # -- session state -----------------------------------------------------------------------------
    def set_state(self, key: str, value: object) -> None:
        """Store a JSON-serialisable value (e.g. the queue position) for resuming a session."""
        try:
            text = json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"state {key!r} is not JSON-serialisable ({exc})") from exc
        self._write("INSERT INTO state VALUES (?,?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value, "
                    "updated_at=excluded.updated_at", (key, text, now_iso()))

    def get_state(self, key: str, default: object = None) -> object:
        rows = self._query("SELECT value FROM state WHERE key=?", (key,))
        return stored_json(rows[0][0], None, f"{self.path}: state {key!r}") if rows and rows[0][0] else default

    def data_version(self) -> int:
        """A number that changes when another connection (another process: ``spec-o3 decide``, ``vet``, a second
        window) commits to the store, and not for this connection's own writes (SQLite's ``PRAGMA data_version``;
        one cheap read, for views that follow the store)."""
        return int(self._query("PRAGMA data_version")[0][0])

    # -- overview ----------------------------------------------------------------------------------
    def spectrum_keys(self) -> list[str]:
        """Every spectrum key the store holds a model verdict, a decision or notes of, sorted (whether the store
        fits an archive: `speco3.vetting.archive_store.store_fit`)."""
        rows = self._query("SELECT spectrum_key FROM model_verdicts UNION SELECT spectrum_key FROM decisions "
                           "UNION SELECT spectrum_key FROM annotations ORDER BY 1")
        return [r[0] for r in rows]

    #: Columns holding file paths (not spectrum keys) that a relocation re-roots with the keys: what the store knows
    #: of each file, the batch's file stamps, and trace folders kept inside the archive folder.
    RELOCATED_PATHS = (("spectra", "path"), ("file_stamps", "path"), ("model_verdicts", "trace_dir"),
                       ("rollouts", "trace_dir"))

    def relocate_keys(self, old_prefix: str, new_prefix: str, new_root: str) -> dict[str, int]:
        """Re-root every spectrum key (each table's ``spectrum_key``) and every path of `RELOCATED_PATHS` that starts
        with ``old_prefix`` (the old archive folder and a separator) onto ``new_prefix``, and name ``new_root`` as
        the store's archive (`ARCHIVE_ROOT_STATE`), in one write transaction: a process killed in it leaves the
        store as it was. Refuses (`StoreError`, nothing changed) when a key already starts with ``new_prefix`` (the
        two would mix). Returns the rows changed per ``table.column``. The archive check is the caller's
        (`speco3.vetting.archive_store.relocate`)."""
        if not old_prefix or not new_prefix or old_prefix == new_prefix:
            raise StoreError(f"{self.path}: nothing to relocate ({old_prefix!r} -> {new_prefix!r})")
        old, new = storable_text(old_prefix), storable_text(new_prefix)
        changed: dict[str, int] = {}
        try:
            with self._tx() as cur:
                tables = [r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
                keyed = [t for t in tables if any(c[1] == "spectrum_key" for c in cur.execute(
                    f'PRAGMA table_info("{t}")'))]
                for table in keyed:
                    clash = cur.execute(f'SELECT COUNT(*) FROM "{table}" WHERE substr(spectrum_key, 1, ?) = ?',
                                        (len(new), new)).fetchone()[0]
                    if clash:
                        raise StoreError(f"{self.path}: already holds rows of {clash:,} spectrum keys under "
                                         f"{new_prefix} ({table}); not relocated (the two would mix)")
                columns = [(t, "spectrum_key") for t in keyed]
                columns += [(t, c) for t, c in self.RELOCATED_PATHS if t in tables]
                for table, column in columns:
                    cur.execute(f'UPDATE "{table}" SET {column} = ? || substr({column}, ?) '
                                f"WHERE substr({column}, 1, ?) = ?", (new, len(old) + 1, len(old), old))
                    changed[f"{table}.{column}"] = cur.rowcount
                cur.execute("INSERT INTO state VALUES (?,?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value, "
                            "updated_at=excluded.updated_at", (ARCHIVE_ROOT_STATE, json.dumps(new_root), now_iso()))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: relocation failed, the store is as it was: {_sqlite_reason(exc)}") from exc
        return changed

    def tasks(self) -> list[str]:
        rows = self._query("SELECT task FROM model_verdicts UNION SELECT task FROM decisions ORDER BY 1")
        tasks = {r[0] for r in rows} | {a.task for a in self.annotations()}
        return sorted(tasks)

    def summary(self) -> dict[str, Any]:
        """Counts per task: model outcomes (latest per spectrum), human decisions (latest), agreement."""
        out: dict[str, Any] = {"path": str(self.path), "schema": SCHEMA_VERSION, "tasks": {}}
        for task in self.tasks():
            verdicts = self.model_verdicts(task)
            decisions = self.decisions(task)
            outcomes: dict[str, int] = {}
            for v in verdicts:
                outcomes[v.outcome] = outcomes.get(v.outcome, 0) + 1
            counts = {k: sum(d.decision == k for d in decisions) for k in DECISIONS}
            by_key = {v.spectrum_key: v.verdict for v in verdicts}
            both = [(by_key[d.spectrum_key], d.decision) for d in decisions
                    if by_key.get(d.spectrum_key) and d.decision != "UNSURE"]
            out["tasks"][task] = {
                "model_runs": len(verdicts), "model_outcomes": outcomes,
                "model_yes": outcomes.get("YES", 0), "model_no": outcomes.get("NO", 0),
                "decisions": len(decisions), "decided": counts,
                "agree": sum(m == h for m, h in both), "compared": len(both),
                "seconds": round(sum(v.seconds or 0.0 for v in verdicts), 3),
            }
        return out

    def trace_roots(self, extra: Sequence[str | Path] = ()) -> list[Path]:
        """The folders a trace named by this store may be read from, symbolic links followed: the store's own folder
        tree, the data folder's ``traces`` (where the app writes them), the trusted trace roots of the user's
        configuration (`speco3.vetting.trace_roots`: never the store's say) and ``extra`` (the app's chosen data
        folder, a command's ``--trace-root``)."""
        roots = [] if self.is_in_memory else [self.path.absolute().parent]
        roots += [data_dir() / "traces", *trusted_roots(), *map(Path, extra)]
        return [Path(r).expanduser().resolve() for r in roots]

    def trace_folder(self, trace_dir: str, roots: Sequence[str | Path] = ()) -> Path:
        """Where the stored ``trace_dir`` is, refused unless it lies inside `trace_roots` (a store from elsewhere may
        name any folder: ``/etc``, ``~/.ssh``, a link out of its own folder, ``..``).

        A relative one is found beside the store (``vet`` keeps its traces there; an older run stored them relative
        to where it ran: ``night/r_traces/cv/x`` for a store in ``night``); an absolute one that is gone is looked
        for beside the store the same way (a store moved together with its traces), and so is one that exists but is
        outside (a night's folder copied whole: its own copy is read, not the original's).

        Raises
        ------
        TraceOutside
            "not shown: trace folder outside the store's folder (PATH)", before anything there is read; it names
            the resolved folder and the folder the app may offer to trust (`suggest_root`).
        TraceError
            No usable folder name.
        """
        if not isinstance(trace_dir, str) or not trace_dir or "\x00" in trace_dir:
            raise TraceError(f"not shown: no usable trace folder ({trace_dir!r})")
        path = Path(trace_dir).expanduser()
        candidates = [path] if path.is_absolute() and path.exists() else []
        if not self.is_in_memory:  # beside the store: a relative one, or a night's folder moved or copied whole
            folder = self.path.absolute().parent
            parts = Path(trace_dir).parts[1 if Path(trace_dir).is_absolute() else 0:]
            for i in range(len(parts)):  # "night/r_traces/cv/x" stored by a run in the folder above "night"
                beside = folder.joinpath(*parts[i:])
                if ".." not in parts[i:] and beside.exists():
                    candidates.append(beside)
                    break
            if not path.is_absolute():
                candidates.append(folder / path)
        if path.is_absolute() or self.is_in_memory:
            candidates.append(path)
        roots = self.trace_roots(roots)
        for candidate in candidates:
            resolved = candidate.resolve()
            if any(resolved.is_relative_to(root) for root in roots):
                return resolved
        resolved = candidates[0].resolve()
        raise TraceOutside(f"not shown: trace folder outside the store's folder ({trace_dir})", resolved,
                           suggest_root(resolved))

    def load_trace(self, trace_dir: str, roots: Sequence[str | Path] = ()) -> Trace:
        """The trace a verdict or rollout row names (`trace_folder`: only inside `trace_roots`). Raises `TraceError`."""
        folder = self.trace_folder(trace_dir, roots)
        return Trace.load(folder.parent if folder.name == TRACE_FILE else folder)

    #: `path` of a store kept in memory (`in_memory`): nothing of it is on disk until `copy_to` puts it there.
    MEMORY = ":memory:"

    @classmethod
    def in_memory(cls) -> VettingStore:
        """A store that lives in memory only (the app's fallback when its data folder is read-only)."""
        return cls(cls.MEMORY)

    @property
    def is_in_memory(self) -> bool:
        return str(self.path) == self.MEMORY

    def copy_to(self, path: str | Path) -> None:
        """Write this whole store to a new file ``path`` (SQLite's online backup); refuses an existing file."""
        target = Path(path)
        if target.exists():
            raise StoreError(f"{target}: exists already; not replaced by the store kept in memory")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            dest = sqlite3.connect(target)
            try:
                with self._lock:
                    self._db.backup(dest)
            finally:
                dest.close()
        except (sqlite3.Error, OSError) as exc:
            target.unlink(missing_ok=True)
            raise StoreError(f"{target}: cannot write the store there ({exc})") from exc

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:  # pragma: no cover
                logger.exception("closing %s", self.path)

    def __enter__(self) -> VettingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

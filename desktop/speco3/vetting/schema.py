"""The vetting store's SQLite schema and its migrations (`speco3.vetting.store` applies them on open).

The version is ``PRAGMA user_version``. A new store is created at version 1 and migrated step by step like an old
one, so every store, new or old, goes through the same statements. A migration only adds (columns, tables): an
old store keeps every verdict and decision, and the rows written before it read back with the new fields empty.

- 1: spectra, model_verdicts, decisions, state.
- 2: K rollouts per model run — the aggregate on each ``model_verdicts`` row (``rollouts`` K, ``p_yes`` vote
  share, ``p_yes_token`` mean probability on YES at the verdict token, ``agreement``, ``abstained``,
  ``format_failures``, ``outcomes`` JSON list) and one ``rollouts`` row per rollout (its outcome, sampling, cost,
  trace folder and the zoom windows it asked for).
- 3: adaptive rollouts (``--rollouts auto``, `speco3.agent.adaptive`) — ``k_max`` (the budget) and ``stop_reason``
  on each ``model_verdicts`` row (the rollouts that ran are ``rollouts``); rows written before read back with both
  empty.
- 4: the expert's inspection — ``evidence`` on ``decisions`` and ``annotations``: the wavelength windows the vetter
  marked, in order, as a JSON list of ``[lo, hi, label]`` (`speco3.vetting.records.Evidence`); NULL in older rows,
  read as none. The ``annotations`` table (created on open by earlier versions) is created here when missing.
"""

from __future__ import annotations

import sqlite3
from typing import TypeVar, overload

_T = TypeVar("_T")

SCHEMA_VERSION = 4
_SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS spectra (
    spectrum_key TEXT PRIMARY KEY, name TEXT, path TEXT, idx INTEGER, survey TEXT, object_id TEXT,
    ra REAL, dec REAL, redshift REAL, snr REAL, file_sha256 TEXT, updated_at TEXT);
CREATE TABLE IF NOT EXISTS model_verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    spectrum_key TEXT NOT NULL, task TEXT NOT NULL,
    verdict TEXT CHECK (verdict IN ('YES', 'NO') OR verdict IS NULL),
    outcome TEXT NOT NULL, model_id TEXT NOT NULL, quant TEXT, text_sha256 TEXT, mmproj_sha256 TEXT,
    prompt_version TEXT NOT NULL, file_sha256 TEXT, engine_settings TEXT NOT NULL,
    turns INTEGER, tokens INTEGER, seconds REAL, zooms INTEGER, detail TEXT, answer TEXT, trace_dir TEXT,
    created_at TEXT NOT NULL, app_version TEXT);
CREATE INDEX IF NOT EXISTS model_verdicts_key ON model_verdicts (spectrum_key, task, id);
CREATE INDEX IF NOT EXISTS model_verdicts_run ON model_verdicts (task, model_id, prompt_version);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    spectrum_key TEXT NOT NULL, task TEXT NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('YES', 'NO', 'UNSURE')),
    flags TEXT NOT NULL, comment TEXT NOT NULL, vetter TEXT NOT NULL,
    model_verdict_seen TEXT, model_verdict_id INTEGER, decided_at TEXT NOT NULL, app_version TEXT);
CREATE INDEX IF NOT EXISTS decisions_key ON decisions (spectrum_key, task, id);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at TEXT NOT NULL);
"""
#: The notes table as versions before schema 4 created it on open (schema 4 creates it when missing, then extends it).
_ANNOTATIONS_3 = """CREATE TABLE IF NOT EXISTS annotations (
    spectrum_key TEXT NOT NULL, task TEXT NOT NULL, flags TEXT NOT NULL, comment TEXT NOT NULL,
    vetter TEXT NOT NULL, updated_at TEXT NOT NULL, app_version TEXT, PRIMARY KEY (spectrum_key, task))"""
#: Added after schema 1 without a version bump: tables that older versions never read, created on open (the notes
#: table in its current shape, for a store that lacks it whatever its version).
ADDITIVE = {
    # _ANNOTATIONS_3 with migration 4's column (tests/vetting: both ways give the same table)
    "annotations": """CREATE TABLE annotations (
        spectrum_key TEXT NOT NULL, task TEXT NOT NULL, flags TEXT NOT NULL, comment TEXT NOT NULL,
        vetter TEXT NOT NULL, updated_at TEXT NOT NULL, app_version TEXT, evidence TEXT,
        PRIMARY KEY (spectrum_key, task))""",
    # the audit draw of a task (`speco3.vetting.stopping`): the frame (the screened spectra without a decision at the
    # first draw) in its seeded random order, and one row per draw (the first, then each extension: never redrawn)
    "audit_frame": """CREATE TABLE audit_frame (
        task TEXT NOT NULL, position INTEGER NOT NULL, spectrum_key TEXT NOT NULL,
        PRIMARY KEY (task, position), UNIQUE (task, spectrum_key))""",
    "audit_draws": """CREATE TABLE audit_draws (
        id INTEGER PRIMARY KEY AUTOINCREMENT, task TEXT NOT NULL, seed INTEGER NOT NULL, frame INTEGER NOT NULL,
        head INTEGER NOT NULL, added INTEGER NOT NULL, drawn INTEGER NOT NULL, recall REAL, confidence REAL,
        vetter TEXT NOT NULL,
        created_at TEXT NOT NULL, app_version TEXT)""",
    # what a file's sha256 was when it had this size and mtime (a resumed batch hashes only files that changed)
    "file_stamps": """CREATE TABLE file_stamps (
        path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL,
        stamped_ns INTEGER NOT NULL)""",
    # which run is screening a spectrum now (`VettingStore.claim`): several runs on one store share the work; a
    # finished verdict deletes its claim, a killed run's claims are taken over (its lease ran out or its pid is gone)
    "claims": """CREATE TABLE claims (
        spectrum_key TEXT NOT NULL, task TEXT NOT NULL, model_id TEXT NOT NULL, prompt_version TEXT NOT NULL,
        rollouts INTEGER NOT NULL, run_id TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
        claimed_at TEXT NOT NULL, expires_at REAL NOT NULL,
        PRIMARY KEY (spectrum_key, task, model_id, prompt_version, rollouts))""",
    # the survey pipeline's view of a spectrum beside the `spectra` row (issue #44): class, subclass, z error,
    # warning bits and their name, redrock's DELTACHI2, the survey's own S/N and its name (exports carry them)
    "spectrum_pipeline": """CREATE TABLE spectrum_pipeline (
        spectrum_key TEXT PRIMARY KEY, cls TEXT, subclass TEXT, z_err REAL, zwarn INTEGER, zwarn_name TEXT,
        deltachi2 REAL, survey_snr REAL, survey_snr_name TEXT, updated_at TEXT)""",
    # the vetter's own redshift, confidence 0-4 and class with a decision (issue #44), keyed as merge identifies a
    # decision (its ids are renumbered by a merge)
    "decision_fit": """CREATE TABLE decision_fit (
        spectrum_key TEXT NOT NULL, task TEXT NOT NULL, vetter TEXT NOT NULL, decided_at TEXT NOT NULL,
        z REAL, z_conf INTEGER CHECK (z_conf BETWEEN 0 AND 4 OR z_conf IS NULL), cls TEXT, subclass TEXT,
        PRIMARY KEY (spectrum_key, task, vetter, decided_at))""",
}

_ROLLOUT_COLUMNS = ("rollouts INTEGER", "p_yes REAL", "p_yes_token REAL", "agreement REAL", "abstained INTEGER",
                    "format_failures INTEGER", "outcomes TEXT")
#: version -> the statements that bring a store of the version before up to it.
MIGRATIONS: dict[int, list[str]] = {
    1: [s for s in _SCHEMA_1.split(";") if s.strip()],
    2: [*(f"ALTER TABLE model_verdicts ADD COLUMN {c}" for c in _ROLLOUT_COLUMNS),
        """CREATE TABLE rollouts (
            verdict_id INTEGER NOT NULL REFERENCES model_verdicts(id), idx INTEGER NOT NULL,
            outcome TEXT NOT NULL, verdict TEXT CHECK (verdict IN ('YES', 'NO') OR verdict IS NULL),
            p_yes_token REAL, seed INTEGER, temperature REAL, top_p REAL, top_k INTEGER,
            turns INTEGER, tokens INTEGER, zooms INTEGER, seconds REAL, detail TEXT, answer TEXT, trace_dir TEXT,
            windows TEXT NOT NULL, PRIMARY KEY (verdict_id, idx))"""],
    3: ["ALTER TABLE model_verdicts ADD COLUMN k_max INTEGER", "ALTER TABLE model_verdicts ADD COLUMN stop_reason TEXT"],
    4: ["ALTER TABLE decisions ADD COLUMN evidence TEXT", _ANNOTATIONS_3,
        "ALTER TABLE annotations ADD COLUMN evidence TEXT"],
}


def migrate(cur: sqlite3.Cursor) -> int:
    """Apply every migration after the store's version inside the caller's (write) transaction, reading the version
    there (another process may have migrated since it was first read); return the version it had."""
    version = cur.execute("PRAGMA user_version").fetchone()[0]
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for stmt in MIGRATIONS[target]:
            cur.execute(stmt)
        cur.execute(f"PRAGMA user_version={target}")
    return version


def additive(have: set[str]) -> list[str]:
    """Statements creating the tables of `ADDITIVE` that the store does not have yet."""
    return [ADDITIVE[name] for name in sorted(set(ADDITIVE) - have)]


#: The columns of a model verdict row, in the order `VettingStore.record_model_verdict` writes them.
VERDICT_COLUMNS = (
    "spectrum_key", "task", "verdict", "outcome", "model_id", "quant", "text_sha256", "mmproj_sha256",
    "prompt_version", "file_sha256", "engine_settings", "turns", "tokens", "seconds", "zooms", "detail", "answer",
    "trace_dir", "created_at", "app_version", "rollouts", "p_yes", "p_yes_token", "agreement", "abstained",
    "format_failures", "outcomes", "k_max", "stop_reason")


@overload
def storable_text(value: str) -> str: ...
@overload
def storable_text(value: _T) -> _T: ...
def storable_text(value: object) -> object:
    """``value`` as SQLite can store it: a str with lone surrogates gets them as ``\\udXXX`` escapes.

    Lone surrogates come from model output and from file names that are not valid UTF-8 (Python's
    surrogateescape); sqlite3 refuses them with a UnicodeEncodeError. Writes and lookups both go through
    this function, so a key is found again. Other values are returned unchanged.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value

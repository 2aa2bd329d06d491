"""Merging vetting stores: the shards of a split ``spec-o3 vet`` run, or the stores of several vetters, into one.

`merge_stores(out, inputs)` reads every input read-only (they are never modified) and writes ``out`` in one SQLite
transaction: an interrupted or failed merge leaves ``out`` as it was. What is merged:

* model verdicts, each run once: a run found in two stores (the same store merged twice, a shard merged again) is
  a duplicate and kept once; runs on the same spectrum that differ are all kept (the history is append-only). Each
  run comes with everything stored about it: its engine settings and model provenance (columns of its row), its
  fold over K rollouts, and its ``rollouts`` rows (one per rollout: outcome, sampling, cost, trace, zoom windows),
  renumbered to the run's new id;
* human decisions likewise; their link to the model verdict the vetter saw follows the verdict's new id. When the
  stores' latest decisions on one spectrum and task differ (one vetter said YES, another NO), that is a conflict:
  it is reported and, by default, nothing is written; ``on_conflict="latest"`` merges anyway and the decision made
  last becomes the latest one (the others stay in the history), still reporting each conflict;
* notes (flags and comment, one per spectrum and task): the newest edit wins; spectra rows: the newest, keeping a
  known file sha256; file stamps: the newest per path; session state: the newest per key;
* trace folders (of runs and of their rollouts): a relative ``trace_dir`` is resolved against the folder of the store it comes from when the
  trace is there (``spec-o3 vet --out results.sqlite`` writes ``results_traces/`` beside it), so the merged store
  points at the traces wherever it is read from; traces found nowhere are counted. The traces folders found in an
  input's own folder tree are listed (``trace_folders``) for the command to trust when OUT lies elsewhere.

Rows are renumbered in time order (model runs by ``created_at``, decisions by ``decided_at``, each store's own
order kept), because the store takes the highest id as the latest.
"""

from __future__ import annotations

import heapq
import logging
import os
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speco3.errors import StoreError
from speco3.vetting.store import SCHEMA_VERSION, VettingStore
from speco3.vetting.trace_roots import RootRefused, check_root

logger = logging.getLogger(__name__)

ON_CONFLICT = ("fail", "latest")
# the columns that make a model run or a decision what it is (ids are per store; trace paths may be rewritten)
_VERDICT_ID = ("spectrum_key", "task", "verdict", "outcome", "model_id", "quant", "text_sha256", "mmproj_sha256",
               "prompt_version", "file_sha256", "engine_settings", "turns", "tokens", "seconds", "zooms", "detail",
               "answer", "created_at", "app_version")
_DECISION_ID = ("spectrum_key", "task", "decision", "flags", "comment", "vetter", "model_verdict_seen", "decided_at",
                "app_version")
# keyed tables: (table, primary key columns, column that says which row is newest)
_KEYED = (("annotations", ("spectrum_key", "task"), "updated_at"), ("spectra", ("spectrum_key",), "updated_at"),
          ("file_stamps", ("path",), "stamped_ns"), ("state", ("key",), "updated_at"),
          ("spectrum_pipeline", ("spectrum_key",), "updated_at"),
          ("decision_fit", ("spectrum_key", "task", "vetter", "decided_at"), "decided_at"))


@dataclass
class MergeReport:
    out: str
    inputs: list[str]
    verdicts_added: int = 0
    verdicts_duplicate: int = 0
    rollouts_added: int = 0  # rollouts rows of the runs added
    decisions_added: int = 0
    decisions_duplicate: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    notes_replaced: int = 0  # notes on one spectrum that differed between stores: the newest was kept
    traces_resolved: int = 0
    traces_missing: int = 0
    # the folders of the traces the merged store names that lie in an input's own folder tree (each input's traces
    # folder): `speco3.cli.merge` records those outside OUT's folder as trusted trace folders (`adopt_traces`)
    trace_folders: list[str] = field(default_factory=list)
    written: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Source:
    name: str
    folder: Path
    tables: dict[str, list[dict[str, Any]]]
    rollouts: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # run id -> its rollouts, in order
    trustable: bool = False  # its folder could be a trusted trace root (not /, the home folder or above it)

    def __post_init__(self):
        try:
            self.trustable = bool(check_root(self.folder))
        except RootRefused:
            self.trustable = False
        for r in self.tables["rollouts"]:
            self.rollouts.setdefault(r["verdict_id"], []).append(r)


def _read(path: Path, name: str) -> _Source:
    """All rows of a store, read-only: the file is never written, and no -wal/-shm file is left beside it.

    A store closed cleanly has no -wal file and is read as immutable (SQLite creates nothing then); one with a
    -wal file (open in another program, or not closed) is read with ``mode=ro``, which includes what the -wal holds.
    """
    if not path.is_file():
        raise StoreError(f"{path}: no such vetting store")
    wal = path.with_name(path.name + "-wal")
    mode = "mode=ro" if wal.exists() and wal.stat().st_size > 0 else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(f"file:{path.resolve().as_posix()}?{mode}", uri=True, timeout=30)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open ({exc})") from exc
    try:
        db.row_factory = sqlite3.Row
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0 or version > SCHEMA_VERSION:
            why = "not a vetting store" if version == 0 else f"written by a newer Spec-o3 (schema {version})"
            raise StoreError(f"{path}: {why}")
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        tables = {}
        for table in ("model_verdicts", "decisions", "rollouts", *(t for t, _, _ in _KEYED)):
            order = {"model_verdicts": " ORDER BY id", "decisions": " ORDER BY id",
                     "rollouts": " ORDER BY verdict_id, idx"}.get(table, "")
            tables[table] = ([dict(r) for r in db.execute(f"SELECT * FROM {table}{order}")]  # noqa: S608
                             if table in have else [])
        return _Source(name, path.resolve().parent, tables)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: not a usable vetting store ({exc})") from exc
    finally:
        db.close()


def _by_time(sources: list[_Source], table: str, column: str):
    """(source index, row) of ``table`` in time order, each store's own order kept."""
    runs = [[((r[column] or ""), i, n, r) for n, r in enumerate(s.tables[table])] for i, s in enumerate(sources)]
    for _t, i, _n, row in heapq.merge(*runs, key=lambda x: x[:3]):
        yield i, row


def _trace(row: dict[str, Any], source: _Source, report: MergeReport) -> None:
    if not row.get("trace_dir"):
        return
    p = Path(row["trace_dir"])
    if not p.is_absolute() and (source.folder / p).is_dir():
        row["trace_dir"] = str((source.folder / p).resolve())
        report.traces_resolved += 1
    elif not Path(row["trace_dir"]).is_dir():
        report.traces_missing += 1
        return
    folder = Path(row["trace_dir"]).resolve()  # in the input's folder tree: the input's own traces
    if folder.is_relative_to(source.folder) and source.trustable:
        root = folder.parent.parent if folder.parent.parent.is_relative_to(source.folder) else source.folder
        if str(root) not in report.trace_folders:
            report.trace_folders.append(str(root))


def _conflicts(sources: list[_Source]) -> list[dict[str, Any]]:
    """Spectra and tasks whose latest decision differs between stores.

    A store's latest decision that another store holds with a later decision after it (a copy of the store that
    was vetted on) is superseded there, not in conflict.
    """
    latest: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    superseded: set[tuple] = set()
    for s in sources:
        history: dict[tuple[str, str], list[tuple]] = {}
        for row in s.tables["decisions"]:  # in id order: the last one seen is the store's latest
            k = (row["spectrum_key"], row["task"])
            latest.setdefault(k, {})[s.name] = row
            history.setdefault(k, []).append(tuple(row[c] for c in _DECISION_ID))
        superseded.update(ident for rows in history.values() for ident in rows[:-1])
    out = []
    for (key, task), rows in latest.items():
        live = {name: r for name, r in rows.items() if tuple(r[c] for c in _DECISION_ID) not in superseded}
        if len({r["decision"] for r in live.values()}) > 1:
            out.append({"spectrum_key": key, "task": task, "decisions": [
                {"store": name, "decision": r["decision"], "vetter": r["vetter"], "decided_at": r["decided_at"]}
                for name, r in live.items()]})
    return out


def _keyed(sources: list[_Source], table: str, pk: tuple[str, ...], newest: str, report: MergeReport) -> list[dict]:
    merged: dict[tuple, dict[str, Any]] = {}
    for s in sources:
        for row in s.tables[table]:
            k = tuple(row[c] for c in pk)
            old = merged.get(k)
            if old is None or (row[newest] or 0) > (old[newest] or 0):
                if table == "annotations" and old is not None and (
                        old["flags"], old["comment"], old.get("evidence")) != (
                        row["flags"], row["comment"], row.get("evidence")):
                    report.notes_replaced += 1
                if table == "spectra" and old is not None and row.get("file_sha256") is None:
                    row = {**row, "file_sha256": old.get("file_sha256")}
                merged[k] = row
    return list(merged.values())


def merge_stores(out: str | os.PathLike, inputs: list[str | os.PathLike], on_conflict: str = "fail") -> MergeReport:
    """Merge the vetting stores ``inputs`` into ``out`` (created when missing; its own rows are kept). See module doc.

    Raises
    ------
    StoreError
        An input or ``out`` is not a usable store, ``out`` is also an input, or the write failed (``out`` is then
        unchanged).
    """
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f"on_conflict must be one of {ON_CONFLICT}, got {on_conflict!r}")
    out = Path(out)
    paths = [Path(p) for p in inputs]
    if not paths:
        raise StoreError("nothing to merge: name at least one input store")
    for p in paths:
        if out.exists() and p.exists() and os.path.samefile(p, out):
            raise StoreError(f"{p}: the output store cannot also be an input")
    report = MergeReport(out=str(out), inputs=[str(p) for p in paths])
    sources = [_read(p, str(p)) for p in paths]
    if out.exists():
        sources.insert(0, _read(out, str(out)))
    report.conflicts = _conflicts(sources)
    if report.conflicts and on_conflict == "fail":
        return report
    VettingStore(out).close()  # creates it (schema, WAL) or checks it is a store we may write
    _write(out, sources, report)
    report.written = True
    return report


def _write(out: Path, sources: list[_Source], report: MergeReport) -> None:
    verdicts: list[dict[str, Any]] = []
    rollouts: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for i, row in _by_time(sources, "model_verdicts", "created_at"):
        ident = tuple(row[c] for c in _VERDICT_ID)
        if ident in seen:
            report.verdicts_duplicate += 1
            continue
        seen.add(ident)
        new = {**row, "id": len(verdicts) + 1}
        _trace(new, sources[i], report)
        verdicts.append(new)
        for r in sources[i].rollouts.get(row["id"], []):
            r = {**r, "verdict_id": new["id"]}
            _trace(r, sources[i], report)
            rollouts.append(r)
    new_id = _verdict_ids(sources, verdicts)
    seen_d: set[tuple] = set()
    for i, row in _by_time(sources, "decisions", "decided_at"):
        ident = tuple(row[c] for c in _DECISION_ID)
        if ident in seen_d:
            report.decisions_duplicate += 1
            continue
        seen_d.add(ident)
        link = row["model_verdict_id"]
        decisions.append({**row, "id": len(decisions) + 1,
                          "model_verdict_id": new_id.get((i, link)) if link is not None else None})
    own = len(sources[0].tables["model_verdicts"]) if sources[0].name == report.out else 0
    own_d = len(sources[0].tables["decisions"]) if sources[0].name == report.out else 0
    report.verdicts_added = len(verdicts) - own
    report.rollouts_added = len(rollouts) - (len(sources[0].tables["rollouts"]) if sources[0].name == report.out
                                             else 0)
    report.decisions_added = len(decisions) - own_d
    keyed = {t: _keyed(sources, t, pk, newest, report) for t, pk, newest in _KEYED}
    db = sqlite3.connect(out, timeout=30, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM rollouts")  # before the runs they refer to
        for table, rows in (("model_verdicts", verdicts), ("rollouts", rollouts), ("decisions", decisions),
                            *keyed.items()):
            db.execute(f"DELETE FROM {table}")  # noqa: S608
            if rows:
                cols = list(dict.fromkeys(c for r in rows for c in r))  # stores of older schemas lack columns
                db.executemany(f"INSERT INTO {table} ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",  # noqa: S608
                               [tuple(r.get(c) for c in cols) for r in rows])
        db.execute("COMMIT")
    except sqlite3.Error as exc:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise StoreError(f"{out}: merge not written, the store is unchanged ({exc})") from exc
    finally:
        db.close()


def _verdict_ids(sources: list[_Source], verdicts: list[dict[str, Any]]) -> dict[tuple[int, int], int]:
    """(source index, id in that store) → id in the merged store, duplicates mapped to the run that was kept."""
    by_ident = {tuple(v[c] for c in _VERDICT_ID): v["id"] for v in verdicts}
    return {(i, row["id"]): by_ident[tuple(row[c] for c in _VERDICT_ID)]
            for i, s in enumerate(sources) for row in s.tables["model_verdicts"]}

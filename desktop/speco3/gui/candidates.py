"""Candidate lists: a CSV, FITS or VOTable table of candidates matched to the archive index (no Qt).

A candidate is matched by the first identifying column found, in this order: file name (``file_name``,
``filename``, ``file``, ``path``, ``spec``), object/observation id (``obsid``, ``obs_id``, ``object_id``,
``targetid``, ``target_id``, ``objid``, ``specobjid``). File names match the entry's file name or key (a
``#N`` suffix selects one spectrum of a multi-spectrum file); ids match the index's ``object_id``. Rows that match
nothing are reported, not dropped silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from speco3.errors import Speco3Error
from speco3.spectra.index import ArchiveIndex, IndexEntry

log = logging.getLogger(__name__)

NAME_COLUMNS = ("file_name", "filename", "file", "path", "spec", "spectrum", "key")
ID_COLUMNS = ("obsid", "obs_id", "object_id", "targetid", "target_id", "objid", "specobjid")
_FORMATS = {".csv": "ascii.csv", ".ecsv": "ascii.ecsv", ".txt": "ascii", ".tsv": "ascii.tab",
            ".fits": "fits", ".fit": "fits", ".fits.gz": "fits", ".vot": "votable", ".xml": "votable",
            ".votable": "votable"}


class CandidateListError(Speco3Error):
    """A candidate list cannot be read or has no identifying column."""


@dataclass
class CandidateMatch:
    """The entries a candidate list resolved to, in list order, and what did not match."""

    column: str
    entries: list[IndexEntry] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)


def _format_for(path: Path) -> str | None:
    low = path.name.lower()
    for ext, fmt in sorted(_FORMATS.items(), key=lambda kv: -len(kv[0])):
        if low.endswith(ext):
            return fmt
    return None


def read_candidate_values(path: str | Path) -> tuple[str, list[str]]:
    """(column name, identifying values as strings) of a candidate table."""
    from astropy.table import Table

    path = Path(path)
    try:
        table = Table.read(path, format=_format_for(path)) if _format_for(path) else Table.read(path)
    except Exception as exc:
        raise CandidateListError(f"{path}: cannot read as a CSV, FITS or VOTable table ({exc})") from exc
    lower = {c.lower(): c for c in table.colnames}
    for wanted in NAME_COLUMNS + ID_COLUMNS:
        if wanted in lower:
            col = lower[wanted]
            values = [str(v).strip() for v in table[col] if str(v).strip() not in ("", "--")]
            return wanted, values
    raise CandidateListError(
        f"{path}: no column to identify spectra; expected one of {', '.join(NAME_COLUMNS + ID_COLUMNS)} "
        f"(found {', '.join(table.colnames) or 'none'})")


def match_candidates(path: str | Path, index: ArchiveIndex, page: int = 5000) -> CandidateMatch:
    """Resolve a candidate list against an `ArchiveIndex` (see module doc)."""
    column, values = read_candidate_values(path)
    by_name: dict[str, list[IndexEntry]] = {}
    by_id: dict[str, list[IndexEntry]] = {}
    offset = 0
    while True:
        rows = index.query(limit=page, offset=offset, sort="key")
        for e in rows:
            if e.error:
                continue
            by_name.setdefault(str(e.key), []).append(e)
            if e.file_name:
                by_name.setdefault(e.file_name, []).append(e)
                by_name.setdefault(e.file_name.removesuffix(".gz"), []).append(e)
            if e.object_id:
                by_id.setdefault(str(e.object_id).strip(), []).append(e)
        if len(rows) < page:
            break
        offset += page
    out = CandidateMatch(column)
    seen: set[str] = set()
    for value in values:
        if column in ID_COLUMNS:
            found = by_id.get(value) or by_id.get(value.removesuffix(".0"), [])
        else:
            name, _, sel = value.partition("#")
            base = PurePath(name).name
            found = by_name.get(value) or by_name.get(base) or by_name.get(base.removesuffix(".gz"), [])
            if sel:
                found = [e for e in found if str(e.index) == sel]
        if not found:
            out.unmatched.append(value)
        for e in found:
            if e.key not in seen:
                seen.add(e.key)
                out.entries.append(e)
    log.info("candidate list %s: %d entries, %d unmatched", path, len(out.entries), len(out.unmatched))
    return out

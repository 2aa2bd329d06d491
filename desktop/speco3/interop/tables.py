"""Tables and look-ups for SAMP: the candidate table sent to TOPCAT, and the spectrum nearest a sky position.

A candidate table has one row per spectrum with its identity and position, the latest model verdict, ``p_yes``,
K, agreement and ``abstained`` where the store holds them, and the human decision with flags and comment. Row ``i`` of the table is
``keys[i]``, so that TOPCAT's ``table.highlight.row`` / ``table.select.rowList`` come back to the same spectra.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from speco3.vetting.export import COLUMNS, confidence_fields, rows_table
from speco3.vetting.records import ModelVerdict

if TYPE_CHECKING:
    from astropy.table import Table

    from speco3.spectra.index import ArchiveIndex, IndexEntry
    from speco3.vetting.store import VettingStore

#: Columns of a queue table: the export's (`speco3.vetting.export.COLUMNS`, one description of each) plus the
#: archive key that TOPCAT's row messages come back to and ``p_yes``.
_QUEUE_NAMES = ("name", "path", "hdu_index", "survey", "object_id", "ra", "dec", "redshift", "snr", "task",
                "model_verdict", "model_id", "p_yes", "rollouts", "agreement", "abstained", "decision", "flags",
                "comment")
_EXTRA = {"key": ("key", "str", None, "Archive key of the spectrum (file#index)")}
QUEUE_COLUMNS: list[tuple[str, str, str | None, str]] = [_EXTRA["key"]] + [
    _EXTRA.get(n) or next(c for c in COLUMNS if c[0] == n) for n in _QUEUE_NAMES]


def _p_yes(verdict: ModelVerdict | None) -> float | None:
    p = verdict.p_yes if verdict is not None else None
    try:
        return float(p) if p is not None and math.isfinite(float(p)) else None
    except (TypeError, ValueError):
        return None


def queue_table(entries: Sequence[IndexEntry], store: VettingStore | None, task: str,
                key_of: Callable[[IndexEntry], str]) -> tuple[Table, list[str]]:
    """(table, row keys) of archive index entries with their stored verdicts and decisions for ``task``.

    ``key_of(entry)`` gives the vetting-store key of an entry; the returned keys are the entries' archive keys.
    """
    rows, keys = [], []
    for e in entries:
        skey = key_of(e)
        mv = store.latest_model_verdict(skey, task) if store is not None else None
        dec = store.decision(skey, task) if store is not None else None
        flags, comment, _evidence = store.notes(skey, task) if store is not None else ([], "", [])
        rows.append({
            "key": e.key, "name": e.name, "path": e.path, "hdu_index": e.index, "survey": e.survey,
            "object_id": e.object_id, "ra": e.ra, "dec": e.dec, "redshift": e.redshift, "snr": e.snr, "task": task,
            "model_verdict": mv.verdict if mv else None, "model_id": mv.model_id if mv else None,
            **confidence_fields(mv), "p_yes": _p_yes(mv),
            "decision": dec.decision if dec else None, "flags": ",".join(flags) if flags else None,
            "comment": comment or None,
        })
        keys.append(str(e.key))
    return rows_table(rows, QUEUE_COLUMNS), keys


def store_table(store: VettingStore, task: str | None = None) -> tuple[Table, list[str]]:
    """(table, row keys) of a vetting store's export (`speco3.vetting.export`, ``p_yes`` among its columns)."""
    from speco3.vetting.export import export_table

    table = export_table(store, task)
    return table, [str(k) for k in table["spectrum_key"]]


def separation_deg(ra1: float, dec1: float, ra2: np.ndarray, dec2: np.ndarray) -> np.ndarray:
    """Great-circle distance in degrees (haversine)."""
    r1, d1, r2, d2 = np.radians(ra1), np.radians(dec1), np.radians(ra2), np.radians(dec2)
    h = np.sin((d2 - d1) / 2) ** 2 + np.cos(d1) * np.cos(d2) * np.sin((r2 - r1) / 2) ** 2
    return np.degrees(2 * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0))))


def nearest_entry(index: ArchiveIndex, ra: float, dec: float, radius_arcsec: float) -> tuple[IndexEntry, float] | None:
    """(entry, separation in arcsec) of the archive spectrum nearest (ra, dec) within the radius, or None."""
    candidates = index.near(ra, dec, radius_arcsec / 3600.0)
    if not candidates:
        return None
    sep = separation_deg(ra, dec, np.array([e.ra for e in candidates], dtype=float),
                         np.array([e.dec for e in candidates], dtype=float)) * 3600.0
    best = int(np.argmin(sep))
    return (candidates[best], float(sep[best])) if sep[best] <= radius_arcsec else None

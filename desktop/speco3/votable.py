"""VOTables as this app writes them (exports, the tables and spectra sent over SAMP, the demo's candidate list).

One conversion from an astropy `Table`, so that every VOTable written here passes ``stilts votlint`` without errors
or warnings (tests/interop/test_votlint.py): string columns are variable-length (``arraysize="*"``), never the
``arraysize="1"`` that astropy derives from a column of empty or one-letter strings (deprecated since VOTable 1.3,
Erratum 3), and a missing value is a masked cell, which astropy writes as an empty ``<TD/>`` that STILTS (TOPCAT's
table library) reads as null — not as an empty string in a fixed one-character field ("empty character value is
questionable").
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from astropy.io.votable import from_table
from astropy.io.votable.tree import VOTableFile
from astropy.table import Table


def votable_of(table: Table, name: str | None = None, ucds: Mapping[str, str] | None = None) -> VOTableFile:
    """The VOTable of ``table``; ``name`` names its TABLE, ``ucds`` maps lower-case column names to UCDs."""
    table = table.copy(copy_data=False)  # column meta of the caller's table stays as it was
    for col in table.itercols():
        if col.dtype.kind in "US":
            col.info.meta = {**(col.info.meta or {}), "_votable_arraysize": "*"}
    vot = from_table(table)
    vt = vot.get_first_table()
    if name is not None:
        vt.name = name
    for f in vt.fields:
        if ucds and f.name.lower() in ucds:
            f.ucd = ucds[f.name.lower()]
    return vot


def write_votable(table: Table, path: str | Path, name: str | None = None,
                  ucds: Mapping[str, str] | None = None) -> Path:
    """Write `votable_of` ``table`` to ``path`` (TABLEDATA, UTF-8)."""
    votable_of(table, name, ucds).to_xml(str(path))
    return Path(path)


__all__ = ["votable_of", "write_votable"]

"""Where the suite's real data lives: ``tests/data`` in the repository (origin, licence, sha256: its README.md)."""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data"  # tests/data
SPECTRA = DATA / "spectra"
REFERENCE_RENDERS = DATA / "reference-renders"
PROTOCOL = DATA / "protocol"
README = DATA / "README.md"

_SECTION = re.compile(r"^#{2,3} .*?`([\w/-]+)/`")  # a heading naming a folder: "### `spectra/sdss/`"
_ROW_SHA = re.compile(r"\| `([0-9a-f]{64})` \|\s*$")


def listed_checksums(readme: Path = README) -> dict[str, str]:
    """``{path relative to tests/data: sha256}`` from the README tables (the last cell of a row is the sha256)."""
    out: dict[str, str] = {}
    folder = None
    for line in readme.read_text(encoding="utf-8").splitlines():
        m = _SECTION.match(line)
        if m:
            folder = m.group(1)
            continue
        m = _ROW_SHA.search(line)
        if m and folder:
            name = line.split("|")[1].strip()
            out[f"{folder}/{name}"] = m.group(1)
    return out

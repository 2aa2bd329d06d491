"""Every ``docs/design.md §N`` cited in the sources names a section that exists, and no source cites a design file
outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CITE = re.compile(r"docs/design\.md`{0,2}\s*§(\d+)")


def sources() -> list[Path]:
    roots = [REPO / d for d in ("desktop", "converters", "models", "tests", "benchmarks")]
    return [p for root in roots for p in root.rglob("*.py")]


def test_cited_sections_exist():
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## (\d+)\. ", design, flags=re.M))
    cited = {(p.relative_to(REPO).as_posix(), n) for p in sources() for n in CITE.findall(p.read_text("utf-8"))}
    assert len(cited) >= 8
    assert sorted((f, n) for f, n in cited if n not in sections) == []


def test_no_source_points_outside_the_repository():
    outside = re.compile(r"(?<![\w/])DESIGN\.md|shared/(?:protocol|spectra|reference-renders)|notes/llama-stack[.]md")
    hits = [p.relative_to(REPO).as_posix() for p in sources() if outside.search(p.read_text("utf-8"))]
    assert hits == []

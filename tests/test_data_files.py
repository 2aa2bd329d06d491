"""tests/data is complete and unchanged: every file is listed in its README with the right sha256, and every
listed file is there."""

from __future__ import annotations

import hashlib

import pytest

from speco3_testkit.testdata import DATA, listed_checksums


def on_disk() -> set[str]:
    return {p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and p.name != "README.md"}


def test_every_file_is_listed_and_every_listed_file_exists():
    listed = set(listed_checksums())
    assert len(listed) == 63
    assert sorted(on_disk() - listed) == [], "files in tests/data without a README row (origin, licence, sha256)"
    assert sorted(listed - on_disk()) == [], "README rows without their file in tests/data"


@pytest.mark.parametrize("rel", sorted(listed_checksums()))
def test_sha256_matches_the_readme(rel):
    assert hashlib.sha256((DATA / rel).read_bytes()).hexdigest() == listed_checksums()[rel]


def test_readme_rows_are_read_by_folder_heading_and_first_cell(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("## Intro (`spectra/`)\n### `spectra/sdss/`\n| a.fits | `<\\|x\\|>` | `" + "1" * 64 + "` |\n"
                      "| not a row | `" + "2" * 63 + "` |\n### `protocol/`\n| b.txt | y | `" + "0" * 64 + "` |\n",
                      encoding="utf-8")
    assert listed_checksums(readme) == {"spectra/sdss/a.fits": "1" * 64, "protocol/b.txt": "0" * 64}

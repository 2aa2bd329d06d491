"""The export registry drives ``spec-o3 export``: every registered format is an option, and a new format is one
entry (a JSON export registered here is written by the command line without touching it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from astropy.table import Table

from speco3.cli import main
from speco3.errors import StoreError
from speco3.vetting import VettingStore
from speco3.vetting import export_formats as registry
from speco3.vetting.export import export_rows
from speco3.vetting.export_formats import FORMATS, ExportFormat, ExportOptions, export_format


def write_json(store: VettingStore, out: str | Path, options: ExportOptions) -> Path:
    out = Path(out)
    out.write_text(json.dumps(export_rows(store, options.task), default=str), encoding="utf-8")
    return out


JSON = ExportFormat("json", "JSON rows", "json", "the rows as JSON", write_json)


@pytest.fixture
def with_json():
    registry.register(JSON)
    try:
        yield FORMATS
    finally:
        del FORMATS["json"]


def test_the_formats_in_menu_order_and_a_name_is_registered_once():
    assert [(f.name, f.extension) for f in FORMATS.values()] == [("csv", "csv"), ("votable", "vot"),
                                                                 ("fits", "fits"), ("html", "html")]
    with pytest.raises(ValueError, match="registered already"):
        registry.register(FORMATS["csv"])
    with pytest.raises(StoreError, match="unknown export format 'xlsx' \\(csv, votable, fits, html\\)"):
        export_format("xlsx")


def test_every_registered_format_is_a_cli_option(filled_store, tmp_path, capsys):
    outs = {name: tmp_path / f"out.{fmt.extension}" for name, fmt in FORMATS.items()}
    args = [a for name, out in outs.items() for a in (f"--{name}", str(out))]
    assert main(["export", str(filled_store.path), *args]) == 0
    said = capsys.readouterr().out
    for name, out in outs.items():
        assert f"{name}: wrote {out}" in said and out.is_file()
    assert len(Table.read(outs["csv"], format="ascii.csv")) == 5
    assert "spec00.fits" in outs["html"].read_text(encoding="utf-8")


def test_a_new_format_is_one_entry_for_the_cli(with_json, filled_store, tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main(["export", str(filled_store.path), "--json", str(out), "--task", "cv"]) == 0
    assert f"json: wrote {out}" in capsys.readouterr().out
    rows = json.loads(out.read_text(encoding="utf-8"))
    assert len(rows) == 5 and {r["task"] for r in rows} == {"cv"}
    assert main(["export", str(filled_store.path)]) == 1
    assert "--json OUT" in capsys.readouterr().err  # the refusal names every format's option

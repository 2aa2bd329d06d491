"""Exports read back by astropy; the HTML report holds every spectrum; writes are atomic."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.table import Table

from speco3.errors import StoreError
from speco3.vetting.export import export, export_table
from speco3.vetting.report import write_report

KEYS = {f"/data/spec{i:02d}.fits#0" for i in range(4)} | {"/data/other.fits#0"}


@pytest.mark.parametrize("name, fmt", [("out.csv", "ascii.csv"), ("out.vot", "votable"), ("out.fits", "fits")])
def test_tables_read_back(filled_store, tmp_path, name, fmt):
    path = export(filled_store, tmp_path / name)
    assert path.stat().st_mode & 0o777 == 0o644
    t = Table.read(path, format=fmt)
    assert len(t) == 5 and set(t["spectrum_key"]) == KEYS
    rows = {r["spectrum_key"]: r for r in t}
    model = {k: str(rows[k]["model_verdict"]) for k in KEYS - {"/data/other.fits#0"}}
    assert set(model.values()) <= {"YES", "NO"} and len(set(model.values())) == 2  # both scripts were used
    r0 = rows["/data/spec00.fits#0"]
    assert r0["decision"] == "YES" and r0["vetter"] == "Ana" and r0["flags"] == "interesting"
    assert r0["model_id"] == "scripted" and len(str(r0["prompt_version"])) == 12 and r0["model_turns"] in (1, 2)
    assert r0["task"] == "cv" and r0["survey"] == "test" and r0["object_id"] == "obj-1"
    other = rows["/data/other.fits#0"]
    assert other["decision"] == "UNSURE"
    assert np.ma.is_masked(other["model_turns"]) or other["model_turns"] is np.ma.masked
    if fmt == "fits":
        assert t["model_seconds"].unit == "s"


def test_export_table_masks_and_rejects_unknown_format(filled_store, tmp_path):
    t = export_table(filled_store, task="cv")
    assert t["decision"].mask.sum() == 2 and t["model_verdict"].mask.sum() == 1
    assert len(export_table(filled_store, task="wd")) == 0
    with pytest.raises(StoreError, match="extension"):
        export(filled_store, tmp_path / "out.xlsx")
    with pytest.raises(StoreError, match="unknown export format"):
        export(filled_store, tmp_path / "out.csv", "parquet")


def test_export_is_atomic(filled_store, tmp_path, monkeypatch):
    target = tmp_path / "out.csv"
    target.write_text("previous export\n")

    def broken(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Table, "write", broken)
    with pytest.raises(StoreError, match="No space left"):
        export(filled_store, target, overwrite=True)  # replacing an export (the CLI's --force)
    assert target.read_text() == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out.csv")) == []


def test_html_report_embeds_everything_escaped(filled_store, tmp_path):
    path = write_report(filled_store, tmp_path / "report.html")
    html = path.read_text(encoding="utf-8")
    for i in range(4):
        assert f"spec{i:02d}.fits" in html
    assert "other.fits" in html and "not run" in html
    assert html.count("data:image/png;base64,") >= 4 + 2  # full views + zooms of the zooming script
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Hα &lt;b&gt;" in html and "Emission at Hα." in html and "Balmer emission &amp; He II." in html
    assert "Ana" in html and "saw model" in html


def test_html_report_with_copied_images_and_missing_trace(filled_store, tmp_path):
    import shutil

    victim = filled_store.latest_model_verdict("/data/spec03.fits#0", "cv").trace_dir
    shutil.rmtree(victim)
    path = write_report(filled_store, tmp_path / "rep" / "report.html", embed_images=False)
    html = path.read_text(encoding="utf-8")
    files = sorted((tmp_path / "rep" / "report_files").iterdir())
    assert len(files) >= 3 and all(f"report_files/{f.name}" in html for f in files)
    assert "data:image/png" not in html and "Trace unavailable" in html


@pytest.mark.parametrize(("given", "written"), [("report/", "report/index.html"), ("existing", "existing/index.html"),
                                               ("report", "report.html"), ("r.html", "r.html")])
def test_html_report_folder_or_file(filled_store, tmp_path, monkeypatch, capsys, given, written):
    """``--html report/`` writes report/index.html; a plain name gets .html; the CLI says where it went."""
    from speco3.cli import main

    (tmp_path / "existing").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(filled_store.path), "--html", given]) == 0
    assert f"html: wrote {written}" in capsys.readouterr().out
    assert (tmp_path / written).is_file() and "spec00.fits" in (tmp_path / written).read_text(encoding="utf-8")
    assert not (tmp_path / "report").is_file()  # the old bug: a file named after the folder

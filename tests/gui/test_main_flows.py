"""Main flows of the desktop app, offscreen: open, index, select, zoom, decide with keys, export, filters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from astropy.table import Table
from PySide6.QtCore import Qt

from speco3.gui.archive_model import COL

pytestmark = pytest.mark.gui


def test_open_folder_indexes_and_fills_table(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    assert w.stack.currentWidget().objectName() == "startPage"
    open_and_wait(w, demo_archive)
    assert w.table_model.loaded_rows() == 20
    assert w.table_model.rowCount() == 20
    first = w.table_model.entry(0)
    assert first.file_name.startswith("spec-60001-SPECO3DEMO")
    assert w.table_model.data(w.table_model.index(0, COL["survey"])) == "LAMOST"
    assert w.vetting.spectrum.n_pixels == 3909
    assert w.stack.currentWidget() is w.viewer
    assert "vacuum" in w.viewer.header.text()
    assert "20 loaded of 20" in w.archive.count.text()


def test_select_row_shows_that_spectrum(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    idx = w.table_model.index(5, 0)
    rect = w.archive.table.visualRect(idx)
    qtbot.mouseClick(w.archive.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert w.vetting.row == 5
    assert w.vetting.spectrum.meta.file_name == w.table_model.entry(5).file_name
    assert w.decision.position.text().startswith("Spectrum 6 of 20")


def test_filters_narrow_the_table(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    w.archive.cls.setText("GALAXY")
    w.archive.apply_filters()
    assert w.table_model.loaded_rows() == 2
    assert {w.table_model.entry(r).cls for r in range(2)} == {"GALAXY"}
    w.archive.cls.setText("")
    w.archive.z_min.setText("0.05")
    w.archive.apply_filters()
    assert w.table_model.loaded_rows() == 2
    w.archive.z_min.setText("")
    w.archive.snr_min.setText("25")
    w.archive.apply_filters()
    assert all(w.table_model.entry(r).snr >= 25 for r in range(w.table_model.loaded_rows()))
    assert 0 < w.table_model.loaded_rows() < 20


def test_zoom_keys_and_frame_toggle(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    lo, hi = w.viewer.x_range()
    assert lo < 3750 and hi > 9000
    key(w, Qt.Key.Key_Equal)  # zoom in
    lo2, hi2 = w.viewer.x_range()
    assert (hi2 - lo2) == pytest.approx((hi - lo) / 2, rel=0.01)
    key(w, Qt.Key.Key_BracketRight)  # pan right
    assert w.viewer.x_range()[0] > lo2
    key(w, Qt.Key.Key_R)
    assert w.viewer.x_range()[1] - w.viewer.x_range()[0] == pytest.approx(hi - lo, rel=0.03)
    key(w, Qt.Key.Key_D)
    assert w.viewer.smoothing == 3
    key(w, Qt.Key.Key_F)
    assert w.viewer.frame == "rest"
    assert "rest frame" in w.viewer.header.text()


def test_keyboard_decisions_are_stored_at_once(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    key(w, Qt.Key.Key_1)  # flag bad spectrum, then YES
    assert w.statusBar().currentMessage() == "notes saved (not decided yet)"
    key(w, Qt.Key.Key_Y)
    assert w.vetting.row == 1  # auto-advance
    assert w.statusBar().currentMessage() == "YES saved for spec-60001-SPECO3DEMO_sp01-001.fits.gz"  # not the old note
    key(w, Qt.Key.Key_N)
    key(w, Qt.Key.Key_U)
    store = w.vetting.store
    decisions = {d.spectrum_key.rsplit("/", 1)[-1]: d for d in store.decisions(w.vetting.task_id)}
    assert len(decisions) == 3
    names = [w.table_model.entry(r).file_name + "#0" for r in range(3)]
    assert [decisions[n].decision for n in names] == ["YES", "NO", "UNSURE"]
    assert decisions[names[0]].flags == ["bad_spectrum"]
    assert decisions[names[0]].vetter == "tester"
    # the table shows the decisions and the state filter uses them
    assert w.table_model.data(w.table_model.index(0, COL["decision"])) == "YES"
    w.archive.state.setCurrentText("undecided")
    assert w.table_model.loaded_rows() == 17


def test_comment_typing_does_not_trigger_keys(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    key(w, Qt.Key.Key_C)
    comment = w.decision.comment
    qtbot.keyClicks(comment, "nice Halpha, check")
    assert comment.text() == "nice Halpha, check"
    qtbot.keyClick(comment, Qt.Key.Key_Return)  # Enter leaves the comment field
    assert w.vetting.store.decisions(w.vetting.task_id) == []  # "n", "y" typed, no decision made
    key(w, Qt.Key.Key_Y)
    d = w.vetting.store.decisions(w.vetting.task_id)[0]
    assert d.comment == "nice Halpha, check" and d.decision == "YES"


@pytest.mark.parametrize("fmt,ext", [("csv", "csv"), ("votable", "vot"), ("fits", "fits")])
def test_export_tables(qtbot, make_window, demo_archive, tmp_path, fmt, ext, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    for k in (Qt.Key.Key_Y, Qt.Key.Key_N):
        key(w, k)
    out = w.export(tmp_path / f"vetting.{ext}", fmt)
    assert out is not None and out.is_file()
    table = Table.read(out, format={"csv": "ascii.csv", "votable": "votable", "fits": "fits"}[fmt])
    got = sorted(str(v) for v in table["decision"])
    assert got == ["NO", "YES"]
    assert set(str(v) for v in table["vetter"]) == {"tester"}
    # decided by hand, no model run: the rows still say which spectrum, where (TOPCAT cross-matches on these)
    assert sorted(str(v) for v in table["name"]) == ["spec-60001-SPECO3DEMO_sp01-001.fits.gz",
                                                     "spec-60001-SPECO3DEMO_sp01-002.fits.gz"]
    assert set(str(v) for v in table["survey"]) == {"LAMOST"}
    assert all(np.isfinite(float(v)) for v in table["ra"]) and all(np.isfinite(float(v)) for v in table["redshift"])


def test_export_html_report(qtbot, make_window, demo_archive, tmp_path, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    key(w, Qt.Key.Key_Y)
    out = w.export(tmp_path / "report.html", "html")
    text = out.read_text(encoding="utf-8")
    assert "YES" in text and "spec-60001-SPECO3DEMO_sp01-001" in text


def test_export_dialog_starts_in_documents_then_the_last_export_folder(qtbot, make_window, demo_archive, tmp_path,
                                                                       open_and_wait, monkeypatch):
    docs = tmp_path / "Documents"
    monkeypatch.setattr("platformdirs.user_documents_dir", lambda: str(docs))
    w = make_window()
    assert w.export_suggestion("csv") == docs / "vetting.csv"  # not the working folder, whatever it is
    open_and_wait(w, demo_archive)
    assert w.export_suggestion("vot") == docs / f"{Path(demo_archive).name}-vetting.vot"
    chosen = tmp_path / "exports" / "mine.csv"
    chosen.parent.mkdir()
    monkeypatch.setattr("speco3.gui.main_window.QFileDialog.getSaveFileName",
                        lambda *a: (str(chosen), "*.csv"))
    w.choose_export("csv")
    assert chosen.is_file()
    assert w.export_suggestion("html") == chosen.parent / f"{Path(demo_archive).name}-vetting.html"


def test_export_refuses_the_store_itself_and_replaces_other_files(qtbot, make_window, demo_archive, tmp_path,
                                                                   open_and_wait, key):
    """The save dialog asked before replacing a file; the store being exported is refused all the same (#42)."""
    w = make_window()
    open_and_wait(w, demo_archive)
    key(w, Qt.Key.Key_Y)
    store = w.vetting.store.path
    before = store.read_bytes()
    assert w.export(store, "csv") is None
    assert "is the vetting store being exported" in w.statusBar().currentMessage()
    assert store.read_bytes() == before and len(w.vetting.store.decisions()) == 1
    old = tmp_path / "old.csv"
    old.write_text("an earlier export\n")
    assert w.export(old, "csv") == old and "YES" in old.read_text()


def test_export_without_archive_is_a_message_not_a_crash(make_window, tmp_path):
    w = make_window()
    assert w.export(tmp_path / "x.csv", "csv") is None
    assert "open an archive first" in w.statusBar().currentMessage()


def test_candidate_list_becomes_the_queue(qtbot, make_window, demo_archive, tmp_path, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    assert w.load_candidates(demo_archive / "candidates.vot") == 14
    assert w.table_model.is_candidate_list
    csv = tmp_path / "ids.csv"
    csv.write_text("obsid,note\n900000012,wd\n900000019,gal\n123,unknown\n")
    assert w.load_candidates(csv) == 2
    assert [w.table_model.entry(r).object_id for r in range(2)] == ["900000012", "900000019"]
    assert "1 not found" in w.statusBar().currentMessage()
    bad = tmp_path / "bad.csv"
    bad.write_text("foo,bar\n1,2\n")
    assert w.load_candidates(bad) == 0
    assert "no column to identify" in w.statusBar().currentMessage()


def test_unreadable_file_in_archive_is_listed_not_fatal(qtbot, make_window, demo_archive, open_and_wait, key):
    (demo_archive / "broken.fits").write_bytes(b"SIMPLE  = T" + b" " * 100)
    w = make_window()
    open_and_wait(w, demo_archive)
    assert w.table_model.loaded_rows() == 21
    row = next(r for r in range(21) if w.table_model.entry(r).file_name == "broken.fits")
    w.vetting.go_to(row)
    assert w.vetting.spectrum is None
    assert "broken.fits" in w.statusBar().currentMessage()
    assert np.size(w.viewer._x) == 0


def test_the_export_menu_lists_the_registry_and_a_new_format_is_one_entry(qtbot, make_window, demo_archive, tmp_path,
                                                                          open_and_wait, key, monkeypatch):
    """The Export menu has one entry per registered format (`speco3.vetting.export_formats`): one registered here
    is offered and written through the save dialog without touching the GUI."""
    import json

    from speco3.vetting import export_formats as registry
    from speco3.vetting.export import export_rows

    def write_json(store, out, options):
        out = Path(out)
        out.write_text(json.dumps(export_rows(store, options.task), default=str), encoding="utf-8")
        return out

    monkeypatch.setitem(registry.FORMATS, "json",
                        registry.ExportFormat("json", "JSON rows", "json", "the rows as JSON", write_json))
    w = make_window()
    open_and_wait(w, demo_archive)
    key(w, Qt.Key.Key_Y)
    menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Export")
    texts = [a.text() for a in menu.actions()]
    assert texts == ["CSV…", "VOTable…", "FITS table…", "HTML audit report…", "JSON rows…"]
    chosen = tmp_path / "rows.json"
    asked = []
    monkeypatch.setattr("speco3.gui.main_window.QFileDialog.getSaveFileName",
                        lambda _w, _title, suggested, pattern: (asked.append((suggested, pattern)), (str(chosen), pattern))[1])
    next(a for a in menu.actions() if a.text() == "JSON rows…").trigger()
    assert asked and asked[0][0].endswith(".json") and asked[0][1] == "*.json"
    rows = json.loads(chosen.read_text(encoding="utf-8"))
    assert [r["decision"] for r in rows if r["decision"]] == ["YES"]

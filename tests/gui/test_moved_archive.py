"""The app and a store made before its archive moved (``mv night1 data/night1``): ``spec-o3-desktop --store``/File →
Open store… on the moved archive re-roots the store (said in the status bar; a question when dialogs are on) and its
verdicts and decisions are shown again; a partial match is refused with the counts and changes nothing."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from speco3.cli import main as cli_main
from speco3.vetting import VettingStore
from speco3.vetting.records import Decision
from speco3.vetting.store import ARCHIVE_ROOT_STATE
from speco3_testkit.spectra import pillow_render, write_csv_archive

pytestmark = pytest.mark.gui

YES = "<think>Emission.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."


@pytest.fixture
def moved(tmp_path):
    """6 CSV spectra screened by ``vet`` (scripted YES), one decided NO with a comment; then the folder moved."""
    old = write_csv_archive(tmp_path / "night1", 6).resolve()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[YES]]}), encoding="utf-8")
    db = tmp_path / "r.sqlite"
    assert cli_main(["vet", str(old), "--task", "cv", "--out", str(db), "--scripted", str(script)],
                    render=pillow_render) == 0
    with VettingStore(db) as store:
        key = store.model_verdicts("cv")[0].spectrum_key
        store.record_decision(Decision(key, "cv", "NO", comment="seen before the move", vetter="Ana"))
    new = tmp_path / "data" / "night1"
    new.parent.mkdir()
    shutil.move(old, new)
    return db, old, new.resolve(), key


def test_a_moved_archive_gets_its_store_back(qtbot, make_window, open_and_wait, moved):
    db, old, new, key = moved
    w = make_window()
    open_and_wait(w, new)
    assert w.open_store(db)
    qtbot.waitUntil(lambda: w.vetting.store is not None and w.vetting.store.path == db.resolve(), timeout=30000)
    moved_key = str(new) + key[len(str(old)):]
    with VettingStore(db, readonly=True) as store:
        assert store.get_state(ARCHIVE_ROOT_STATE) == str(new)
        assert store.decision(moved_key, "cv").comment == "seen before the move"
        assert len(store.model_verdicts("cv")) == 6
    assert w.store_label.text() == "store: r.sqlite"
    m = w.table_model
    shown = {m.data(m.index(r, 0)) for r in range(m.rowCount())}
    assert len(shown) == 6
    assert w.vetting.store.decision(moved_key, "cv").decision == "NO"


def test_a_partial_match_is_refused_with_the_counts(qtbot, make_window, open_and_wait, moved):
    db, old, new, _key = moved
    (new / "s02.csv").unlink()
    con = sqlite3.connect(db)
    before = con.execute("SELECT spectrum_key FROM model_verdicts ORDER BY id").fetchall()
    con.close()
    w = make_window()
    open_and_wait(w, new)
    own = w.vetting.store.path
    assert not w.open_store(db)
    text = w.statusBar().currentMessage()
    assert f"made for {old}, which is not there" in text and "5 found" in text and "1 missing" in text
    assert "--allow-missing" in text and w.vetting.store.path == own
    con = sqlite3.connect(db)
    assert con.execute("SELECT spectrum_key FROM model_verdicts ORDER BY id").fetchall() == before
    con.close()

"""The app and a store made before its archive moved (``mv night1 data/night1``): ``spec-o3-desktop --store``/File →
Open store… on the moved archive re-roots the store (said in the status bar; a question when dialogs are on) and its
verdicts and decisions are shown again; a partial match is refused with the counts and changes nothing. Opening the
moved folder alone does the same for a night's store that moved with it (beside the archive) and for the app's own
store of the old folder."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from speco3.cli import main as cli_main
from speco3.vetting import VettingStore
from speco3.vetting.records import Decision
from speco3.vetting.store import ARCHIVE_ROOT_STATE
from speco3_testkit.spectra import pillow_render, write_csv_archive

pytestmark = pytest.mark.gui

YES = "<think>Emission.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."


def _screened_night(tmp_path, store_name: str):
    """6 CSV spectra in ``night1`` screened by a real ``vet`` (scripted YES) into ``store_name``, one decided NO with
    a comment; (the archive folder, the store, the decided key)."""
    old = write_csv_archive(tmp_path / "night1", 6).resolve()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[YES]]}), encoding="utf-8")
    db = tmp_path / store_name
    assert cli_main(["vet", str(old), "--task", "cv", "--out", str(db), "--scripted", str(script)],
                    render=pillow_render) == 0
    with VettingStore(db) as store:
        key = store.model_verdicts("cv")[0].spectrum_key
        store.record_decision(Decision(key, "cv", "NO", comment="seen before the move", vetter="Ana"))
    return old, db, key


@pytest.fixture
def moved(tmp_path):
    """6 CSV spectra screened by ``vet`` (scripted YES), one decided NO with a comment; then the folder moved."""
    old, db, key = _screened_night(tmp_path, "r.sqlite")
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


def _keys(db: Path) -> list[tuple[str]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT spectrum_key FROM model_verdicts ORDER BY id").fetchall()
    finally:
        con.close()


@pytest.fixture
def moved_with_store(tmp_path):
    """As `moved`, the night's store beside the archive moving with it (``mv night1 night1.sqlite data/``)."""
    old, db, key = _screened_night(tmp_path, "night1.sqlite")
    data = tmp_path / "data"
    data.mkdir()
    shutil.move(old, data / "night1")
    shutil.move(db, data / "night1.sqlite")
    return data / "night1.sqlite", old, (data / "night1").resolve(), key


def test_a_store_that_moved_with_its_archive_is_offered_and_re_rooted(qtbot, make_window, open_and_wait,
                                                                       moved_with_store):
    db, old, new, key = moved_with_store
    w = make_window()
    open_and_wait(w, new)
    qtbot.waitUntil(lambda: w.vetting.store is not None and w.vetting.store.path == db.resolve(), timeout=30000)
    moved_key = str(new) + key[len(str(old)):]
    assert w.vetting.store.get_state(ARCHIVE_ROOT_STATE) == str(new)
    assert w.vetting.store.decision(moved_key, "cv").comment == "seen before the move"
    assert len(w.vetting.store.model_verdicts("cv")) == 6
    assert w.store_label.text() == "store: night1.sqlite"
    assert w.settings.archive_stores[str(new)] == str(db.resolve())


def test_a_partial_match_beside_the_archive_is_refused_with_the_counts(qtbot, make_window, open_and_wait,
                                                                        moved_with_store):
    db, old, new, _key = moved_with_store
    (new / "s02.csv").unlink()
    before = _keys(db)
    w = make_window()
    open_and_wait(w, new)
    assert w.vetting.store.path == w._own_store(str(new))
    assert w.settings.archive_stores[str(new)] == ""  # not offered again
    assert _keys(db) == before and all(k.startswith(str(old)) for (k,) in before)
    with VettingStore(db, readonly=True) as store:
        assert store.get_state(ARCHIVE_ROOT_STATE) == str(old)


def test_a_partial_match_message_names_the_counts(qtbot, make_window, moved_with_store):
    db, old, new, _key = moved_with_store
    (new / "s02.csv").unlink()
    w = make_window()
    messages = []
    w.statusBar().messageChanged.connect(messages.append)
    w.open_archive(new)
    qtbot.waitUntil(lambda: w.index is not None and w.vetting.store is not None, timeout=30000)
    said = [m for m in messages if f"made for {old}, which is not there" in m]
    assert said and "5 found" in said[0] and "1 missing" in said[0] and str(db.resolve()) in said[0]


def test_the_apps_own_store_of_the_old_folder_is_re_rooted(qtbot, make_window, open_and_wait, tmp_path):
    old = write_csv_archive(tmp_path / "night1", 4).resolve()
    w = make_window()
    open_and_wait(w, old)
    own_old = w.vetting.store.path
    key = w.vetting.entry.address
    w.vetting.store.record_decision(Decision(key, "cv", "YES", comment="kept across the move", vetter="Ana"))
    w.close()
    new = tmp_path / "data" / "night1"
    new.parent.mkdir()
    shutil.move(old, new)
    new = new.resolve()
    w2 = make_window()
    open_and_wait(w2, new)
    qtbot.waitUntil(lambda: w2.vetting.store is not None and w2.vetting.store.path == own_old, timeout=30000)
    moved_key = str(new) + key[len(str(old)):]
    assert w2.vetting.store.decision(moved_key, "cv").comment == "kept across the move"
    assert w2.vetting.store.get_state(ARCHIVE_ROOT_STATE) == str(new)
    assert w2.settings.archive_stores[str(new)] == str(own_old)


def test_the_store_chosen_for_the_old_folder_is_offered_when_the_moved_folder_opens(qtbot, make_window,
                                                                                     open_and_wait, moved):
    """The trial: a night's store opened with --store for the archive, then only the archive moved (the store
    stays where it was, neither beside the new folder nor the app's own): opening the moved folder offered nothing
    and landed in an empty own store. The store remembered for the gone folder is offered and re-rooted now, and
    the gone folder's entry is dropped."""
    db, old, new, key = moved
    w = make_window()
    w.settings.archive_stores[str(old)] = str(db)  # chosen with --store / File → Open store… before the move
    open_and_wait(w, new)
    qtbot.waitUntil(lambda: w.vetting.store is not None and w.vetting.store.path == db.resolve(), timeout=30000)
    moved_key = str(new) + key[len(str(old)):]
    assert w.vetting.store.decision(moved_key, "cv").comment == "seen before the move"
    assert w.settings.archive_stores.get(str(new)) == str(db.resolve())
    assert str(old) not in w.settings.archive_stores

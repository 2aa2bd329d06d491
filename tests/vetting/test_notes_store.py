"""VettingStore notes (flags/comment saved apart from decisions): upsert, precedence, old stores, exports."""

from __future__ import annotations

import sqlite3
import time

from speco3.vetting import SCHEMA_VERSION, Decision, VettingStore
from speco3.vetting.export import export_rows


def test_notes_are_replaced_cleared_and_ordered_against_decisions(tmp_path):
    with VettingStore(tmp_path / "s.sqlite") as s:
        assert s.notes("a#0", "cv") == ([], "", [])
        s.save_annotation("a#0", "cv", ["bad_class", " "], "first", "ann")
        s.save_annotation("a#0", "cv", ["bad_class", "interesting"], "second thoughts", "ann")
        (note,) = s.annotations()
        assert note.flags == ["bad_class", "interesting"] and note.comment == "second thoughts"
        assert s.tasks() == ["cv"]
        time.sleep(0.001)
        s.record_decision(Decision("a#0", "cv", "NO", flags=["bad_class"], comment="decided", vetter="ann"))
        assert s.notes("a#0", "cv") == (["bad_class"], "decided", [])  # the decision is newer
        s.save_annotation("a#0", "cv", [], "edited after deciding")
        assert s.notes("a#0", "cv") == ([], "edited after deciding", [])
        assert s.decision("a#0", "cv").comment == "decided"  # the decision keeps what it was made with
        s.save_annotation("a#0", "cv", [], "  ")
        assert s.annotation("a#0", "cv") is None  # empty notes remove the row
        assert s.notes("a#0", "cv") == (["bad_class"], "decided", [])


def test_store_of_the_first_schema_gets_the_notes_table_and_reads_without_it(tmp_path):
    path = tmp_path / "old.sqlite"
    with VettingStore(path) as s:
        s.record_decision(Decision("a#0", "cv", "YES"))
    con = sqlite3.connect(path)
    con.execute("DROP TABLE annotations")  # as written before notes existed
    con.commit()
    con.close()
    with VettingStore(path, readonly=True) as ro:
        assert ro.annotations() == [] and ro.notes("a#0", "cv") == ([], "", [])
        assert len(export_rows(ro)) == 1
    with VettingStore(path) as s:  # opened for writing: the table is added, the schema migrated
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        s.save_annotation("a#0", "cv", ["x"], "")
        assert s.annotation("a#0", "cv").flags == ["x"]


def test_export_rows_carry_latest_notes(tmp_path):
    with VettingStore(tmp_path / "s.sqlite") as s:
        s.save_annotation("u#0", "cv", ["interesting"], "undecided but noted", "bo")
        s.record_decision(Decision("d#0", "cv", "YES", flags=["bad_sky"], comment="at decision", vetter="bo"))
        time.sleep(0.001)
        s.save_annotation("d#0", "cv", ["bad_sky", "blend"], "later note", "bo")
        rows = {r["spectrum_key"]: r for r in export_rows(s, "cv")}
    assert rows["u#0"]["decision"] is None and rows["u#0"]["flags"] == "interesting"
    assert rows["u#0"]["comment"] == "undecided but noted" and rows["u#0"]["vetter"] == "bo"
    assert rows["d#0"]["decision"] == "YES" and rows["d#0"]["flags"] == "bad_sky,blend"
    assert rows["d#0"]["comment"] == "later note" and rows["d#0"]["notes_at"] > rows["d#0"]["decided_at"]

"""The expert's marked evidence windows (schema 4): stored with decisions and notes, old stores migrated intact."""

from __future__ import annotations

import sqlite3

import pytest

from speco3.vetting import SCHEMA_VERSION, Decision, Evidence, VettingStore
from speco3.vetting.schema import _ANNOTATIONS_3, ADDITIVE, MIGRATIONS


def test_evidence_parses_and_validates():
    assert Evidence.parse("6500-6600:Hα  emission") == Evidence(6500.0, 6600.0, "Hα emission")
    assert Evidence.parse(" 4000.5-4100 ") == Evidence(4000.5, 4100.0, "")
    assert Evidence.parse("6500-6600:ratio 1:2").label == "ratio 1:2"  # the label is everything after the first ':'
    assert str(Evidence(6500, 6600, "Hα")) == "6500-6600:Hα"
    for bad, why in [("6600-6500", "below the end"), ("6500", "START-END"), ("a-b", "START-END"),
                     ("6500-inf", "finite"), ("6500-6500", "below the end")]:
        with pytest.raises(ValueError, match=why):
            Evidence.parse(bad)
    with pytest.raises(ValueError, match="finite"):
        Evidence(float("nan"), 1.0)


def test_decision_keeps_its_evidence_in_order(tmp_path):
    windows = [Evidence(6540, 6590, "Hα emission"), Evidence(4840, 4880, "Hβ"), Evidence(4670, 4700)]
    with VettingStore(tmp_path / "s.sqlite") as s:
        s.record_decision(Decision("a#0", "cv", "YES", evidence=windows, comment="broad Balmer"))
        s.record_decision(Decision("b#0", "cv", "NO"))
    with VettingStore(tmp_path / "s.sqlite", readonly=True) as s:
        assert s.decision("a#0", "cv").evidence == windows
        assert s.decision("b#0", "cv").evidence == []
        assert s.decision("a#0", "cv").to_dict()["evidence"] == [[6540.0, 6590.0, "Hα emission"],
                                                                 [4840.0, 4880.0, "Hβ"], [4670.0, 4700.0, ""]]


def test_notes_keep_evidence_marked_before_a_decision(tmp_path):
    with VettingStore(tmp_path / "s.sqlite") as s:
        s.save_annotation("a#0", "cv", [], "", evidence=[Evidence(6540, 6590, "Hα")])
        assert s.annotation("a#0", "cv").evidence == [Evidence(6540, 6590, "Hα")]
        s.save_annotation("a#0", "cv", [], "", evidence=[])  # nothing left: the row goes
        assert s.annotation("a#0", "cv") is None


@pytest.mark.parametrize("with_notes_table", [True, False])
def test_schema3_store_migrates_to_4_keeping_every_row(tmp_path, with_notes_table):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    for version in (1, 2, 3):
        for stmt in MIGRATIONS[version]:
            con.execute(stmt)
    if with_notes_table:  # versions before 4 created it on open
        con.execute(_ANNOTATIONS_3)
        con.execute("INSERT INTO annotations VALUES ('a#0', 'cv', '[\"interesting\"]', 'note', 'ann', 't1', '0.9')")
    con.execute("PRAGMA user_version=3")
    con.execute("INSERT INTO decisions (spectrum_key, task, decision, flags, comment, vetter, decided_at) "
                "VALUES ('a#0', 'cv', 'YES', '[]', 'old', 'ann', 't0')")
    con.commit()
    con.close()
    with VettingStore(path, readonly=True) as ro:  # an old store reads as it is
        (old,) = ro.decisions()
        assert (old.decision, old.comment, old.evidence) == ("YES", "old", [])
    with VettingStore(path) as s:
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        (old,) = s.decisions()
        assert (old.decision, old.comment, old.vetter, old.evidence) == ("YES", "old", "ann", [])
        if with_notes_table:
            assert s.notes("a#0", "cv") == (["interesting"], "note", [])
            assert s.annotation("a#0", "cv").evidence == []
        s.record_decision(Decision("a#0", "cv", "NO", evidence=[Evidence(1, 2, "x")]))
        s.save_annotation("b#0", "cv", [], "", evidence=[Evidence(3, 4)])
    with VettingStore(path) as s:
        assert [d.evidence for d in s.decision_history("a#0", "cv")] == [[], [Evidence(1, 2, "x")]]
        assert s.annotation("b#0", "cv").evidence == [Evidence(3, 4)]


def test_notes_table_is_the_same_created_new_or_migrated(tmp_path):
    """`ADDITIVE["annotations"]` (a store that lacks the table) and schema 3's table plus migration 4 agree."""
    def shape(con):
        return [(r[1], r[2], r[3], r[5]) for r in con.execute("PRAGMA table_info(annotations)")]

    new, old = sqlite3.connect(tmp_path / "new.sqlite"), sqlite3.connect(tmp_path / "old.sqlite")
    new.execute(ADDITIVE["annotations"])
    old.execute(_ANNOTATIONS_3)
    old.execute(next(s for s in MIGRATIONS[4] if s.startswith("ALTER TABLE annotations")))
    assert shape(new) == shape(old) and ("evidence", "TEXT", 0, 0) in shape(new)

"""The vetter's own redshift, confidence (0-4) and class (issue #44 item 2): stored with the decision (table
decision_fit, created on open: no migration), merged per vetter, exported, refused when malformed."""

from __future__ import annotations

import sqlite3

import pytest
from astropy.table import Table

from speco3.cli import main
from speco3.errors import StoreError
from speco3.vetting.export import export, export_rows
from speco3.vetting.merge import merge_stores
from speco3.vetting.records import Decision
from speco3.vetting.store import VettingStore


def test_decide_stores_z_confidence_and_class_and_exports_them(tmp_path, spectra_dir, capsys):
    spec = spectra_dir / "sdss/spec-0332-52367-0639.fits"
    store = tmp_path / "s.sqlite"
    assert main(["decide", str(store), str(spec), "--task", "cv", "--verdict", "NO", "--vetter", "Ana", "--z", "0.1007",
                 "--z-conf", "4", "--class", "QSO", "--subclass", "Sy1"]) == 0
    with VettingStore(store) as s:
        d = s.decisions("cv")[0]
        assert (d.vetter_z, d.z_conf, d.vetter_class, d.vetter_subclass) == (0.1007, 4, "QSO", "Sy1")
        for suffix, fmt in (("csv", "ascii.csv"), ("vot", "votable"), ("fits", "fits")):
            row = Table.read(export(s, tmp_path / f"o.{suffix}"), format=fmt)[0]
            assert (float(row["vetter_z"]), int(row["vetter_z_conf"]), str(row["vetter_class"])) == (0.1007, 4, "QSO")
    capsys.readouterr()
    assert main(["decide", str(store), str(spec), "--task", "cv", "--verdict", "NO", "--z", "99"]) == 2
    assert "not a redshift" in capsys.readouterr().err
    with VettingStore(store) as s:
        assert len(s.decision_history(f"{spec}#0", "cv")) == 1  # nothing written
        with pytest.raises(StoreError, match="confidence must be 0-4"):
            s.record_decision(Decision("k#0", "cv", "YES", vetter="Bo", z_conf=7))
        with pytest.raises(StoreError, match="class must be"):
            s.record_decision(Decision("k#0", "cv", "YES", vetter="Bo", vetter_class="\x1b[31m"))
        assert s.decisions("cv")[0].spectrum_key == f"{spec}#0"


def test_merge_keeps_each_vetters_z(tmp_path):
    for name, vetter, z in (("a", "Ana", 0.30), ("b", "Bo", 0.31)):
        with VettingStore(tmp_path / f"{name}.sqlite") as s:
            s.record_decision(Decision(f"/d/{name}.fits#0", "cv", "YES", vetter=vetter, vetter_z=z, z_conf=3,
                                       decided_at=f"2026-12-04T1{len(name)}:00:0{z * 100 - 30:.0f}Z"))
            s.record_decision(Decision("/d/both.fits#0", "cv", "UNSURE", vetter=vetter, vetter_z=z,
                                       decided_at=f"2026-12-04T12:00:0{z * 100 - 30:.0f}Z"))
    merge_stores(tmp_path / "m.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    with VettingStore(tmp_path / "m.sqlite") as m:
        history = m.decision_history("/d/both.fits#0", "cv")
        assert sorted((d.vetter, d.vetter_z) for d in history) == [("Ana", 0.30), ("Bo", 0.31)]
        rows = {r["spectrum_key"]: r for r in export_rows(m)}
        assert rows["/d/a.fits#0"]["vetter_z"] == 0.30 and rows["/d/b.fits#0"]["vetter_z"] == 0.31


def test_an_older_store_opened_read_only_exports_empty_fields(tmp_path):
    path = tmp_path / "old.sqlite"
    with VettingStore(path) as s:
        s.record_decision(Decision("/d/x.fits#0", "cv", "YES", vetter="Ana"))
    db = sqlite3.connect(path)  # as a store written before the tables created on open existed
    db.execute("DROP TABLE decision_fit")
    db.execute("DROP TABLE spectrum_pipeline")
    db.commit()
    db.close()
    with VettingStore(path, readonly=True) as s:
        (row,) = export_rows(s)
        assert row["decision"] == "YES" and row["vetter_z"] is None and row["pipeline_class"] is None
    db = sqlite3.connect(path)
    assert "decision_fit" not in {r[0] for r in db.execute("SELECT name FROM sqlite_master")}  # file untouched
    db.close()


def test_decide_prints_the_fit_and_refuses_a_confidence_without_a_z(tmp_path, spectra_dir, capsys):
    spec = spectra_dir / "sdss/spec-0332-52367-0639.fits"
    store = tmp_path / "s.sqlite"
    assert main(["decide", str(store), str(spec), "--task", "cv", "--verdict", "YES", "--z-conf", "3"]) == 2
    err = capsys.readouterr().err
    assert "error: a redshift confidence (3) needs the redshift it is about: give --z too" in err
    assert not store.exists()  # refused before anything, the store included, is written
    assert main(["decide", str(store), str(spec), "--task", "cv", "--verdict", "YES", "--z", "0.1007", "--z-conf",
                 "3", "--class", "QSO", "--subclass", "Sy1"]) == 0
    assert "your fit: z 0.1007 (confidence 3) · class QSO Sy1" in capsys.readouterr().out
    assert main(["decide", str(store), str(spec), "--task", "cv", "--verdict", "NO", "--class", "STAR"]) == 0
    assert "your fit: class STAR" in capsys.readouterr().out
    assert main(["decide", str(store), str(spec), "--task", "cv", "--verdict", "NO"]) == 0
    assert "your fit" not in capsys.readouterr().out
    with VettingStore(store) as s, pytest.raises(StoreError, match="needs the redshift"):
        s.record_decision(Decision("k#0", "cv", "YES", vetter="Bo", z_conf=2))

"""``spec-o3 triage`` counts the archive, not only the store: on an archive screened in part by ``spec-o3 vet``
(scripted engine), every spectrum of the archive without a verdict for the task is unscreened, so the verdict is
``continue`` with their number, even when every screened spectrum is decided (the store alone would say stop)."""

from __future__ import annotations

import json
import shutil

from vetting_helpers import NO, pillow_render

from speco3.cli import main as cli_main
from speco3.vetting import VettingStore
from speco3.vetting.store import ARCHIVE_ROOT_STATE
from speco3_testkit.spectra import write_csv_archive


def main(argv: list[str]) -> int:
    return cli_main(argv, render=pillow_render)


def screened_in_part(tmp_path, n=12, limit=4):
    """An archive of ``n`` spectra, ``limit`` of them screened (all NO) and decided NO: the store alone passes."""
    arch = write_csv_archive(tmp_path / "arch", n)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[NO]]}), encoding="utf-8")
    db = tmp_path / "r.sqlite"
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(script),
                 "--limit", str(limit)]) == 0
    with VettingStore(db, readonly=True) as store:
        keys = [v.spectrum_key for v in store.model_verdicts("cv")]
    assert len(keys) == limit
    for key in keys:
        assert main(["decide", str(db), key, "--task", "cv", "--verdict", "NO"]) == 0
    return arch, db


def triage(capsys, *argv: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = main(["triage", *argv, "--task", "cv", "--json"])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def test_the_archive_the_store_was_made_for_counts_by_default(tmp_path, capsys):
    arch, db = screened_in_part(tmp_path)
    rc, out, err = triage(capsys, str(db))
    assert rc == 3 and out["verdict"] == "continue"
    assert out["unscreened"] == 8 and out["screened"] == 4 and out["reviewed"] == 4
    assert out["covered"] is True  # the screened spectra alone would pass: only the archive holds the stop back
    assert out["archive"] == str(arch.resolve())
    assert f"archive: {arch.resolve()} (the one the store was made for" in err
    capsys.readouterr()
    assert main(["triage", str(db), "--task", "cv"]) == 3
    text = capsys.readouterr().out
    assert "8 spectra not screened yet — screen them (pre-screen) before a stop covers the archive" in text
    assert f"not screened: 8 spectra of the archive {arch.resolve()} have no verdict for the task" in text
    # --draw waits for the archive too; nothing is drawn
    assert main(["triage", str(db), "--task", "cv", "--draw", "2"]) == 1
    assert "8 spectra of the archive have no verdict" in capsys.readouterr().err
    with VettingStore(db, readonly=True) as store:
        assert store.audit_draws("cv") == []


def test_screening_the_rest_lets_it_stop(tmp_path, capsys):
    arch, db = screened_in_part(tmp_path, n=6, limit=2)
    script = tmp_path / "script.json"
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(script)]) == 0
    with VettingStore(db, readonly=True) as store:
        keys = [v.spectrum_key for v in store.model_verdicts("cv")]
    for key in keys:
        assert main(["decide", str(db), key, "--task", "cv", "--verdict", "NO"]) == 0
    rc, out, _err = triage(capsys, str(db))
    assert rc == 0 and out["verdict"] == "stop" and out["unscreened"] == 0 and out["screened"] == 6


def test_archive_option_and_a_moved_archive(tmp_path, capsys):
    arch, db = screened_in_part(tmp_path)
    # another archive named: its spectra count (none of them is screened), whatever the store names
    other = write_csv_archive(tmp_path / "other", 3)
    rc, out, err = triage(capsys, str(db), "--archive", str(other))
    assert rc == 3 and out["unscreened"] == 3 and out["archive"] == str(other.resolve())
    assert "the one the store was made for" not in err
    # the archive the store names has gone: said, and the store's own spectra are what is counted
    shutil.move(arch, tmp_path / "moved")
    rc, out, err = triage(capsys, str(db))
    assert rc == 0 and out["verdict"] == "stop" and out["unscreened"] == 0 and out["archive"] is None
    assert f"the archive this store was made for, {arch.resolve()}, is not there" in err
    rc, out, _err = triage(capsys, str(db), "--archive", str(tmp_path / "moved"))
    assert rc == 3 and out["unscreened"] == 12  # the keys name the old place: see spec-o3 store relocate
    assert main(["triage", str(db), "--task", "cv", "--archive", str(tmp_path / "nowhere")]) == 1
    assert "no such archive folder or index" in capsys.readouterr().err


def test_a_store_that_names_no_archive_counts_the_spectra_it_knows_of(tmp_path, capsys):
    _arch, db = screened_in_part(tmp_path)
    with VettingStore(db) as store:
        store.set_state(ARCHIVE_ROOT_STATE, None)
    rc, out, err = triage(capsys, str(db))
    assert rc == 0 and out["verdict"] == "stop" and out["unscreened"] == 0 and out["archive"] is None
    assert "archive" not in err

"""A store made before its archive moved (``mv night1 /data/night1``): ``spec-o3 store relocate`` recognises the
moved archive (same relative paths, the sizes and sha256 the store noted) and re-roots the keys in one transaction;
decisions, verdicts, traces and the audit sample are found again, a resumed ``vet`` screens nothing again, a partial
or changed match is reported and changes nothing, and a relocation killed in its transaction leaves the store as it
was."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from vetting_helpers import NO, YES, pillow_render

from speco3.agent.trace import Trace
from speco3.cli import main as cli_main
from speco3.spectra import ArchiveIndex
from speco3.vetting import VettingStore
from speco3.vetting.archive_store import archive_keys, store_fit
from speco3.vetting.store import ARCHIVE_ROOT_STATE
from speco3.vetting.writer_lock import WriterLock
from speco3_testkit.spectra import write_csv_archive

N = 8


def main(argv: list[str]) -> int:
    return cli_main(argv, render=pillow_render)


@pytest.fixture
def night(tmp_path, capsys):
    """A night: 8 CSV spectra screened by ``vet`` (scripted: YES, NO by seed, 2 rollouts), traces kept inside the
    archive folder (hidden, so not indexed), 2 decisions with a comment and a drawn audit sample of 2; then the
    archive is moved to data/night1."""
    old = write_csv_archive(tmp_path / "night1", N).resolve()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[YES], [NO]], "select": "seed"}), encoding="utf-8")
    db = tmp_path / "r.sqlite"
    assert main(["vet", str(old), "--task", "cv", "--out", str(db), "--scripted", str(script),
                 "--traces", str(old / ".traces"), "--rollouts", "2"]) == 0
    with VettingStore(db, readonly=True) as store:
        keys = sorted(v.spectrum_key for v in store.model_verdicts("cv"))
    assert len(keys) == N
    for key, verdict in ((keys[0], "YES"), (keys[1], "NO")):
        assert main(["decide", str(db), key, "--task", "cv", "--verdict", verdict, "--comment", "seen"]) == 0
    assert main(["triage", str(db), "--task", "cv", "--draw", "2", "--seed", "3"]) == 3
    VettingStore(db).close()
    new = tmp_path / "data" / "night1"
    new.parent.mkdir()
    shutil.move(old, new)
    capsys.readouterr()
    return db, old, new.resolve(), script


def snapshot(db: Path) -> list:
    """Every row of every table (what must not change when a relocation is refused or killed)."""
    con = sqlite3.connect(db)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return [(t, sorted(map(repr, con.execute(f'SELECT * FROM "{t}"')))) for t in tables]
    finally:
        con.close()


def fit(db: Path, root: Path):
    ix = ArchiveIndex.for_root(root)
    try:
        ix.scan(root, workers=1)
        held = set(archive_keys(ix))
    finally:
        ix.close()
    return store_fit(db, root, held.__contains__)


def test_a_moved_archive_is_found_again(night, capsys):
    db, old, new, script = night
    assert fit(db, new).problem() is not None  # as the app sees it before: none of its spectra is in the archive
    before = snapshot(db)
    assert main(["store", "relocate", str(db), str(new), "--dry-run"]) == 0
    assert f"{N} spectra in {N} files under {old}; in {new}: {N} found" in capsys.readouterr().out
    assert snapshot(db) == before
    assert main(["store", "relocate", str(db), str(new), "--sha256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["relocated"] and out["old"] == str(old) and out["found"] == N and out["missing"] == 0
    assert out["rows"]["decisions.spectrum_key"] == 2 and out["rows"]["audit_frame.spectrum_key"] == N - 2
    assert out["rows"]["rollouts.trace_dir"] == 2 * N
    assert fit(db, new).problem() is None
    prefix = str(new) + os.sep
    with VettingStore(db, readonly=True) as store:
        assert store.get_state(ARCHIVE_ROOT_STATE) == str(new)
        assert all(k.startswith(prefix) for k in store.spectrum_keys()) and len(store.spectrum_keys()) == N
        decided = store.decisions("cv")
        assert [d.comment for d in decided] == ["seen", "seen"]
        assert all(store.latest_model_verdict(d.spectrum_key, "cv") is not None for d in decided)
        for v in store.model_verdicts("cv"):
            assert v.trace_dir.startswith(prefix) and Trace.load(v.trace_dir).verdict in ("YES", "NO")
        assert all(k.startswith(prefix) for k in store.audit_frame("cv"))
        assert all(p.startswith(prefix) for p in store.file_stamps())
    # the night goes on where it was: triage finds its archive, vet screens nothing again
    assert main(["triage", str(db), "--task", "cv", "--json"]) == 3
    captured = capsys.readouterr()
    assert json.loads(captured.out)["unscreened"] == 0 and f"archive: {new}" in captured.err
    assert main(["vet", str(new), "--task", "cv", "--out", str(db), "--scripted", str(script),
                 "--traces", str(new / ".traces"), "--rollouts", "2"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["skipped"] == N


def test_a_partial_or_changed_match_is_reported_and_changes_nothing(night, capsys):
    db, old, new, _script = night
    before = snapshot(db)
    (new / "s03.csv").unlink()
    assert main(["store", "relocate", str(db), str(new)]) == 1
    err = capsys.readouterr().err
    assert f"1 of the {N} files is not in {new}: nothing re-rooted" in err and "s03.csv missing" in err
    assert snapshot(db) == before
    # --json: the refusal prints what was found too (a script learns found/missing in exactly this case), the
    # message still on stderr and the exit status 1, dry run or not
    for dry in ([], ["--dry-run"]):
        assert main(["store", "relocate", str(db), str(new), "--json", *dry]) == 1
        captured = capsys.readouterr()
        out = json.loads(captured.out)
        assert out["relocated"] is False and out["found"] == N - 1 and out["missing"] == 1 and out["files"] == N
        assert out["old"] == str(old) and out["new"] == str(new) and out["rows"] == {}
        assert out["error"].startswith(f"1 of the {N} files is not in {new}")
        assert "error: " in captured.err and "s03.csv missing" in captured.err
    assert snapshot(db) == before
    with (new / "s05.csv").open("a", encoding="utf-8") as f:
        f.write("\n")
    assert main(["store", "relocate", str(db), str(new), "--allow-missing"]) == 1
    assert f"1 of the {N} files differs in {new} (size)" in capsys.readouterr().err
    assert snapshot(db) == before
    # the store already holding spectra of the new place: refused (the two would mix)
    shutil.copyfile(db, db.with_name("c.sqlite"))
    clash = db.with_name("c.sqlite")
    assert main(["decide", str(clash), f"{new / 's00.csv'}#0", "--task", "cv", "--verdict", "NO"]) == 0
    assert main(["store", "relocate", str(clash), str(new), "--allow-missing"]) == 1
    assert "already holds 1 spectrum under" in capsys.readouterr().err
    # missing ones allowed: every key moves (their rows are kept), the changed file aside
    with (new / "s05.csv").open("r+", encoding="utf-8") as f:
        text = f.read()
        f.seek(0)
        f.write(text[:-1])
        f.truncate()
    assert main(["store", "relocate", str(db), str(new), "--allow-missing"]) == 0
    assert "1 missing (s03.csv missing)" in capsys.readouterr().out
    with VettingStore(db, readonly=True) as store:
        assert all(k.startswith(str(new) + os.sep) for k in store.spectrum_keys())
    assert main(["store", "relocate", str(db), str(new)]) == 1  # done: the store names the new folder now
    assert f"the store's spectra are under {new} already" in capsys.readouterr().err


def test_an_app_writing_the_store_refuses_the_move(night, capsys):
    db, _old, new, _script = night
    lock = WriterLock(db)
    assert lock.acquire() is None
    try:
        assert main(["store", "relocate", str(db), str(new)]) == 1
        assert "being written by" in capsys.readouterr().err
    finally:
        lock.release()


KILLED = r"""
import os, signal, sys
from speco3.vetting.store import VettingStore
from speco3.vetting.archive_store import relocate

original = VettingStore.relocate_keys
def killed_midway(self, *args):
    updates = []
    def trace(sql):
        if sql.lstrip().upper().startswith("UPDATE"):
            updates.append(sql)
            if len(updates) == 3:  # two tables re-rooted, uncommitted: the process dies here
                os.kill(os.getpid(), signal.SIGKILL)
    self._db.set_trace_callback(trace)
    return original(self, *args)
VettingStore.relocate_keys = killed_midway
relocate(sys.argv[1], sys.argv[2], sys.argv[3])
"""


def test_a_relocation_killed_in_its_transaction_leaves_the_store_intact(night, capsys):
    db, old, new, _script = night
    before = snapshot(db)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", KILLED, str(db), str(old), str(new)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert snapshot(db) == before  # the -wal's uncommitted pages are never read back
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    assert main(["store", "relocate", str(db), str(new)]) == 0
    assert fit(db, new).problem() is None

"""VettingStore: schema, durability (WAL, synchronous=FULL, kill -9), resume semantics, state, errors."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading

import pytest

from speco3.errors import StoreError
from speco3.vetting import SCHEMA_VERSION, Decision, ModelVerdict, SpectrumInfo, VettingStore


def mv(key="a#0", task="cv", verdict="YES", outcome=None, model="m1", pv="p1", **kw) -> ModelVerdict:
    return ModelVerdict(key, task, verdict, outcome or (verdict or "format_error"), model_id=model,
                        prompt_version=pv, **kw)


def test_pragmas_and_schema(tmp_path):
    with VettingStore(tmp_path / "sub" / "r.sqlite") as s:
        assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert (tmp_path / "sub" / "r.sqlite").is_file()


def test_model_verdicts_and_resume_keys(tmp_path):
    with VettingStore(tmp_path / "r.sqlite") as s:
        first = s.record_model_verdict(mv(turns=2, tokens=50, seconds=1.5, engine_settings={"n_ctx": 4096}))
        s.record_model_verdict(mv(verdict="NO"))
        s.record_model_verdict(mv(key="b#0", verdict=None, outcome="engine_error"))
        s.record_model_verdict(mv(key="c#0", verdict=None, outcome="budget_exhausted"))
        latest = s.latest_model_verdict("a#0", "cv")
        assert latest.verdict == "NO" and latest.id > first
        assert s.latest_model_verdict("a#0", "wd") is None
        assert s.has_model_verdict("a#0", "cv", "m1", "p1")
        assert not s.has_model_verdict("a#0", "cv", "m2", "p1") and not s.has_model_verdict("a#0", "cv", "m1", "p2")
        assert not s.has_model_verdict("b#0", "cv", "m1", "p1")  # engine errors are retried
        assert s.has_model_verdict("c#0", "cv", "m1", "p1")  # a no-verdict outcome of the model counts as done
        assert s.done_keys("cv", "m1", "p1") == {"a#0", "c#0"}
        assert [v.spectrum_key for v in s.model_verdicts("cv")] == ["a#0", "b#0", "c#0"]
        assert len(s.model_verdicts("cv", latest=False)) == 4
        assert s.model_verdicts()[0].engine_settings == {} and s.model_verdicts(latest=False)[0].engine_settings == {"n_ctx": 4096}
        with pytest.raises(StoreError, match="YES, NO or None"):
            s.record_model_verdict(mv(verdict="MAYBE"))


def test_decisions_history_and_latest(tmp_path):
    with VettingStore(tmp_path / "r.sqlite") as s:
        s.record_decision(Decision("a#0", "cv", "UNSURE", flags=["low_snr", " "], comment="hm", vetter="ann"))
        s.record_decision(Decision("a#0", "cv", "YES", flags=["interesting"], vetter="ann", model_verdict_seen="NO"))
        s.record_decision(Decision("b#0", "cv", "NO"))
        s.record_decision(Decision("a#0", "wd", "NO"))
        d = s.decision("a#0", "cv")
        assert d.decision == "YES" and d.flags == ["interesting"] and d.model_verdict_seen == "NO"
        assert [x.decision for x in s.decision_history("a#0", "cv")] == ["UNSURE", "YES"]
        assert s.decision_history("a#0", "cv")[0].flags == ["low_snr"]
        assert {(x.spectrum_key, x.task) for x in s.decisions()} == {("a#0", "cv"), ("b#0", "cv"), ("a#0", "wd")}
        assert len(s.decisions("cv")) == 2 and s.decision("zz", "cv") is None
        with pytest.raises(StoreError, match="YES, NO, UNSURE"):
            s.record_decision(Decision("a#0", "cv", "yes!"))
        with pytest.raises(StoreError, match="spectrum key"):
            s.record_decision(Decision("", "cv", "YES"))


def test_state_and_summary(tmp_path):
    with VettingStore(tmp_path / "r.sqlite") as s:
        assert s.get_state("queue", 7) == 7
        s.set_state("queue", {"row": 12, "key": "a#0"})
        s.set_state("queue", {"row": 13, "key": "b#0"})
        with pytest.raises(StoreError, match="not JSON"):
            s.set_state("bad", object())
        s.record_model_verdict(mv())
        s.record_model_verdict(mv(key="b#0", verdict="NO"))
        s.record_decision(Decision("a#0", "cv", "YES"))
        s.record_decision(Decision("b#0", "cv", "YES"))
        s.record_spectrum(SpectrumInfo("a#0", "a.fits", "/x/a.fits", 0, "LAMOST", "1", 1.0, 2.0, 0.1, 9.0))
    with VettingStore(tmp_path / "r.sqlite") as s:  # reopened: resumes
        assert s.get_state("queue") == {"row": 13, "key": "b#0"}
        cv = s.summary()["tasks"]["cv"]
        assert (cv["model_yes"], cv["model_no"], cv["decided"]["YES"], cv["agree"], cv["compared"]) == (1, 1, 2, 1, 2)
        assert s.spectrum_info("a#0").survey == "LAMOST" and s.spectrum_info("nope") is None


def test_bad_files(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreError, match="junk.sqlite"):
        VettingStore(junk)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE foo (x)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="another application"):
        VettingStore(other)
    newer = tmp_path / "newer.sqlite"
    VettingStore(newer).close()
    con = sqlite3.connect(newer)
    con.execute("PRAGMA user_version=99")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer Spec-o3"):
        VettingStore(newer)
    with pytest.raises(StoreError, match="no such vetting store"):
        VettingStore(tmp_path / "missing.sqlite", readonly=True)
    VettingStore(tmp_path / "ro.sqlite").close()
    with VettingStore(tmp_path / "ro.sqlite", readonly=True) as ro, pytest.raises(StoreError, match="read-only"):
        ro.set_state("x", 1)


def test_decision_survives_kill_9(tmp_path):
    path = tmp_path / "r.sqlite"
    code = (
        "import os, signal, sys\n"
        "from speco3.vetting import VettingStore, Decision\n"
        f"s = VettingStore({str(path)!r})\n"
        "for i in range(20):\n"
        "    s.record_decision(Decision(f'k{i}#0', 'cv', 'YES' if i % 2 else 'NO', vetter='v'))\n"
        "print('written', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9 and "written" in proc.stdout
    with VettingStore(path) as s:
        assert len(s.decisions("cv")) == 20 and s.decision("k3#0", "cv").decision == "YES"


def test_threads_share_a_store(tmp_path):
    with VettingStore(tmp_path / "r.sqlite") as s:
        def work(n):
            for i in range(25):
                s.record_decision(Decision(f"t{n}-{i}#0", "cv", "NO"))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(s.decisions("cv")) == 100


def test_two_processes_write_the_same_store(tmp_path):
    path = tmp_path / "r.sqlite"
    VettingStore(path).close()
    code = (
        "import sys\nfrom speco3.vetting import VettingStore, ModelVerdict\n"
        f"s = VettingStore({str(path)!r})\n"
        "for i in range(30):\n"
        "    s.record_model_verdict(ModelVerdict(f'{sys.argv[1]}{i}#0', 'cv', 'NO', 'NO', model_id='m', prompt_version='p'))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, tag]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with VettingStore(path, readonly=True) as s:
        assert len(s.model_verdicts("cv")) == 60


def test_runs_opening_one_new_store_together_all_open_it(tmp_path):
    """Four connections create the same new store at the same moment (two `vet` runs started together): every one
    opens it. Before the fix about one round in 15 failed, with "database is locked" from the switch to WAL (SQLite
    answers BUSY there without waiting) or "an SQLite file of another application" (the tables of the connection
    that won, read beside the version 0 read before they were committed)."""
    failures = []
    for round_ in range(60):
        path = tmp_path / f"s{round_}.sqlite"
        start = threading.Barrier(4)

        def open_it(path=path, start=start):
            start.wait()
            try:
                VettingStore(path).close()
            except StoreError as exc:
                failures.append(str(exc))

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []

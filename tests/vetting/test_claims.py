"""One store, many writers: claims with leases, concurrent ``spec-o3 vet`` processes, a run killed with SIGKILL,
decisions beside screening runs, and a store on a full or read-only disk (real processes, real SQLite)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from vetting_helpers import NO, YES, ZOOM, items, pillow_render

from speco3.agent import get_task
from speco3.cli import main as cli_main
from speco3.engine.base import EngineSettings
from speco3.engine.choice import Scripted
from speco3.engine.scripted import ScriptedEngine
from speco3.spectra import ArchiveIndex
from speco3.vetting import Decision, VettingStore
from speco3.vetting.claims import RunClaims
from speco3.vetting.records import ClaimHolder, ModelVerdict, Work
from speco3.vetting.runs import BatchState, RunEnded, RunJob, RunService, RunStarted
from speco3.vetting.schedulers import on_slots, on_threads, one_at_a_time, vet_batch
from speco3.vetting.screening import Screening, VetItem, screen, vet
from speco3.vetting.store import CLAIMED, DONE_ELSEWHERE, HELD

WORK = Work("cv", "scripted", get_task("cv").prompt_version, 1)


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- the store's claims --------------------------------------------------------------------------------------------
def test_a_live_claim_is_left_a_dead_or_expired_one_is_taken_over(tmp_path):
    store = VettingStore(tmp_path / "s.sqlite")
    me, other = ClaimHolder.here(), ClaimHolder.here()  # two runs of this (live) process
    since = store.last_verdict_id()
    assert store.claim("/a#0", WORK, me, since_id=since).state == CLAIMED
    held = store.claim("/a#0", WORK, other, since_id=since)
    assert held.state == HELD and held.holder.run_id == me.run_id
    assert store.claim("/a#0", Work("cv", "other-model", WORK.prompt_version), other, since_id=since).state == CLAIMED
    # a run whose process is gone on this host: taken over at once, lease or not
    dead = ClaimHolder("dead-run", me.host, _dead_pid())
    assert dead.gone() and not me.gone()
    assert store.claim("/b#0", WORK, dead, since_id=since, lease_s=3600).state == CLAIMED
    took = store.claim("/b#0", WORK, me, since_id=since)
    assert took.state == CLAIMED and took.holder == dead
    # a run on another host is never known to be gone: its lease decides
    far = ClaimHolder("far-run", "another-host.example", 1)
    assert not far.gone()
    assert store.claim("/c#0", WORK, far, since_id=since, lease_s=3600).state == CLAIMED
    assert store.claim("/c#0", WORK, me, since_id=since).state == HELD
    assert store.claim("/d#0", WORK, far, since_id=since, lease_s=-1).state == CLAIMED  # already expired
    assert store.claim("/d#0", WORK, me, since_id=since).state == CLAIMED
    # renewing keeps a lease alive; a released claim is free
    assert store.renew_claims(far, lease_s=3600) == 1
    store.release_claims(me, ["/a#0"], WORK)
    assert store.claim("/a#0", WORK, other, since_id=since).state == CLAIMED
    assert {(k, h.run_id) for k, _, h, _ in store.claims()} >= {("/a#0", other.run_id), ("/b#0", me.run_id)}
    store.close()


def test_the_verdict_releases_its_claim_and_the_first_verdict_counts(tmp_path):
    store = VettingStore(tmp_path / "s.sqlite")
    a, b = ClaimHolder.here(), ClaimHolder.here()
    since = store.last_verdict_id()

    def verdict(answer):
        return ModelVerdict("/a#0", "cv", answer, answer, model_id="scripted", prompt_version=WORK.prompt_version)

    assert store.claim("/a#0", WORK, a, since_id=since, lease_s=-1).state == CLAIMED  # a stalls past its lease
    assert store.claim("/a#0", WORK, b, since_id=since).state == CLAIMED  # b takes over
    assert store.record_claimed_verdict(verdict("YES"), [], WORK, b, since_id=since) is not None
    assert store.claims() == []  # released in the verdict's transaction
    assert store.record_claimed_verdict(verdict("NO"), [], WORK, a, since_id=since) is None  # a comes back: dropped
    assert store.claim("/a#0", WORK, a, since_id=since).state == DONE_ELSEWHERE
    assert [v.verdict for v in store.model_verdicts("cv", latest=False)] == ["YES"]
    # a run asked for explicitly (since_id None) records whatever else was recorded
    assert store.record_claimed_verdict(verdict("NO"), [], WORK, a, since_id=None) is not None
    assert len(store.model_verdicts("cv", latest=False)) == 2
    store.close()


def test_leases_are_renewed_while_a_run_holds_claims(tmp_path):
    store = VettingStore(tmp_path / "s.sqlite")
    claims = RunClaims(store, WORK, since_id=0, lease_s=1.5)
    with claims.kept():
        assert claims.take("/a#0").state == CLAIMED
        time.sleep(3.5)  # more than twice the lease: renewed every 0.5 s
        assert store.claim("/a#0", WORK, ClaimHolder("x", "another-host.example", 1), since_id=0).state == HELD
    assert store.claims() == []  # released at the end of the run
    store.close()


def test_two_screenings_in_one_process_divide_the_items(tmp_path, render):
    """Two `screen` runs on threads, one store (two connections): each spectrum screened once, the work divided."""
    path = tmp_path / "s.sqlite"
    task = get_task("cv")
    results = []
    start = threading.Barrier(2)  # both open the new store at once (the WAL switch raced: one thread failed)

    def run():
        start.wait()
        store = VettingStore(path)
        engine = ScriptedEngine([NO], delay_s=0.002)
        results.append(vet_batch(items(12), store, engine, task, render))
        store.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2, "a run did not finish (its thread raised: see the warning above)"
    with VettingStore(path, readonly=True) as store:
        rows = store.model_verdicts("cv", latest=False)
        assert len(rows) == 12 and len({r.spectrum_key for r in rows}) == 12 and store.claims() == []
    assert sum(r.done for r in results) == 12 and all(r.done + r.skipped == 12 for r in results)
    assert sum(r.dropped for r in results) == 0


@pytest.mark.parametrize("scheduler", ["threads", "slots"])
def test_the_threads_and_slots_schedulers_share_too(tmp_path, render, scheduler):
    """`on_threads` (a model server's conversations, claimed from worker threads) and `on_slots` beside a run one
    at a time: each spectrum once."""
    path = tmp_path / "s.sqlite"
    task = get_task("cv")
    results = []

    def run(kind):
        store = VettingStore(path)
        scr = Screening(store, task, render)
        if kind == "threads":
            sched = on_threads([ScriptedEngine([NO], delay_s=0.002) for _ in range(3)])
        elif kind == "slots":
            sched = on_slots(ScriptedEngine([NO], delay_s=0.002), 3)
        else:
            sched = one_at_a_time(ScriptedEngine([NO], delay_s=0.002))
        results.append(vet(scr, items(15), sched, "scripted"))
        store.close()

    threads = [threading.Thread(target=run, args=(kind,)) for kind in (scheduler, "one")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with VettingStore(path, readonly=True) as store:
        rows = store.model_verdicts("cv", latest=False)
        assert len(rows) == 15 and len({r.spectrum_key for r in rows}) == 15 and store.claims() == []
    assert sum(r.done for r in results) == 15 and sum(r.dropped for r in results) == 0


def test_a_single_run_asked_for_goes_ahead_beside_a_held_claim(tmp_path, render):
    """The app's single-spectrum run (share=False) is not left waiting behind a `vet` that holds the spectrum."""
    store = VettingStore(tmp_path / "s.sqlite")
    item = items(1)[0]
    far = ClaimHolder("vet-run", "another-host.example", 1)
    store.claim(item.key, WORK, far, since_id=0, lease_s=3600)
    shared = Screening(store, get_task("cv"), render, resume=False)
    assert shared.share
    asked = Screening(store, get_task("cv"), render, resume=False, share=False)
    events = list(screen(asked, [item], one_at_a_time(ScriptedEngine([YES])), "scripted"))
    assert type(events[-1]).__name__ == "Recorded"
    assert [(k, h.run_id) for k, _, h, _ in store.claims()] == [(item.key, "vet-run")]  # the vet's claim stays
    store.close()


def test_a_benchmark_truth_is_recorded_once_by_concurrent_evaluations(tmp_path):
    """`evaluate` records each item's ground truth as a decision when none is there: checked in the transaction
    that writes it, so two runs on one store (two connections, two threads) write it once."""
    path = tmp_path / "s.sqlite"
    VettingStore(path).close()
    ids: list[int] = []

    def run():
        with VettingStore(path) as store:
            ids.extend(store.record_decision(Decision(f"/k{i}#0", "cv", "YES", vetter="benchmark"),
                                             if_undecided=True) for i in range(40))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with VettingStore(path, readonly=True) as store:
        assert len(store.decisions("cv")) == 40
        assert sum(len(store.decision_history(f"/k{i}#0", "cv")) for i in range(40)) == 40
    assert sum(1 for i in ids if i) == 40 and ids.count(0) == 40


# -- real processes ------------------------------------------------------------------------------------------------
def _archive(folder: Path, n: int) -> Path:
    folder.mkdir()
    wl = np.linspace(3700, 9100, 400)
    for i in range(n):
        flux = 10 + (5 if i % 2 else 0) * np.exp(-((wl - 6564.6) / 8) ** 2) + 0.01 * i
        np.savetxt(folder / f"s{i:02d}.csv", np.c_[wl, flux], delimiter=",", header="wavelength,flux", comments="")
    return folder


def _script(tmp_path: Path, delay_s: float) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"scripts": [[ZOOM, YES], [NO]], "delay_s": delay_s}), encoding="utf-8")
    return path


def _env() -> dict:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}  # the user folders of this test (conftest) are in os.environ


def _vet_cmd(arch: Path, store: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "speco3", "vet", str(arch), "--task", "cv", "--out", str(store), *extra]


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _summary(proc: subprocess.Popen, timeout: float = 300) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    summary["stderr"] = err
    return summary


def _rows(store: Path) -> list[tuple]:
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return db.execute("SELECT spectrum_key, outcome, trace_dir FROM model_verdicts ORDER BY id").fetchall()
    finally:
        db.close()


def _claims(store: Path) -> list[tuple]:
    if not store.exists():  # `vet` creates a new store once its model is loaded
        return []
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("SELECT spectrum_key, pid FROM claims").fetchall()
    except sqlite3.OperationalError:  # being created: no table yet
        return []
    finally:
        db.close()


def _check_once_each(store: Path, n: int, summaries: list[dict]) -> None:
    """Exactly one verdict per spectrum, each screened by one run: the rows, the runs' counts and the claims."""
    rows = _rows(store)
    keys = [r[0] for r in rows]
    assert len(rows) == n and len(set(keys)) == n, f"{len(rows)} rows for {len(set(keys))} spectra"
    assert all(os.path.isdir(r[2]) for r in rows)
    assert sum(s["done"] for s in summaries) == n  # the work done, per run, adds up to the archive
    assert sum(s["dropped"] for s in summaries) == 0  # nobody screened a spectrum another run recorded
    for s in summaries:
        assert s["done"] + s["skipped"] == n and s["skipped"] == s["elsewhere"]
    assert _claims(store) == []


@pytest.mark.parametrize("runs", [2, 4])
def test_concurrent_vet_processes_screen_each_spectrum_once(tmp_path, runs):
    n = 16
    arch = _archive(tmp_path / "arch", n)
    store = tmp_path / "results.sqlite"
    cmd = _vet_cmd(arch, store, "--scripted", str(_script(tmp_path, 0.03)))
    procs = [_start(cmd) for _ in range(runs)]
    summaries = [_summary(p) for p in procs]
    _check_once_each(store, n, summaries)
    assert sum(s["done"] > 0 for s in summaries) >= 2, [s["done"] for s in summaries]  # the work was divided
    assert any("screened by another run" in s["stderr"] for s in summaries)  # the progress lines say so


@pytest.mark.llama
@pytest.mark.parametrize("runs", [2, 4])
def test_concurrent_vet_processes_on_the_tiny_model(tiny_gguf, tmp_path, runs):
    """The same on llama.cpp with the tiny random model (its words are noise; the processes and the store are real)."""
    text, mmproj = tiny_gguf("Q8_0")
    n = 8
    arch = _archive(tmp_path / "arch", n)
    store = tmp_path / "results.sqlite"
    slots = "2" if runs == 2 else "1"  # two spectra at once on the parallel sequences (`on_slots`), or one
    cmd = _vet_cmd(arch, store, "--text", str(text), "--mmproj", str(mmproj), "--n-ctx", "4096", "--threads", "1",
                   "--n-gpu-layers", "0", "--image-max-tokens", "120", "--max-turns", "2", "--slots", slots)
    procs = [_start(cmd) for _ in range(runs)]
    summaries = [_summary(p, timeout=600) for p in procs]
    _check_once_each(store, n, summaries)
    assert {r[1] for r in _rows(store)} <= {"YES", "NO", "format_error", "budget_exhausted", "context_full"}


def _wait_for_claim(store: Path, pid: int, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while not any(p == pid for _, p in _claims(store)):
        assert time.monotonic() - t0 < timeout, "the run never claimed a spectrum"
        time.sleep(0.05)


def test_a_run_killed_while_holding_claims_leaves_its_share_to_the_others(tmp_path):
    n = 12
    arch = _archive(tmp_path / "arch", n)
    store = tmp_path / "results.sqlite"
    cmd = _vet_cmd(arch, store, "--scripted", str(_script(tmp_path, 0.02)))
    victim = _start(cmd)
    _wait_for_claim(store, victim.pid)
    survivor = _start(cmd)
    _wait_for_claim(store, survivor.pid)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)  # reaped: its pid is gone
    assert victim.returncode == -signal.SIGKILL
    by_victim = len(_rows(store))  # an upper bound: the survivor may have recorded some already
    summary = _summary(survivor)
    rows = _rows(store)
    assert len(rows) == n and len({r[0] for r in rows}) == n
    assert summary["done"] + summary["skipped"] == n and summary["dropped"] == 0
    assert summary["done"] >= n - by_victim
    assert "taking over the claim of a run that is gone" in summary["stderr"]
    assert _claims(store) == []


def test_a_rerun_takes_over_the_claims_of_a_killed_run(tmp_path):
    n = 8
    arch = _archive(tmp_path / "arch", n)
    store = tmp_path / "results.sqlite"
    cmd = _vet_cmd(arch, store, "--scripted", str(_script(tmp_path, 0.01)))
    victim = _start(cmd)
    _wait_for_claim(store, victim.pid)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    left = _claims(store)
    assert left and all(pid == victim.pid for _, pid in left)  # the dead run's claims are still there
    before = len(_rows(store))
    summary = _summary(_start(cmd))
    assert (summary["done"], summary["skipped"]) == (n - before, before)
    assert len(_rows(store)) == n and _claims(store) == []


def test_decisions_written_while_runs_screen_are_all_kept(tmp_path, spectra_dir):
    """`spec-o3 decide` (in this process and as processes of its own) while two `vet` processes write: every
    decision is stored, none waits long, and the runs still screen each spectrum once."""
    n = 12
    arch = _archive(tmp_path / "arch", n)
    store = tmp_path / "results.sqlite"
    VettingStore(store).close()
    cmd = _vet_cmd(arch, store, "--scripted", str(_script(tmp_path, 0.02)))
    procs = [_start(cmd) for _ in range(2)]
    _wait_for_claim(store, procs[0].pid)
    files = sorted(arch.glob("*.csv"))
    decided, slowest = [], 0.0
    deciders = [subprocess.Popen([sys.executable, "-m", "speco3", "decide", str(store), str(files[i]), "--task",
                                  "cv", "--verdict", "YES", "--vetter", "proc"], env=_env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(3)]
    i = 0
    while any(p.poll() is None for p in procs) or i < 10:
        t0 = time.perf_counter()
        assert cli_main(["decide", str(store), str(files[i % n]), "--task", "cv", "--verdict", "NO",
                         "--comment", f"decision {i}", "--vetter", "cli"]) == 0
        slowest = max(slowest, time.perf_counter() - t0)
        decided.append(i)
        i += 1
    for p in deciders:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    summaries = [_summary(p) for p in procs]
    _check_once_each(store, n, summaries)
    with VettingStore(store, readonly=True) as s:
        history = [d for f in files for d in s.decision_history(f"{f.resolve()}#0", "cv")]
    assert sorted(d.comment for d in history if d.vetter == "cli") == sorted(f"decision {i}" for i in decided)
    assert sum(d.vetter == "proc" for d in history) == 3
    assert slowest < 30, f"a decision waited {slowest:.1f} s"


# -- a full or read-only disk --------------------------------------------------------------------------------------
FULL_DISK = r"""
import json, sqlite3, subprocess, sys
from speco3.errors import StoreError
from speco3.vetting import Decision, VettingStore
folder, arch, script = sys.argv[1:4]
store = VettingStore(f"{folder}/s.sqlite")
n = 0
try:
    while True:
        store.record_decision(Decision(f"/k{n}#0", "cv", "YES", comment="x" * 3000))
        n += 1
except StoreError as exc:
    error = str(exc)
store.close()
with VettingStore(f"{folder}/s.sqlite", readonly=True) as s:
    kept = len(s.decisions("cv"))
    ok = sqlite3.connect(f"{folder}/s.sqlite").execute("PRAGMA integrity_check").fetchone()[0]
vet = subprocess.run([sys.executable, "-m", "speco3", "vet", arch, "--task", "cv", "--out", f"{folder}/s.sqlite",
                      "--scripted", script], capture_output=True, text=True)
with VettingStore(f"{folder}/s.sqlite", readonly=True) as s:
    verdicts = len(s.model_verdicts(latest=False))
print(json.dumps({"written": n, "error": error, "kept": kept, "integrity": ok, "vet_rc": vet.returncode,
                  "vet_err": vet.stderr[-600:], "verdicts": verdicts}))
"""

READ_ONLY = r"""
import json, sqlite3, subprocess, sys
from speco3.errors import StoreError
from speco3.vetting import Decision, VettingStore
folder, arch, script = sys.argv[1:4]
out = {}
try:
    VettingStore(f"{folder}/s.sqlite").record_decision(Decision("/a#0", "cv", "NO"))
except StoreError as exc:
    out["decide"] = str(exc)
db = sqlite3.connect(f"file:{folder}/s.sqlite?immutable=1", uri=True)  # WAL on read-only media: no -shm
out["decisions"] = db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
db.close()
vet = subprocess.run([sys.executable, "-m", "speco3", "vet", arch, "--task", "cv", "--out", f"{folder}/new.sqlite",
                      "--scripted", script], capture_output=True, text=True)
out["new_rc"], out["new_err"] = vet.returncode, vet.stderr[-600:]
vet = subprocess.run([sys.executable, "-m", "speco3", "vet", arch, "--task", "cv", "--out", f"{folder}/s.sqlite",
                      "--scripted", script], capture_output=True, text=True)
out["old_rc"], out["old_err"] = vet.returncode, vet.stderr[-600:]
print(json.dumps(out))
"""


def _in_small_tmpfs(folder: Path, shell: str) -> subprocess.CompletedProcess:
    """Run ``shell`` with a 1 MiB tmpfs mounted on ``folder`` (a new store with every table, and the WAL it is
    written through, take about 250 KiB: at 256 KiB its last checkpoint found the disk full): directly as root, else in a user and mount
    namespace (``unshare -Urm``); skipped where neither can mount."""
    folder.mkdir()
    mount = f"mount -t tmpfs -o size=1m speco3-test {folder}"
    if os.geteuid() == 0:
        inner = f"{mount} && ( {shell} ); rc=$?; umount {folder}; exit $rc"
        return subprocess.run(["sh", "-c", inner], capture_output=True, text=True, env=_env(), timeout=300)
    if shutil.which("unshare") and subprocess.run(["unshare", "-Urm", "sh", "-c", mount],
                                                  capture_output=True).returncode == 0:
        return subprocess.run(["unshare", "-Urm", "sh", "-c", f"{mount} && ( {shell} )"], capture_output=True,
                              text=True, env=_env(), timeout=300)
    pytest.skip("cannot mount a small tmpfs here (not root, no user namespaces)")


@pytest.mark.optin("SPECO3_MOUNT_TESTS")
def test_a_store_on_a_full_disk_fails_clearly_and_keeps_what_was_written(tmp_path):
    arch = _archive(tmp_path / "arch", 3)
    folder = tmp_path / "small"
    code = tmp_path / "full.py"
    code.write_text(FULL_DISK, encoding="utf-8")
    proc = _in_small_tmpfs(folder, f"{sys.executable} {code} {folder} {arch} {_script(tmp_path, 0)}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["written"] > 0 and "disk holding the store is full" in got["error"]
    assert got["kept"] == got["written"] and got["integrity"] == "ok"  # no partial row, nothing lost
    assert got["vet_rc"] == 1 and "full" in got["vet_err"] and "Traceback" not in got["vet_err"]
    assert got["verdicts"] == 0


@pytest.mark.optin("SPECO3_MOUNT_TESTS")
def test_a_store_on_a_read_only_disk_fails_clearly(tmp_path):
    arch = _archive(tmp_path / "arch", 3)
    folder = tmp_path / "ro"
    code = tmp_path / "ro.py"
    code.write_text(READ_ONLY, encoding="utf-8")
    seed = (f"{sys.executable} -c \"from speco3.vetting import VettingStore, Decision; "
            f"s = VettingStore('{folder}/s.sqlite'); s.record_decision(Decision('/k#0', 'cv', 'YES')); s.close()\"")
    proc = _in_small_tmpfs(folder, f"{seed} && mount -o remount,ro {folder} && "
                                   f"{sys.executable} {code} {folder} {arch} {_script(tmp_path, 0)}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "read-only" in got["decide"] and got["decisions"] == 1
    assert got["new_rc"] == 1 and "read-only" in got["new_err"] and "Traceback" not in got["new_err"]
    assert got["old_rc"] == 1 and "read-only" in got["old_err"] and "Traceback" not in got["old_err"]


def test_the_pre_screen_takes_over_at_its_end_what_a_killed_vet_held(tmp_path):
    """The app's pre-screen (`RunService`, a sharing screening that does not wait) beside a real ``vet`` process:
    the spectra that ``vet`` holds are left to it at first; the ``vet`` is then killed (SIGKILL) while the batch goes
    on, and at the batch's end the pre-screen looks at them again, takes over the dead run's claims and screens
    them: every spectrum gets a verdict, none is reported as left to another run."""
    n = 6
    arch = _archive(tmp_path / "arch", n)
    store_path = tmp_path / "results.sqlite"
    slow = tmp_path / "slow.json"  # seconds per spectrum: the vet holds its claims while the batch runs
    slow.write_text(json.dumps({"scripts": [[YES]], "delay_s": 2.0}), encoding="utf-8")
    victim = _start(_vet_cmd(arch, store_path, "--scripted", str(slow)))
    try:
        _wait_for_claim(store_path, victim.pid)
        held_by_victim = {k for k, pid in _claims(store_path) if pid == victim.pid}
        with ArchiveIndex.for_root(arch) as index:
            entries = index.query(usable=True, sort="key")
        # the vet's spectra first: the pre-screen meets them while the vet lives
        entries.sort(key=lambda e: e.address not in held_by_victim)
        address = {e.key: e.address for e in entries}  # jobs are named by index key, claims by store key
        assert held_by_victim and entries[0].address in held_by_victim
        events: list = []
        killed = threading.Event()

        def observe(event) -> None:
            events.append(event)
            if isinstance(event, RunStarted) and address[event.key] not in held_by_victim and not killed.is_set():
                victim.send_signal(signal.SIGKILL)  # the batch has passed the held spectra: the vet dies
                victim.communicate(timeout=60)
                killed.set()

        service = RunService(observe)
        with VettingStore(store_path) as store:
            screening = Screening(store, get_task("cv"), pillow_render, trace_root=tmp_path / "traces", wait=False)
            key = Scripted("fast").engine_key(EngineSettings())
            service.start_batch([RunJob(e.key, VetItem.of_entry(e), screening, key,
                                        lambda: ScriptedEngine([NO])) for e in entries])
            service.serve(until_idle=True)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.communicate(timeout=60)
    assert killed.is_set() and victim.returncode == -signal.SIGKILL
    ended = {e.key: e for e in events if isinstance(e, RunEnded)}
    assert len(ended) == n and all(e.verdict is not None for e in ended.values())  # none left to the dead run
    assert [e.state for e in events if isinstance(e, BatchState)] == ["running", "finished"]
    rows = _rows(store_path)
    assert len(rows) == n and len({r[0] for r in rows}) == n and {r[1] for r in rows} == {"NO"}
    assert held_by_victim <= {r[0] for r in rows} and _claims(store_path) == []

"""kill -9 durability: ``spec-o3 vet`` on a 200-spectrum archive and the desktop decision store, killed at random.

Each trial starts the real command in its own process group and SIGKILLs the group at a seeded random moment
(a random time during start-up, or a random delay after a random number of progress lines, so the kills land
mid-run whatever the machine's speed).
After every kill: ``PRAGMA integrity_check`` is ok, every row committed before is still there unchanged, every
verdict the run reported (its progress line is printed after the commit) is in the store, no spectrum has two
rows, and every row's trace folder loads. A final resumed run must end with exactly 200 rows. The desktop part
writes notes, decisions and the queue position through the `VettingStore` calls the GUI's `VettingController`
makes (``set_state("current_key", …)`` on navigation, ``save_annotation`` as flags and comment change,
``record_decision`` on Y/N/U and on later edits).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speco3.agent import Trace

N_SPECTRA = 200
N_TRIALS = int(os.environ.get("SPECO3_KILL_TRIALS", "12"))
SEED = int(os.environ.get("SPECO3_KILL_SEED", "0"))

SCRIPT = {
    "scripts": [
        ["<think>Balmer lines look broad.</think>\n<tool_call>\n{\"name\": \"spectral_visualization_tool\", "
         "\"arguments\": {\"wavelength_range\": [6500, 6620], \"label\": \"Halpha\"}}\n</tool_call>",
         "<think>Emission confirmed.</think>\n<answer>\\boxed{YES}</answer> Broad Balmer emission."],
        ["<think>No emission.</think>\n<answer>\\boxed{NO}</answer> Plain continuum."],
    ],
    "select": "image",
    "delay_s": 0.002,
}


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """200 small LAMOST-layout FITS files (the demo archive's generator, objects cycled)."""
    from speco3 import demo

    root = tmp_path_factory.mktemp("archive200")
    for i in range(N_SPECTRA):
        demo.write_demo_spectrum(root / f"spec-{i:03d}.fits", demo.CATALOGUE[i % len(demo.CATALOGUE)], i)
    return root


def _rows(db_path: Path) -> dict[int, tuple]:
    con = sqlite3.connect(db_path)
    try:
        return {r[0]: r for r in con.execute("SELECT * FROM model_verdicts")}
    finally:
        con.close()


def _integrity(db_path: Path) -> str:
    con = sqlite3.connect(db_path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _start(cmd: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # own process group: index workers die with it


def _kill_after(proc: subprocess.Popen, delay: float) -> tuple[str, str, bool]:
    """SIGKILL the process group after ``delay`` s (unless it ended); return stdout, stderr, killed."""
    try:
        out, err = proc.communicate(timeout=delay)
        return out, err, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        return out, err, True


def _kill_after_lines(proc: subprocess.Popen, stream: str, n_lines: int, extra_s: float) -> tuple[str, str, bool]:
    """SIGKILL the process group ``extra_s`` after it printed ``n_lines`` lines on ``stream`` (independent of speed).

    Returns (stdout, stderr, killed); the watched stream's text includes the lines read here.
    """
    pipe = proc.stderr if stream == "stderr" else proc.stdout
    seen: list[str] = []
    sent = False
    for line in pipe:
        seen.append(line)
        if len(seen) >= n_lines:
            time.sleep(extra_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
                sent = True
            break
    out, err = proc.communicate(timeout=60)
    if stream == "stderr":
        err = "".join(seen) + err
    else:
        out = "".join(seen) + out
    return out, err, sent and proc.returncode == -signal.SIGKILL


def _committed_keys(stderr: str) -> dict[str, str]:
    """Keys the run reported as done (``i/N KEY: OUTCOME`` lines are printed after the verdict is committed)."""
    done = {}
    for line in stderr.split("\n")[:-1]:  # complete lines only: a kill can cut the last one
        head, sep, outcome = line.rpartition(": ")
        if sep and "/" in head.split(" ", 1)[0] and outcome != "skipped (done before)":
            done[head.split(" ", 1)[1]] = outcome
    return done


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    for name in ("DATA", "CONFIG", "CACHE"):  # the subprocess shares this test's user folders
        env[f"SPECO3_{name}_DIR"] = os.environ[f"SPECO3_{name}_DIR"]
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_vet_survives_sigkill_and_resumes_without_gaps(archive, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    store = tmp_path / "results.sqlite"
    cmd = [sys.executable, "-m", "speco3", "vet", str(archive), "--task", "cv", "--out", str(store),
           "--scripted", str(script)]
    env = _env(tmp_path)
    rng = random.Random(SEED)
    before: dict[int, tuple] = {}
    kills = 0
    progress_seen = 0
    for trial in range(N_TRIALS):
        if trial < 2:  # during start-up and indexing
            out, err, killed = _kill_after(_start(cmd, env), rng.uniform(0.1, 1.2))
        else:  # after a random number of progress lines, a random moment into the next spectrum
            out, err, killed = _kill_after_lines(_start(cmd, env), "stderr", rng.randint(1, 25), rng.uniform(0, 0.15))
        kills += killed
        if not store.exists():
            continue
        assert _integrity(store) == "ok", f"trial {trial}"
        rows = _rows(store)
        lost = {i: r for i, r in before.items() if rows.get(i) != r}
        assert not lost, f"trial {trial}: committed rows changed or vanished: {list(lost)[:5]}"
        by_key = {r[1]: r for r in rows.values()}
        assert len(by_key) == len(rows), f"trial {trial}: a spectrum has two rows"
        reported = _committed_keys(err)
        progress_seen += len(reported)
        missing = [k for k in reported if k not in by_key]
        assert not missing, f"trial {trial}: reported as done but not in the store: {missing[:3]}"
        for key, outcome in reported.items():
            assert by_key[key][4] == outcome
        for r in rows.values():
            if r not in before.values():
                assert Trace.load(r[18]).outcome.value == r[4]  # trace saved before the verdict row
        before = rows
        if len(rows) == N_SPECTRA:
            break
    assert kills >= min(10, N_TRIALS) - 1, f"only {kills} runs were killed mid-way"
    assert 0 < len(before) < N_SPECTRA, "the kills never landed mid-run"
    # The resumed run completes the archive: exactly 200 rows, one per spectrum, the earlier ones untouched.
    proc = _start(cmd, env)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["skipped"] == len(before) and summary["done"] == N_SPECTRA - len(before)
    rows = _rows(store)
    assert _integrity(store) == "ok"
    assert all(rows[i] == r for i, r in before.items())
    keys = [r[1] for r in rows.values()]
    assert len(rows) == N_SPECTRA and len(set(keys)) == N_SPECTRA
    assert set(keys) == {f"{(archive / f'spec-{i:03d}.fits').resolve()}#0" for i in range(N_SPECTRA)}
    assert {r[4] for r in rows.values()} == {"YES", "NO"}
    assert progress_seen > 0


DESKTOP_WRITER = r"""
import sys
from speco3.vetting import VettingStore
from speco3.vetting.records import Decision

store = VettingStore(sys.argv[1])
n = int(sys.argv[2])
keys = [f"/archive/spec-{i:04d}.fits#0" for i in range(n)]
current = store.get_state("current_key")             # VettingController.resume()
i = keys.index(current) if current in keys else 0
if store.decision(keys[i], "cv") is not None:
    i += 1
while i < n:
    key = keys[i]
    store.set_state("current_key", key)               # go_to(row), 0.5 s later (save_position)
    flags, full = ["low_snr"] * (i % 2), f"seen {i} \u2713"
    for part in (full[:2], full[:5], full):           # notes saved the moment they change (typing a comment)
        store.save_annotation(key, "cv", flags, part, "tester")
        print("A", key, part, flush=True)
    d = Decision(spectrum_key=key, task="cv", decision=("YES", "NO", "UNSURE")[i % 3], flags=flags,
                 comment=full, vetter="tester")
    store.record_decision(d)                          # decide(): committed when it returns
    print(d.id, key, d.decision, d.comment, flush=True)
    if i % 5 == 0:                                    # update_notes(): the decision re-saved with a new comment
        e = Decision(spectrum_key=key, task="cv", decision=d.decision, flags=["artifact"], comment=d.comment + " edited",
                     vetter="tester")
        store.record_decision(e)
        print(e.id, key, e.decision, e.comment, flush=True)
    i += 1
print("DONE", flush=True)
"""


def test_desktop_decisions_survive_sigkill(tmp_path):
    n = 3000
    store = tmp_path / "vetting.sqlite"
    cmd = [sys.executable, "-c", DESKTOP_WRITER, str(store), str(n)]
    env = _env(tmp_path)
    rng = random.Random(SEED + 1)
    printed: dict[int, tuple[str, str, str]] = {}
    noted: dict[str, str] = {}  # key -> last comment reported as saved
    kills = 0
    for trial in range(N_TRIALS):
        out, _, killed = _kill_after_lines(_start(cmd, env), "stdout", rng.randint(20, 200), rng.uniform(0, 0.003))
        kills += killed
        for line in out.split("\n")[:-1]:  # complete lines only: a kill can cut the last one
            if line.startswith("A "):
                _, key, comment = line.split(" ", 2)
                noted[key] = comment
            elif line != "DONE":
                ident, key, decision, comment = line.split(" ", 3)
                printed[int(ident)] = (key, decision, comment)
        if not store.exists():
            continue
        assert _integrity(store) == "ok", f"trial {trial}"
        con = sqlite3.connect(store)
        rows = {r[0]: (r[1], r[3], r[5]) for r in con.execute("SELECT * FROM decisions")}
        con.close()
        lost = {i: v for i, v in printed.items() if rows.get(i) != v}
        assert not lost, f"trial {trial}: decisions reported as saved are missing or changed: {list(lost.items())[:3]}"
        con = sqlite3.connect(store)
        notes = {r[0]: r[1] for r in con.execute("SELECT spectrum_key, comment FROM annotations WHERE task='cv'")}
        con.close()
        # A note reported as saved is there (or the later edit that followed it, written before the kill).
        stale = {k: c for k, c in noted.items() if not notes.get(k, "").startswith(c)}
        assert not stale, f"trial {trial}: notes reported as saved are missing: {list(stale.items())[:3]}"
        if "DONE" in out:
            break
    assert kills >= N_TRIALS - 1, kills
    proc = _start(cmd, env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.rstrip().endswith("DONE"), err[-2000:]
    from speco3.vetting import VettingStore

    with VettingStore(store, readonly=True) as s:
        latest = s.decisions("cv")
        assert len(latest) == n  # every spectrum decided once the session is resumed; none twice as "latest"
        assert [d.spectrum_key for d in latest] == [f"/archive/spec-{i:04d}.fits#0" for i in range(n)]
        for d in latest:
            i = int(d.spectrum_key[14:18])
            assert d.decision == ("YES", "NO", "UNSURE")[i % 3]
            assert d.comment.startswith(f"seen {i} \u2713")
        assert s.get_state("current_key") == f"/archive/spec-{n - 1:04d}.fits#0"
        assert all(s.notes(d.spectrum_key, "cv") == (d.flags, d.comment, d.evidence) for d in latest)
    assert _integrity(store) == "ok"

"""``spec-o3 triage`` on a store screened by ``spec-o3 vet`` with the scripted engine: the JSON keys, exit 3 for
continue, a draw recorded with its seed that survives a restart and a killed process, the audit queue, the exports'
``audit_draw`` and ``skippable`` columns."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import hypergeom
from vetting_helpers import NO, YES, pillow_render

from speco3.cli import main as cli_main
from speco3.cli.triage import report_text
from speco3.vetting import Decision, ModelVerdict, VettingStore
from speco3.vetting.stopping import assess, draw, k_target, labels_lower_bound, sample_needed
from speco3.vetting.store import ARCHIVE_ROOT_STATE
from speco3_testkit.spectra import write_csv_archive

KEYS = {"verdict", "reviewed", "found", "remaining", "sample_needed", "sample_drawn", "sample_positives", "skipped",
        "screened", "labels_used", "positives_used", "bound", "threshold", "method"}
REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    return cli_main(argv, render=pillow_render)


@pytest.fixture(scope="module")
def screened_master(tmp_path_factory):
    """24 CSV spectra screened once with 3 scripted rollouts each (YES, NO, YES by seed: p_yes 2/3, all tied)."""
    tmp = tmp_path_factory.mktemp("screened")
    arch = write_csv_archive(tmp / "arch", 24)
    script = tmp / "script.json"
    script.write_text(json.dumps({"scripts": [[YES], [NO], [YES]], "select": "seed"}), encoding="utf-8")
    db = tmp / "r.sqlite"
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(script),
                 "--rollouts", "3"]) == 0
    VettingStore(db).close()  # closed, the WAL is checkpointed: the copies below hold every row
    return db, arch


@pytest.fixture
def screened_store(screened_master, tmp_path, capsys):
    """A private copy of the screened store (the spectra stay where they were screened)."""
    db, arch = screened_master
    capsys.readouterr()
    copy = tmp_path / "r.sqlite"
    shutil.copyfile(db, copy)
    return copy, arch


def run_json(capsys, db, *extra) -> tuple[int, dict]:
    capsys.readouterr()  # what earlier commands printed
    rc = main(["triage", str(db), "--task", "cv", "--recall", "0.9", "--confidence", "0.95", "--json", *extra])
    return rc, json.loads(capsys.readouterr().out)


def decide(db, key: str, verdict: str) -> None:
    path, _, n = key.rpartition("#")
    assert main(["decide", str(db), f"{path}#{n}", "--task", "cv", "--verdict", verdict]) == 0


def test_triage_before_and_after_an_audit(screened_store, capsys):
    db, _ = screened_store
    with VettingStore(db, readonly=True) as store:
        keys = [v.spectrum_key for v in store.model_verdicts("cv")]
        assert len(keys) == 24 and all(v.p_yes == pytest.approx(2 / 3) for v in store.model_verdicts("cv"))
    # the head: the first 16 in the likely-first order (tied: the stored order), all candidates
    for key in keys[:16]:
        decide(db, key, "YES")
    capsys.readouterr()
    rc, out = run_json(capsys, db)
    assert rc == 3 and set(out) >= KEYS
    assert (out["verdict"], out["screened"], out["reviewed"], out["found"], out["remaining"]) == \
        ("continue", 24, 16, 16, 8)
    assert out["sample_drawn"] == 0 and out["labels_used"] == 0 and out["bound"] is None and out["threshold"] is None
    assert out["sample_needed"] == sample_needed(8, 16, 16, 0.9, 0.95)
    assert out["labels_lower_bound"] == labels_lower_bound(8, 16, 16, 0.9, 0.95)
    assert "hypergeometric" in out["method"]

    needed = out["sample_needed"]
    rc, out = run_json(capsys, db, "--draw", str(needed), "--seed", "11")
    assert (rc, out["seed"], out["sample_drawn"], out["labels_used"], out["sample_needed"]) == (3, 11, needed, 0, needed)
    drawn_n = needed
    assert main(["queue", str(db), "--task", "cv", "--audit", "--json"]) == 0
    audit = [r["spectrum_key"] for r in json.loads(capsys.readouterr().out)]
    assert len(audit) == drawn_n
    with VettingStore(db, readonly=True) as store:
        assert audit == store.audit_frame("cv")[:drawn_n]
    for key in audit:
        decide(db, key, "NO")
    capsys.readouterr()
    rc, out = run_json(capsys, db)
    kt = k_target(16, 16, 0.9)
    assert out["labels_used"] == drawn_n and out["positives_used"] == 0
    assert out["p_value"] == pytest.approx(hypergeom.cdf(0, 8, kt, drawn_n))
    assert rc == 0 and out["verdict"] == "stop" and out["skipped"] == 8 - drawn_n == out["remaining"]
    assert 0 <= out["bound"] <= 0.1
    # the text report says what was drawn and how
    assert main(["triage", str(db), "--task", "cv"]) == 0
    text = capsys.readouterr().out
    assert "stop: at most" in text and "seed 11" in text and f"{drawn_n} spectra drawn at random" in text
    # the head and the audit sample apart (not "reviewed 23 of 24 (likely first)")
    assert f"reviewed {16 + drawn_n} of 24 (16 likely first, {drawn_n} in the audit sample)" in text


def test_exports_carry_the_draw_and_the_skippable(screened_store, tmp_path, capsys):
    db, _ = screened_store
    with VettingStore(db, readonly=True) as store:
        keys = [v.spectrum_key for v in store.model_verdicts("cv")]
    for key in keys[:18]:
        decide(db, key, "YES")
    assert run_json(capsys, db, "--draw", "4", "--seed", "5")[0] == 3
    with VettingStore(db, readonly=True) as store:
        drawn = store.audit_frame("cv")[:4]
    for key in drawn:
        decide(db, key, "NO")
    capsys.readouterr()
    rc, out = run_json(capsys, db)  # 18 found, 6 left: k_target 3, ruled out by 4 random spectra without one
    assert rc == 0 and out["skipped"] == 2
    assert main(["export", str(db), "--csv", str(tmp_path / "e.csv")]) == 0
    with open(tmp_path / "e.csv", encoding="utf-8") as fh:
        rows = {r["spectrum_key"]: r for r in csv.DictReader(fh)}
    assert [rows[k]["audit_draw"] for k in drawn] == [str(i) for i in range(1, 5)]
    unread = [k for k in keys if k not in drawn and k not in keys[:18]]
    assert len(unread) == 2 and all(rows[k]["skippable"] == "1" for k in unread)
    assert all(rows[k]["skippable"] == "0" for k in keys if k not in unread)
    assert all(rows[k]["audit_draw"] == "" for k in keys[:18])


def test_a_draw_survives_a_killed_process_and_is_extended_not_redrawn(screened_store, capsys):
    db, _ = screened_store
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "desktop"), str(REPO / "converters"), str(REPO / "models"), str(REPO / "tests" / "support"),
         os.environ.get("PYTHONPATH", "")])}
    code = ("import os, signal, sys\nfrom speco3.cli import main\n"
            f"rc = main(['triage', {str(db)!r}, '--task', 'cv', '--draw', '5', '--seed', '42', '--json'])\n"
            "sys.stdout.flush()\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["sample_drawn"] == 5
    with VettingStore(db) as store:  # a new process: the draw is on disk, with its seed
        draws = store.audit_draws("cv")
        assert [(d["seed"], d["added"], d["drawn"], d["recall"], d["confidence"]) for d in draws] == \
            [(42, 5, 5, 0.9, 0.95)]
        frame = store.audit_frame("cv")
    # never redrawn: another seed is refused, a further draw extends the same sequence
    assert main(["triage", str(db), "--task", "cv", "--draw", "3", "--seed", "7"]) == 1
    assert "never redrawn" in capsys.readouterr().err
    _, out = run_json(capsys, db, "--draw", "3")
    assert out["sample_drawn"] == 8 and out["seed"] == 42 and [d["added"] for d in out["draws"]] == [5, 3]
    with VettingStore(db, readonly=True) as store:
        assert store.audit_frame("cv") == frame


@pytest.mark.parametrize("argv, words", [
    (["--recall", "1.5"], "recall target"),
    (["--confidence", "1"], "confidence"),
    (["--seed", "3"], "--seed goes with --draw"),
    (["--draw", "0"], "positive number"),
    (["--task", "nope"], "no task 'nope'"),
])
def test_refused_arguments_exit_1_with_the_reason(screened_store, capsys, argv, words):
    db, _ = screened_store
    args = ["triage", str(db), *(["--task", "cv"] if "--task" not in argv else []), *argv]
    assert main(args) == 1
    assert words in capsys.readouterr().err


def test_missing_store_and_queue_audit_without_a_task(tmp_path, screened_store, capsys):
    db, _ = screened_store
    assert main(["triage", str(tmp_path / "none.sqlite")]) == 1
    assert "no such vetting store" in capsys.readouterr().err
    assert main(["queue", str(db), "--audit"]) == 1
    assert "--audit needs --task" in capsys.readouterr().err
    assert main(["triage", str(db)]) == 3  # the store's only task is the default


def test_spectra_not_screened_mean_continue_and_no_draw(screened_store, capsys):
    """A spectrum the store knows of without a verdict for the task (here a decision on it), in a store that names
    no archive (with one, the archive's spectra count: tests/vetting/test_triage_archive.py): the test covers the
    screened spectra only, so continue (exit 3) with ``unscreened`` in the JSON, and --draw is refused."""
    db, _ = screened_store
    with VettingStore(db) as store:
        store.record_decision(Decision("elsewhere.csv#0", "cv", "YES"))
        store.set_state(ARCHIVE_ROOT_STATE, None)
    rc, out = run_json(capsys, db)
    assert rc == 3 and out["verdict"] == "continue" and out["unscreened"] == 1 and out["found_unscreened"] == 1
    assert out["found"] == 0 and out["reviewed"] == 0 and out["screened"] == 24
    assert main(["triage", str(db), "--task", "cv"]) == 3
    text = capsys.readouterr().out
    assert "1 spectrum not screened yet — screen them (pre-screen) before a stop covers the archive" in text
    assert "the test covers the 24 screened only" in text
    assert main(["triage", str(db), "--task", "cv", "--draw", "3"]) == 1
    assert "screen them (spec-o3 vet) before drawing" in capsys.readouterr().err
    with VettingStore(db, readonly=True) as store:
        assert store.audit_draws("cv") == []


def test_the_text_never_asks_for_more_labels_than_are_unread(tmp_path):
    with VettingStore(tmp_path / "s.sqlite") as store:
        for i in range(20):
            store.record_model_verdict(ModelVerdict(f"s{i:02d}", "cv", "NO", "NO", p_yes=0.0, rollouts=3))
        draw(store, "cv", 2, seed=5)
        for key in store.audit_frame("cv")[2:16]:  # 14 decided down the order, outside the sample
            store.record_decision(Decision(key, "cv", "NO"))
        text = report_text(assess(store, "cv", 0.9, 0.95))
    # 19 labels would be needed from the frame of 20 (hypergeom.pmf(0, 20, 1, 19) = 0.05); 6 are unread
    assert hypergeom.pmf(0, 20, 1, 19) == pytest.approx(0.05)
    assert "any certificate from a random sample would need all 6 unread decided" in text
    assert "reviewed 14 of 20 (out of the likely-first order), 0 candidates found" in text
    assert "2 spectra drawn at random" in text and "0 candidates among them" in text

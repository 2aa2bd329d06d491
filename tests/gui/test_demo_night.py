"""The night workflow without a model (a new user's trial): ``spec-o3 demo`` writes the demo archive and prints its
folder, ``spec-o3 vet --demo`` screens it with the scripted demo session through the real screening path (its
verdicts the demo catalogue's ground truth, recorded as "scripted demo — not a model"), a spectrum that is not the
demo's is refused, the app opens the night's store with ``--store`` and shows them labelled as the demo, and
``spec-o3 triage`` reads it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from speco3.cli import main as cli_main
from speco3.demo import CATALOGUE, demo_file_name
from speco3.engine.choice import SCRIPTED_LABEL
from speco3.gui.archive_model import COL
from speco3.vetting import VettingStore

pytestmark = pytest.mark.gui


def _cli(base: Path, *argv: str) -> subprocess.CompletedProcess:
    """A real ``spec-o3`` process, its data, config and cache folders under ``base``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("CONFIG", "DATA", "CACHE"):
        env[f"SPECO3_{name}_DIR"] = str(base / name.lower())
    return subprocess.run([sys.executable, "-m", "speco3", *argv], capture_output=True, text=True, timeout=600,
                          cwd=base, env=env)


@pytest.fixture(scope="module")
def demo_night(tmp_path_factory) -> tuple[Path, Path, dict]:
    """``spec-o3 demo`` (its default folder: 'demo' in the data folder), then ``vet --demo`` into night/r.sqlite."""
    base = tmp_path_factory.mktemp("demo-night")
    res = _cli(base, "demo")
    assert res.returncode == 0, res.stderr
    archive = Path(res.stdout.strip())
    assert archive == (base / "data" / "demo").resolve()
    assert sorted(p.name for p in archive.glob("*.fits.gz")) == [demo_file_name(i) for i in range(len(CATALOGUE))]
    res = _cli(base, "vet", str(archive), "--task", "cv", "--out", "night/r.sqlite", "--demo")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "scripted demo" in res.stderr
    return archive, base / "night" / "r.sqlite", json.loads(res.stdout.strip().splitlines()[-1])


def test_vet_demo_records_the_scripted_sessions_verdicts(demo_night):
    archive, store, summary = demo_night
    assert summary["model"] == SCRIPTED_LABEL and summary["done"] == len(CATALOGUE) and summary["failed"] == 0
    positives = {str(archive / demo_file_name(i)) for i, obj in enumerate(CATALOGUE) if obj.truth == "cv"}
    assert summary["outcomes"] == {"YES": len(positives), "NO": len(CATALOGUE) - len(positives)}
    with VettingStore(store, readonly=True) as s:
        rows = s.model_verdicts("cv")
        assert len(rows) == len(CATALOGUE) and {r.model_id for r in rows} == {SCRIPTED_LABEL}
        assert {r.spectrum_key.split("#")[0] for r in rows if r.verdict == "YES"} == positives
        assert all(r.trace_dir and Path(r.trace_dir).is_dir() for r in rows)  # real traces, beside the store
    again = _cli(store.parent.parent, "vet", str(archive), "--task", "cv", "--out", "night/r.sqlite", "--demo")
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["skipped"] == len(CATALOGUE)


def test_a_spectrum_not_the_demos_is_refused(demo_night, spectra_dir, tmp_path, capsys):
    archive, _, _ = demo_night
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(archive / demo_file_name(0), mixed)
    other = next((spectra_dir / "lamost").glob("*.fits"))
    shutil.copy(other, mixed)
    out = tmp_path / "r.sqlite"
    assert cli_main(["vet", str(mixed), "--task", "cv", "--out", str(out), "--demo"]) == 1
    err = capsys.readouterr().err
    assert f"{other.name}: the scripted demo session is not a model; it runs only on the demo archive's" in err
    assert not out.exists()  # refused before anything was written
    assert cli_main(["inspect", str(mixed / other.name), "--task", "cv", "--demo", "--out", str(tmp_path / "t")]) == 1
    assert "runs only on the demo archive's spectra" in capsys.readouterr().err
    assert cli_main(["vet", str(archive), "--task", "cv", "--out", str(out), "--demo", "--model", "x"]) == 1
    assert "--demo runs the scripted demo session, not a model" in capsys.readouterr().err


def test_the_demo_night_opens_in_the_app(qtbot, make_window, demo_night, tmp_path):
    archive, night, _ = demo_night
    store = tmp_path / "r.sqlite"
    shutil.copy(night, store)  # the app writes decisions: a private copy (its traces stay beside the night's)
    w = make_window()
    w.open_archive(archive, store)
    qtbot.waitUntil(lambda: w.index is not None and w.vetting.entry is not None, timeout=30000)
    assert w.vetting.store.path == store.resolve()
    m = w.table_model
    m.fetch_all()
    shown = {m.data(m.index(r, COL["name"])): m.data(m.index(r, COL["model"])) for r in range(m.rowCount())}
    assert len(shown) == len(CATALOGUE) and set(shown.values()) == {"YES (demo)", "NO (demo)"}
    w.vetting.go_to(0)  # demo spectrum 1, a CV: the suggestion names the scripted demo, not a model
    assert w.vetting.model_suggestion().model_id == SCRIPTED_LABEL
    assert "scripted demo — not a model" in w.decision.suggestion.text()


def test_triage_reads_the_demo_night(demo_night, tmp_path, capsys):
    _, night, _ = demo_night
    store = tmp_path / "r.sqlite"
    shutil.copy(night, store)
    rc = cli_main(["triage", str(store), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 3 and report["verdict"] == "continue" and report["screened"] == len(CATALOGUE)

"""The app's pre-screen beside a ``spec-o3 vet`` process on the same store: the work is divided, each spectrum
screened once, and the vetter's decisions made meanwhile are all kept."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest
from PySide6.QtCore import Qt

from speco3.engine.base import ModelInfo
from speco3.engine.scripted import ScriptedEngine
from speco3.gui.archive_model import COL
from speco3.vetting import VettingStore

pytestmark = pytest.mark.gui

SCRIPT = ["<think>Zoom on Hβ.</think>\n<tool_call>\n{\"name\": \"spectral_visualization_tool\", \"arguments\": "
          "{\"label\": \"Hβ\", \"wavelength_range\": [4800, 4920]}}\n</tool_call>",
          "<think>Emission.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."]


def _claimed_by(store, pid: int) -> bool:
    if not store.exists():
        return False
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    try:
        return bool(db.execute("SELECT 1 FROM claims WHERE pid=?", (pid,)).fetchall())
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def test_the_prescreen_and_a_cli_vet_divide_one_store(qtbot, make_window, demo_archive, open_and_wait, key,
                                                     fake_models, tmp_path):
    engines = []

    def opener(_model_id, settings):  # the same model as the `vet` process: the same work, shared
        eng = ScriptedEngine(SCRIPT, delay_s=0.01, settings=settings, info=ModelInfo("scripted", "none"))
        engines.append(eng)
        return eng

    w = make_window(opener=opener)
    open_and_wait(w, demo_archive)
    store_path = w.vetting.store.path
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"outputs": SCRIPT, "delay_s": 0.01}), encoding="utf-8")
    vet = subprocess.Popen([sys.executable, "-m", "speco3", "vet", str(demo_archive), "--task", "cv", "--out",
                            str(store_path), "--scripted", str(script)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        t0 = time.monotonic()
        while not _claimed_by(store_path, vet.pid):
            assert vet.poll() is None and time.monotonic() - t0 < 120, vet.stderr.read() if vet.poll() else "slow"
            qtbot.wait(50)
        w.start_batch()
        for _ in range(3):
            key(w, Qt.Key.Key_N)  # the vetter decides while both screen
        qtbot.waitUntil(lambda: not w.inference.batch_running(), timeout=120000)
        out, err = vet.communicate(timeout=120)
    finally:
        if vet.poll() is None:
            vet.kill()
            vet.communicate()
    assert vet.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    with VettingStore(store_path, readonly=True) as store:
        rows = store.model_verdicts("cv", latest=False)
        keys = [r.spectrum_key for r in rows]
        assert len(rows) == 20 and len(set(keys)) == 20  # each spectrum screened once, by one of them
        assert store.claims() == [] and len(store.decisions("cv")) == 3
    assert summary["total"] == 20 and summary["dropped"] == 0
    assert 0 < summary["done"] < 20, summary  # the app screened the rest
    assert summary["done"] + summary["elsewhere"] == 20 and summary["held"] == 0  # `vet` waits for what others hold
    # the table shows the verdicts the app recorded
    model = w.table_model
    assert sum(model.data(model.index(r, COL["model"])) == "YES" for r in range(20)) >= 20 - summary["done"]

"""A real ``spec-o3 vet --traces OUTSIDE`` run (scripted engine, its own process) is opened in the app: its traces are
shown (the run recorded their folder as trusted in the user's configuration). Under another account's
configuration the same store's traces are refused with a "Trust this folder…" button; the box it opens names the
folder and only its "Trust this folder" button records it. ``/`` is never trusted (docs/threat-model.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from speco3.gui.archive_model import COL
from speco3.vetting.report import write_report
from speco3.vetting.trace_roots import trusted_roots

pytestmark = pytest.mark.gui

YES = "<think>Emission.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."
NO = "<think>Flat.</think>\n<answer>\\boxed{NO}</answer> No emission."
REFUSED = "not shown: trace folder outside the store's folder"


def _vet_outside(archive: Path, store: Path, traces: Path) -> None:
    script = store.parent / "script.json"
    script.write_text(json.dumps({"scripts": [[YES], [NO]], "select": "image"}), encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "speco3", "vet", str(archive), "--task", "cv", "--out", str(store),
                          "--traces", str(traces), "--scripted", str(script), "--limit", "3"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "recorded as a trusted trace folder" in res.stderr


def _screened_row(w) -> int:
    m = w.table_model
    return next(r for r in range(m.rowCount()) if m.data(m.index(r, COL["model"])) in ("YES", "NO"))


def test_vet_traces_outside_shown_in_the_app_refused_elsewhere_until_trusted(qtbot, make_window, open_and_wait,
                                                                              demo_archive, tmp_path, monkeypatch):
    night = tmp_path / "night"
    night.mkdir()
    store, scratch = night / "r.sqlite", tmp_path / "scratch" / "traces"
    _vet_outside(demo_archive, store, scratch)
    assert trusted_roots() == [scratch.resolve()]  # the subprocess wrote this test's config folder

    w = make_window()
    open_and_wait(w, demo_archive)
    assert w.open_store(store)
    qtbot.waitUntil(lambda: w.vetting.entry is not None, timeout=30000)
    w.vetting.go_to(_screened_row(w))
    assert "(stored run)" in w.agent_panel.transcript.toPlainText()
    assert not w.agent_panel.trust_button.isVisible()
    html = write_report(w.vetting.store, tmp_path / "report.html").read_text(encoding="utf-8")
    assert REFUSED not in html.replace("&#39;", "'") and ("Balmer emission" in html or "No emission" in html)

    # another account's configuration: nothing trusted, the trace refused with a button to trust its folder
    monkeypatch.setenv("SPECO3_CONFIG_DIR", str(tmp_path / "other-config"))
    w.vetting.step(1)
    w.vetting.go_to(_screened_row(w))
    panel = w.agent_panel
    assert panel.hint.text().startswith(REFUSED) and panel.transcript.toPlainText() == ""
    assert panel.trust_button.isVisible() and not panel.trust_button.isHidden()

    def box() -> QMessageBox:
        found = [b for b in w.findChildren(QMessageBox, "trustTraceBox") if b.isVisible()]
        assert len(found) == 1
        return found[0]

    panel.trust_button.click()  # the box names the folder as plain text; Cancel records nothing
    qtbot.waitUntil(lambda: bool(w.findChildren(QMessageBox, "trustTraceBox")), timeout=5000)
    assert str(scratch.resolve()) in box().text()
    box().button(QMessageBox.StandardButton.Cancel).click()
    assert trusted_roots() == [] and panel.hint.text().startswith(REFUSED)
    panel.trust_button.click()
    qtbot.waitUntil(lambda: any(b.isVisible() for b in w.findChildren(QMessageBox, "trustTraceBox")), timeout=5000)
    trust = next(b for b in box().buttons() if b.text() == "Trust this folder")
    trust.click()
    assert trusted_roots() == [scratch.resolve()]
    assert "(stored run)" in panel.transcript.toPlainText() and not panel.trust_button.isVisible()
    assert w.statusBar().currentMessage() == f"trusted trace folder: {scratch.resolve()}"

    # the file system's root is refused with its reason, nothing recorded
    assert not w.trust_trace_folder("/")
    assert "the file system's root cannot be a trusted trace folder" in w.statusBar().currentMessage()
    assert trusted_roots() == [scratch.resolve()]

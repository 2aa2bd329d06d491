"""The agent panel: a ScriptedEngine run streams into the panel, cancel, zoom clicks, stored verdicts, no-model help."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from speco3.agent.trace import Trace
from speco3.engine.choice import DEMO, SCRIPTED_LABEL, InstalledModel
from speco3.gui.archive_model import COL

pytestmark = pytest.mark.gui


def _run_and_wait(qtbot, w, timeout=30000):
    w.run_agent()
    assert w.agent.interactive_job is not None
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=timeout)


def test_scripted_run_streams_into_the_panel(qtbot, make_window, demo_archive, open_and_wait, engine_factory,
                                             fake_models):
    engine_factory.delay_s = 0.01  # slow enough to observe streaming
    w = make_window()
    open_and_wait(w, demo_archive)
    assert w.agent_panel.choice() == InstalledModel("test-model")
    panel = w.agent_panel
    w.run_agent()
    # text arrives while the run is still going
    qtbot.waitUntil(lambda: "continuum is blue" in panel.transcript.toPlainText(), timeout=20000)
    assert w.agent.interactive_job is not None
    assert "Zoom on Hβ" not in panel.verdict.text()
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=30000)
    text = panel.transcript.toPlainText()
    assert "Hβ is a strong emission line" in text
    # readable, not markup (issue #44); the trace keeps the raw text
    assert "Thinking: The continuum is blue" in text and "→ asks to zoom in on “Zoom on Hβ region” 4800–4920 Å" in text
    assert "Answer: YES" in text and "<answer>" not in panel.verdict.text() and "boxed" not in panel.verdict.text()
    assert not any(tag in text for tag in ("<think>", "</think>", "<tool_call>", "\\boxed", "<answer>", '"name"'))
    assert panel.zooms.count() == 1 and panel.zoom_windows() == [(4800.0, 4920.0, "Zoom on Hβ region")]
    assert "YES" in panel.verdict.text() and "Evidence: Zoom on Hβ region 4800–4920 Å" in panel.verdict.text()
    assert "tok/s" in panel.status.text() and "scripted" in panel.status.text()
    # the verdict is stored apart from decisions, shown in the table and offered as the suggestion
    mv = w.vetting.model_suggestion()
    assert mv.verdict == "YES" and mv.model_id == "test-model" and mv.zooms == 1 and mv.trace_dir
    raw = [step.text for step in Trace.load(mv.trace_dir).steps if step.kind == "assistant"]
    assert raw[0].startswith("<think>The continuum") and "<tool_call>" in raw[0] and "\\boxed{YES}" in raw[1]
    assert w.vetting.store.decisions(w.vetting.task_id) == []
    assert w.table_model.data(w.table_model.index(0, COL["model"])) == "YES"
    assert w.decision.accept_button.isEnabled()
    assert engine_factory.opened == ["test-model"]


def test_every_rollout_streams_while_k_rollouts_run(qtbot, make_window, demo_archive, open_and_wait, engine_factory,
                                                  fake_models):
    """K = 4: each rollout's text appears in its own tab as it is written (the trial saw nothing for 12 s, then the
    whole transcript), and the status line counts the tokens of all four."""
    engine_factory.delay_s = 0.01
    w = make_window()
    w.settings.rollouts, w.settings.rollout_temperature = 4, 0.9
    open_and_wait(w, demo_archive)
    panel = w.agent_panel
    w.run_agent()
    tabs = panel.rollout_tabs
    assert tabs.count() == 4 and tabs.tabBar().isVisible()
    views = [tabs.widget(i) for i in range(1, 4)]
    qtbot.waitUntil(lambda: all("continuum is blue" in v.toPlainText() for v in views), timeout=20000)
    assert w.agent.interactive_job is not None  # still running: streamed, not shown at the end
    assert "continuum is blue" in panel.transcript.toPlainText()
    status = panel.status.text()
    assert " 0 tokens" not in status and "tok/s" in status
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=60000)
    assert "of 4 rollouts" in panel.verdict.text()
    # the stored run is shown now: each of the four rollouts still in its tab, from its stored trace
    assert tabs.count() == 4
    stored = [tabs.widget(i).toPlainText() for i in range(1, 4)]
    assert all("Hβ is a strong emission line" in text and "▶ zoom Zoom on Hβ region" in text for text in stored)
    w.archive.table.setFocus()
    w.vetting.step(1)  # another spectrum, not run yet: no rollout tabs
    assert panel.rollout_tabs.count() == 1 and not panel.rollout_tabs.tabBar().isVisible()
    w.vetting.step(-1)  # back: the stored K = 4 run with its four tabs
    assert panel.rollout_tabs.count() == 4


def test_enter_accepts_the_model_suggestion(qtbot, make_window, demo_archive, open_and_wait, key, fake_models):
    w = make_window()
    open_and_wait(w, demo_archive)
    _run_and_wait(qtbot, w)
    key(w, Qt.Key.Key_Return)
    d = w.vetting.store.decisions(w.vetting.task_id)
    assert len(d) == 1 and d[0].decision == "YES" and d[0].model_verdict_seen == "YES"


def test_cancel_stops_the_run_and_stores_nothing(qtbot, make_window, demo_archive, open_and_wait, key,
                                                 engine_factory, fake_models):
    engine_factory.outputs = ["<think>" + "looking at the continuum " * 400 + "</think><answer>\\boxed{NO}</answer>"]
    engine_factory.delay_s = 0.005
    w = make_window()
    open_and_wait(w, demo_archive)
    w.run_agent()
    qtbot.waitUntil(lambda: "looking at the continuum" in w.agent_panel.transcript.toPlainText(), timeout=20000)
    key(w, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=20000)
    assert w.vetting.model_suggestion() is None  # a cancelled run is not a verdict
    assert w.agent_panel.run_button.isEnabled() and not w.agent_panel.cancel_button.isEnabled()
    assert len(w.agent_panel.transcript.toPlainText()) < len(engine_factory.outputs[0])


def test_clicking_a_zoom_shows_the_window_on_the_plot(qtbot, make_window, demo_archive, open_and_wait, fake_models):
    w = make_window()
    open_and_wait(w, demo_archive)
    _run_and_wait(qtbot, w)
    zooms = w.agent_panel.zooms
    rect = zooms.visualItemRect(zooms.item(0))
    qtbot.mouseClick(zooms.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    z = w.vetting.spectrum.z
    lo, hi = w.viewer.x_range()  # observed frame: the rest-frame window times (1 + z), with 15 % padding
    assert lo == pytest.approx((4800 - 18) * (1 + z), abs=0.5) and hi == pytest.approx((4920 + 18) * (1 + z), abs=0.5)
    assert w.viewer.highlight is not None
    region = w.viewer.highlight.getRegion()
    assert region[0] == pytest.approx(4800 * (1 + z)) and region[1] == pytest.approx(4920 * (1 + z))


def test_no_model_says_how_to_get_one(qtbot, make_window, demo_archive, open_and_wait, tmp_path):
    w = make_window()
    notice = w.agent_panel.notice
    assert notice.isVisibleTo(w) and "spec-o3 models pull" in notice.text()
    assert "spec-o3 models import" in notice.text() and "spec-o3 convert" in notice.text()
    assert not w.agent_panel.run_button.isEnabled()
    # the demo archive offers the scripted session, clearly labelled
    open_and_wait(w, demo_archive)
    assert w.agent_panel.choice() is DEMO
    assert "not a model" in w.agent_panel.model_box.currentText()


def test_scripted_demo_session_is_labelled_everywhere(qtbot, make_window, demo_archive, open_and_wait):
    w = make_window()
    open_and_wait(w, demo_archive)
    _run_and_wait(qtbot, w)
    panel = w.agent_panel
    assert "scripted demo — not a model" in panel.transcript.toPlainText()
    assert "scripted demo — not a model" in panel.verdict.text()
    status = panel.status.text()  # the trial read "338 tokens · 91.3 tok/s" as a real throughput
    assert "scripted demo — not a model" in status and "tok/s" not in status and "tokens" not in status, status
    mv = w.vetting.model_suggestion()
    assert mv.model_id == SCRIPTED_LABEL and mv.verdict == "YES"  # demo spectrum 1 is a CV
    assert "scripted demo — not a model" in w.decision.suggestion.text()
    assert w.table_model.data(w.table_model.index(0, COL["model"])) == "YES (demo)"


def test_scripted_demo_refuses_non_demo_spectra(qtbot, make_window, spectra_dir, open_and_wait):
    w = make_window()
    open_and_wait(w, spectra_dir / "lamost")
    assert DEMO not in w.agent_panel.choices()
    assert w.agent.run_current("cv", DEMO) is None
    assert "only on the demo archive" in w.statusBar().currentMessage()


def test_stored_trace_is_replayed_on_revisit(qtbot, make_window, demo_archive, open_and_wait, key, fake_models):
    w = make_window()
    open_and_wait(w, demo_archive)
    _run_and_wait(qtbot, w)
    key(w, Qt.Key.Key_Right)
    assert w.agent_panel.zooms.count() == 0
    assert "No model run" in w.agent_panel.hint.text() and w.agent_panel.compact  # folded: nothing to show
    key(w, Qt.Key.Key_Left)
    assert not w.agent_panel.compact and w.agent_panel.zooms.count() == 1
    assert "stored run" in w.agent_panel.transcript.toPlainText()
    replay = w.agent_panel.transcript.toPlainText()
    assert "→ asks to zoom in on" in replay and "Answer: YES" in replay and "<tool_call>" not in replay


def test_a_stored_trace_outside_the_stores_folder_is_named_not_read(qtbot, make_window, demo_archive, open_and_wait,
                                                                    fake_models):
    """A store naming /etc as a verdict's trace folder (docs/threat-model.md): the panel says so, plainly."""
    import sqlite3

    w = make_window()
    open_and_wait(w, demo_archive)
    _run_and_wait(qtbot, w)
    mv = w.vetting.model_suggestion()
    assert mv.trace_dir and w.settings.resolved_data_folder() / "traces" in Path(mv.trace_dir).parents
    with sqlite3.connect(w.vetting.store.path) as db:
        db.execute("UPDATE model_verdicts SET trace_dir='/etc/<b>x</b>' WHERE id=?", (mv.id,))
    w.vetting.step(1)
    w.vetting.step(-1)
    hint = w.agent_panel.hint
    assert hint.text() == "not shown: trace folder outside the store's folder (/etc/<b>x</b>)"
    assert hint.textFormat() == Qt.TextFormat.PlainText and w.agent_panel.transcript.toPlainText() == ""
    assert w.agent_panel.trust_button.isHidden()  # / is never offered (the folder itself does not exist)

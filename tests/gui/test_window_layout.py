"""Layout at a laptop's screen size: the plot gets the room, idle panels fold, nothing is cut off at the right."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint

pytestmark = pytest.mark.gui


# the plot's least share of the window's height (the trial measured 140 px at 1024×640 and 40 px at 800×500 before)
@pytest.mark.parametrize(("size", "share"), [((1366, 768), 0.45), ((1024, 640), 0.35), ((1920, 1080), 0.5)])
def test_plot_gets_the_room_and_the_decision_panel_is_whole(qtbot, make_window, demo_archive, open_and_wait, size,
                                                            share):
    w = make_window()
    w.resize(*size)
    open_and_wait(w, demo_archive)
    w._fit_to_screen()  # as at start on a screen of this size (offscreen has another)
    w.resize(*size)
    qtbot.wait(50)
    assert w.agent_panel.compact and not w.agent_panel.transcript.isVisible()  # no run: folded
    plot_h = w.viewer.plot.height()
    assert plot_h >= share * size[1], f"plot only {plot_h} px high in a {size} window"
    right = w.decision.parentWidget().mapTo(w, QPoint(w.decision.parentWidget().width(), 0)).x()
    assert right <= w.width()  # the decision panel ends inside the window
    for name in ("YES", "NO", "UNSURE"):  # every decision button is drawn whole
        b = w.decision.buttons[name]
        assert b.visibleRegion().boundingRect().width() == b.width()
    w.run_agent()  # a run unfolds the panel; the plot keeps a usable height
    qtbot.waitUntil(lambda: not w.agent_panel.compact, timeout=5000)
    qtbot.waitUntil(lambda: not w.agent_panel.running, timeout=30000)
    qtbot.wait(50)
    assert w.agent_panel.transcript.isVisible() and w.agent_panel.transcript.height() >= 100
    assert w.viewer.plot.height() >= 0.3 * size[1] - 40
    verdict_bottom = w.agent_panel.verdict_box.mapTo(w.agent_panel, QPoint(0, 0)).y()
    transcript_bottom = w.agent_panel.transcript.mapTo(w.agent_panel, QPoint(0, w.agent_panel.transcript.height())).y()
    assert verdict_bottom >= transcript_bottom  # no box drawn over another


def test_folded_agent_panel_shows_its_notes_whole_after_a_run(qtbot, make_window, demo_archive, open_and_wait):
    """At 1366×768, after a run and a few spectra the folded pane squeezed "No Spec-o3 model installed…" to one
    clipped line under "No model run for this spectrum…": folding gave the pane its minimum size, not its notes'."""
    w = make_window()
    w.resize(1366, 768)
    open_and_wait(w, demo_archive)
    w._fit_to_screen()
    w.resize(1366, 768)
    w.run_agent()  # the scripted demo session (no model installed): the pane unfolds
    qtbot.waitUntil(lambda: not w.agent_panel.compact, timeout=5000)
    qtbot.waitUntil(lambda: not w.agent_panel.running, timeout=30000)
    for _ in range(3):
        w.vetting.step(1)
        qtbot.wait(50)
        panel = w.agent_panel
        assert panel.compact and panel.notice.isVisible() and panel.hint.isVisible()
        notice, hint = panel.notice, panel.hint
        assert notice.height() >= notice.heightForWidth(notice.width()), "the notice is clipped"
        assert notice.geometry().bottom() < hint.geometry().top(), "the notice runs into the hint"
        assert hint.geometry().bottom() <= panel.height()


def test_decision_header_and_line_note_fit_at_1366(qtbot, make_window, demo_archive, open_and_wait):
    """At 1366 px the archive table cut off its "Decision" header and the line bar cut "markers in vacuum"."""
    from speco3.gui.archive_model import COL

    w = make_window()
    w.resize(1366, 768)
    open_and_wait(w, demo_archive)
    w._fit_to_screen()
    w.resize(1366, 768)
    qtbot.wait(50)
    table, header = w.archive.table, w.archive.table.horizontalHeader()
    col = COL["decision"]
    right = header.sectionViewportPosition(col) + header.sectionSize(col)
    assert right <= table.viewport().width(), f"Decision header ends at {right} in a {table.viewport().width()} px table"
    assert header.sectionSize(col) >= header.fontMetrics().horizontalAdvance("Decision")
    note = w.viewer.line_note
    assert note.text().startswith("markers in vacuum")
    assert note.width() >= note.fontMetrics().horizontalAdvance("markers in vacuum"), note.width()


def test_scripted_run_keeps_the_window_at_1366(qtbot, make_window, demo_archive, open_and_wait):
    """A new-user trial: pressing A on the demo at 1366×768 grew the window to 1440 px and cut off the decision
    panel; the unwrapped status line "scripted demo — not a model: canned text, no throughput · 3.7 s" raised the
    agent pane's least width."""
    w = make_window()
    w.resize(1366, 768)
    open_and_wait(w, demo_archive)
    w._fit_to_screen()
    w.resize(1366, 768)
    qtbot.wait(50)
    w.run_agent()
    qtbot.waitUntil(lambda: not w.agent_panel.compact, timeout=5000)
    qtbot.waitUntil(lambda: not w.agent_panel.running, timeout=30000)
    qtbot.wait(100)
    assert "scripted demo — not a model" in w.agent_panel.status.text()
    assert w.width() <= 1366, f"the window grew to {w.width()} px"
    assert w.minimumSizeHint().width() <= 1366
    right = w.decision.parentWidget().mapTo(w, QPoint(w.decision.parentWidget().width(), 0)).x()
    assert right <= w.width()  # the decision panel still ends inside the window

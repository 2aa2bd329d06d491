"""Layout at a laptop's screen size: the plot gets the room, idle panels fold, nothing is cut off at the right."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint

pytestmark = pytest.mark.gui


@pytest.mark.parametrize("size", [(1366, 768), (1024, 640), (1920, 1080)])
def test_plot_gets_the_room_and_the_decision_panel_is_whole(qtbot, make_window, demo_archive, open_and_wait, size):
    w = make_window()
    w.resize(*size)
    open_and_wait(w, demo_archive)
    w._fit_to_screen()  # as at start on a screen of this size (offscreen has another)
    w.resize(*size)
    qtbot.wait(50)
    assert w.agent_panel.compact and not w.agent_panel.transcript.isVisible()  # no run: folded
    plot_h = w.viewer.plot.height()
    assert plot_h >= 0.42 * size[1], f"plot only {plot_h} px high in a {size} window"
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

"""The agent panel and the batch progress show the estimated time left (README: "progress and an estimate")."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


def test_panel_shows_the_time_left_while_running(qtbot, make_window, demo_archive, open_and_wait, engine_factory,
                                                 fake_models):
    engine_factory.delay_s = 0.01
    w = make_window()
    open_and_wait(w, demo_archive)
    panel = w.agent_panel
    seen = []
    w.inference.eta.connect(lambda job, left, queue: seen.append((left, queue)))
    w.run_agent()
    qtbot.waitUntil(lambda: "tok/s" in panel.status.text(), timeout=20000)
    qtbot.waitUntil(lambda: " left" in panel.status.text() and "estimating" not in panel.status.text(), timeout=20000)
    assert "about " in panel.status.text()
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=30000)
    assert " left" not in panel.status.text() and "estimating" not in panel.status.text()  # verdict in: no estimate
    assert seen and seen[-1][0] == 0.0 and all(q == -1.0 for _, q in seen)  # an interactive run has no queue
    assert any(left > 0 for left, _ in seen)


def test_batch_progress_shows_the_time_left_for_the_queue(qtbot, make_window, demo_archive, open_and_wait,
                                                          fake_models):
    w = make_window()
    open_and_wait(w, demo_archive)
    queue_estimates = []
    w.inference.eta.connect(lambda job, left, queue: queue_estimates.append(queue))
    formats = []
    w.inference.batch_progress.connect(lambda done, total: formats.append(w.batch.bar.format()))
    w.start_batch()
    qtbot.waitUntil(lambda: "left" in w.batch.bar.format(), timeout=30000)
    assert w.batch.bar.format().startswith("pre-screen %v / %m · about ")
    qtbot.waitUntil(lambda: not w.inference.batch_running(), timeout=120000)
    assert any(q > 0 for q in queue_estimates)

"""Worker threads and Qt objects: jobs carry plain data, closing joins every worker, Qt deletes the window.

A GUI deadlock came from a job whose engine factory was a closure over the agent controller: the worker thread
dropped the last reference, or the cyclic garbage collector ran there, and the window's widget tree was destroyed
off the GUI thread (Qt's destructors then waited for a lock the GUI thread held while it waited for the GIL).
The autouse fixture `qt_objects_die_on_gui_thread` (conftest) checks after every GUI test that no worker is left
running and that no Qt object is left for the garbage collector.
"""

from __future__ import annotations

import gc
import threading

import pytest
from gui_qtcheck import our_worker_threads, qt_garbage, qt_objects_reachable
from PySide6.QtCore import QCoreApplication, QEvent
from shiboken6 import isValid

from speco3.engine.choice import DEMO, InstalledModel

pytestmark = pytest.mark.gui


def test_reachability_walk_finds_a_widget_behind_a_closure(qtbot):
    """The walk used below does see a widget captured by a closure (the shape of the original bug)."""
    from PySide6.QtWidgets import QLabel

    label = QLabel("x")
    qtbot.addWidget(label)
    assert qt_objects_reachable(lambda: label.text()) == ["QLabel"]


def test_agent_jobs_carry_no_qt_objects(qtbot, make_window, demo_archive, open_and_wait, fake_models):
    w = make_window()
    open_and_wait(w, demo_archive)
    task = w.agent._task("cv")
    for choice in (InstalledModel("test-model"), DEMO):
        screening = w.agent.screening(task, choice, resume=False)
        es = w.agent.run_engine_settings(task, choice)  # as `run` and the batch build them
        job = w.agent._job(w.vetting.entry, screening, choice, es, spectrum=w.vetting.spectrum)
        assert qt_objects_reachable(job) == [], choice
        assert job.engine_factory() is not None  # the factory still opens an engine


def test_closing_during_a_run_joins_the_worker_and_qt_deletes_the_window(qtbot, make_window, demo_archive,
                                                                         open_and_wait, engine_factory, fake_models):
    engine_factory.delay_s = 0.05  # a run that is still streaming when the window closes
    w = make_window()
    open_and_wait(w, demo_archive)
    w.run_agent()
    qtbot.waitUntil(lambda: "continuum" in w.agent_panel.transcript.toPlainText(), timeout=20000)
    assert w.inference.isRunning() and w.agent.interactive_job is not None
    w.close()
    assert not w.inference.isRunning()  # joined in closeEvent, not merely asked to stop
    assert our_worker_threads() == []
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not isValid(w)  # deleted by Qt on this thread (WA_DeleteOnClose), not by the garbage collector
    assert [n for n in qt_garbage() if n.startswith("speco3.")] == []


def test_garbage_is_collected_only_on_the_gui_thread_while_a_window_lives(qtbot, make_window, demo_archive,
                                                                          open_and_wait, engine_factory, fake_models):
    """pyqtgraph keeps Python-owned menus in reference cycles; the automatic collector would destroy them on
    whichever thread allocates (the inference thread streaming tokens). The window turns it into a GUI-thread timer."""
    collected_on: set[str] = set()

    def note(phase, info):
        if phase == "start":
            collected_on.add(threading.current_thread().name)

    engine_factory.delay_s = 0.002
    w = make_window()
    assert not gc.isenabled()
    open_and_wait(w, demo_archive)
    gc.callbacks.append(note)
    try:
        for _ in range(3):
            w.run_agent()
            qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=30000)
        junk = [[[] for _ in range(20)] for _ in range(2000)]  # enough allocations to pass every threshold
        for row in junk:
            row.append(row)  # cycles for the collector to find
        del junk
        qtbot.waitUntil(lambda: "MainThread" in collected_on, timeout=5000)  # the GUI-thread timer collected
    finally:
        gc.callbacks.remove(note)
    assert collected_on == {"MainThread"}


def test_reopening_an_archive_replaces_the_scan_cleanly(qtbot, make_window, demo_archive, open_and_wait, tmp_path):
    """A second open while the first scan runs: the first worker is joined and its late signals are ignored."""
    w = make_window()
    w.open_archive(demo_archive)
    open_and_wait(w, demo_archive)
    assert w.index is not None and w._index_worker is None
    assert w.table_model.rowCount() == 20

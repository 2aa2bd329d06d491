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


def test_the_inference_thread_turns_the_run_services_typed_events_into_signals(qtbot, tmp_path):
    """`InferenceThread` is the Qt face of `speco3.vetting.runs.RunService`: a real scripted run, recorded in a real
    store, arrives as queued signals on the GUI thread with typed payloads (`RunInfo`, `RunEnded`), a queued run
    cancelled before it starts as ``failed_job``, and `stop` joins the worker."""
    from PySide6.QtWidgets import QWidget

    from speco3.agent import get_task
    from speco3.engine.base import EngineSettings
    from speco3.engine.choice import Scripted
    from speco3.engine.scripted import ScriptedEngine
    from speco3.gui.workers import InferenceThread
    from speco3.vetting import VettingStore
    from speco3.vetting.runs import RunEnded, RunInfo, RunJob
    from speco3.vetting.screening import Screening, VetItem
    from speco3_testkit.spectra import make_spectrum, pillow_render

    zoom = ('<think>Check Hα.</think>\n<tool_call>\n{"name": "spectral_visualization_tool", "arguments": '
            '{"label": "Hα", "wavelength_range": [6500, 6600]}}\n</tool_call>')
    yes = "<think>Emission.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."
    owner = QWidget()
    qtbot.addWidget(owner)
    thread = InferenceThread(pillow_render, owner)
    store = VettingStore(tmp_path / "s.sqlite")
    screening = Screening(store, get_task("cv"), pillow_render, resume=False, share=False)
    spectra = [make_spectrum(name=f"s{i}.fits", seed=i) for i in range(2)]
    items = [VetItem(key=f"/data/s{i}.fits#0", load=lambda s=s: s, name=s.name) for i, s in enumerate(spectra)]
    key = Scripted("two-turns.json").engine_key(EngineSettings())
    jobs = [RunJob(it.key, it, screening, key, lambda: ScriptedEngine([zoom, yes], delay_s=0.002)) for it in items]
    seen: dict[str, list] = {name: [] for name in ("started", "tokens", "step", "finished", "failed", "eta", "status")}
    main = threading.current_thread()
    thread.started_job.connect(lambda *a: seen["started"].append((threading.current_thread() is main, *a)))
    thread.tokens.connect(lambda *a: seen["tokens"].append(a))
    thread.step.connect(lambda *a: seen["step"].append(a))
    thread.finished_job.connect(lambda *a: seen["finished"].append(a))
    thread.failed_job.connect(lambda *a: seen["failed"].append(a))
    thread.eta.connect(lambda *a: seen["eta"].append(a))
    thread.engine_status.connect(seen["status"].append)
    try:
        first = thread.submit(jobs[0])
        second = thread.submit(jobs[1])
        assert thread.busy()
        assert thread.cancel_current()  # nothing runs yet: both queued runs are cancelled before they start
        assert sorted(a[0] for a in seen["failed"]) == [first, second]
        assert {a[2] for a in seen["failed"]} == {"cancelled before it started"}
        again = RunJob(items[0].key, items[0], screening, key, lambda: ScriptedEngine([zoom, yes], delay_s=0.002))
        job_id = thread.submit(again)
        thread.start()
        qtbot.waitUntil(lambda: bool(seen["finished"]), timeout=30000)
    finally:
        thread.stop()
    assert not thread.isRunning()
    (on_gui, started_id, started_key, info), = seen["started"]
    assert on_gui and started_id == job_id and started_key == items[0].key  # queued to the GUI thread
    assert isinstance(info, RunInfo) and info.task == "cv" and info.backend
    (fin_id, fin_key, ended), = seen["finished"]
    assert isinstance(ended, RunEnded) and fin_id == job_id and fin_key == items[0].key
    assert ended.verdict is not None and ended.verdict.outcome == "YES" and ended.info == info
    assert "Check Hα" in "".join(text for jid, _i, text in seen["tokens"] if jid == job_id)
    assert [type(step).__name__ for _jid, step in seen["step"]][-1] == "VerdictStep"
    assert seen["eta"] and all(isinstance(left, float) for _jid, left, _q in seen["eta"])
    assert seen["status"][0] == "loading scripted two-turns.json …"
    assert [v.spectrum_key for v in store.model_verdicts("cv")] == [items[0].key]
    store.close()

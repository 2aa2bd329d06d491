"""Background workers: archive indexing and the one inference thread (interactive runs and batch pre-screen).

The GUI thread never blocks: every long task runs here and reports back through queued Qt signals.

* `IndexWorker` scans an archive folder with its own `ArchiveIndex` connection (SQLite connections stay in
  their thread) and reports progress; the GUI then opens its own connection for queries.
* `InferenceThread` is the Qt adapter of the run service (`speco3.vetting.runs.RunService`, which owns the run
  queue, the engine, slot refill and time estimates, and reports typed events): it runs the service on one worker
  thread (llama.cpp contexts are not thread-safe; one thread drives them) and turns each event into a signal.

Thread rules (a GUI deadlock came from breaking them): a worker receives plain data only (a
`speco3.vetting.runs.RunJob` holds no Qt object, and its engine factory no widget), reports through signals of a
QObject that lives on the GUI thread, and is stopped *and joined* before its widgets go. The QObjects here have parents on the GUI thread, so Qt, not Python
reference counting or the cyclic garbage collector (which runs on whichever thread allocates), destroys them, on
the GUI thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from speco3.agent.tool import RenderFn
from speco3.errors import StoreError
from speco3.render import release_thread_scene, render_view
from speco3.vetting import stopping
from speco3.vetting.runs import (
    BatchFollow,
    BatchProgress,
    BatchState,
    EngineStatus,
    RunEnded,
    RunEstimate,
    RunEvent,
    RunFailed,
    RunJob,
    RunService,
    RunStarted,
    RunStep,
    RunTokens,
)
from speco3.vetting.stopping import Certificate
from speco3.vetting.store import VettingStore

log = logging.getLogger(__name__)


def release_render_scene() -> None:
    """Drop this thread's offscreen render scene while the thread can still run Python.

    `speco3.render` keeps one Qt scene per thread; left there, it would be destroyed while the thread's Python
    state is torn down, which crashes PySide6. Call at the end of a worker thread.
    """
    release_thread_scene()


def render_png(view) -> bytes:
    """The agent's render function: the training-faithful renderer, PNG bytes."""
    return render_view(view).png


def join_thread(thread: threading.Thread, what: str, warn_every_s: float = 5.0) -> None:
    """Join ``thread`` however long it takes, logging a warning every ``warn_every_s`` seconds."""
    waited = 0.0
    while True:
        thread.join(warn_every_s)
        if not thread.is_alive():
            return
        waited += warn_every_s
        log.warning("waiting for %s to stop (%.0f s)", what, waited)


class BackgroundTask(QObject):
    """Runs `work` on a Python thread; the object itself lives, and is destroyed, on the GUI thread.

    Give it a parent (or delete it with ``deleteLater`` after `stop`). Signals emitted in `work` are queued to the
    GUI thread. `stop` sets `cancel` and joins the thread. Subclasses implement `work` with plain data only.
    """

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self.cancel = threading.Event()
        self._name = name
        self._thread: threading.Thread | None = None

    def work(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self.work, name=self._name, daemon=True)
            self._thread.start()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, cancel: bool = True) -> None:
        """Ask `work` to stop (``cancel``) and join its thread."""
        if cancel:
            self.cancel.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            join_thread(thread, self._name)


class IndexWorker(BackgroundTask):
    """Scan an archive folder on a worker thread. Signals: progress(done, total, path), finished(root), failed(msg)."""

    progress = Signal(int, int, str)
    finished = Signal(str)
    failed = Signal(str)

    def __init__(self, root: str | Path, parent: QObject | None = None):
        super().__init__("speco3-index", parent)
        self.root = str(root)

    def work(self) -> None:
        from speco3.spectra import ArchiveIndex

        last = [0.0]

        def progress(path: str, done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] > 0.05 or done == total:
                last[0] = now
                self.progress.emit(int(done), int(total), str(path))
            if self.cancel.is_set():
                raise InterruptedError("indexing cancelled")

        try:
            index = ArchiveIndex.for_root(self.root)
            try:
                index.scan(self.root, progress=progress, workers=2)
            finally:
                index.close()
        except InterruptedError:
            self.failed.emit("indexing cancelled")
            return
        except Exception as exc:
            log.exception("indexing %s failed", self.root)
            self.failed.emit(f"indexing {self.root} failed: {exc}")
            return
        self.finished.emit(self.root)


class InferenceThread(BackgroundTask):
    """The Qt face of the run service (`speco3.vetting.runs.RunService`): a QObject on the GUI thread that runs
    the service's `serve` on one Python worker thread and turns its typed events into queued signals.

    The worker is a plain `threading.Thread` (a Python ``QThread.run`` override crashes PySide6 6.12 on Python 3.11
    when the thread ends); signals emitted from it are queued to the GUI thread. `stop` cancels, then joins it:
    call it before the parent widget is destroyed.

    Signals
    -------
    started_job(job_id, key, RunInfo) ; tokens(job_id, rollout, text) ; step(job_id, step)
    finished_job(job_id, key, RunEnded) ; failed_job(job_id, key, message) ; batch_progress(done, total)
    batch_state(state) ; engine_status(text) ; eta(job_id, left, queue_left: -1 when unknown)
    batch_follow(job_id, key, in_flight) : the batch item the time estimate follows (0, "", 0 when none)
    """

    started_job = Signal(int, str, object)  # RunInfo
    tokens = Signal(int, int, str)  # (job id, rollout index, text): every rollout streams
    step = Signal(int, object)
    finished_job = Signal(int, str, object)  # RunEnded
    failed_job = Signal(int, str, str)
    batch_progress = Signal(int, int)
    batch_state = Signal(str)
    engine_status = Signal(str)
    eta = Signal(int, float, float)  # job id, seconds left for it, for it and the batch queue (-1: unknown)
    batch_follow = Signal(int, str, int)

    def __init__(self, render: RenderFn = render_png, parent: QObject | None = None):
        super().__init__("speco3-inference", parent)
        self.render = render
        self.service = RunService(self._emit)

    # -- GUI-thread API: the service's (see `RunService`) ----------------------------------------------------------
    def submit(self, job: RunJob) -> int:
        return self.service.submit(job)

    def start_batch(self, jobs: list[RunJob]) -> None:
        self.service.start_batch(jobs)

    def pause_batch(self, paused: bool = True) -> None:
        self.service.pause_batch(paused)

    def cancel_batch(self) -> None:
        self.service.cancel_batch()

    def cancel_current(self) -> bool:
        return self.service.cancel_current()

    def batch_running(self) -> bool:
        return self.service.batch_running()

    def busy(self) -> bool:
        return self.service.busy()

    def isRunning(self) -> bool:  # noqa: N802 - mirrors QThread
        return self.running()

    def _emit(self, event: RunEvent) -> None:
        """One run event as its signal (on the thread that caused it; Qt queues it to the GUI thread)."""
        match event:
            case RunStarted(job_id, key, info):
                self.started_job.emit(job_id, key, info)
            case RunTokens(job_id, rollout, text):
                self.tokens.emit(job_id, rollout, text)
            case RunStep(job_id, step):
                self.step.emit(job_id, step)
            case RunEnded():
                self.finished_job.emit(event.job_id, event.key, event)
            case RunFailed(job_id, key, message):
                self.failed_job.emit(job_id, key, message)
            case RunEstimate(job_id, left, queue_left):
                self.eta.emit(job_id, -1.0 if left is None else left, -1.0 if queue_left is None else queue_left)
            case BatchProgress(done, total):
                self.batch_progress.emit(done, total)
            case BatchState(state):
                self.batch_state.emit(state)
            case BatchFollow(job_id, key, in_flight):
                self.batch_follow.emit(job_id, key, in_flight)
            case EngineStatus(text):
                self.engine_status.emit(text)

    def stop(self, cancel: bool = True) -> None:
        """Cancel everything, close the engine and join the worker thread (however long the current step takes).

        A running generation stops at its next token; an engine that is still loading finishes loading first (a
        native call cannot be interrupted). Joining without a bound is deliberate: destroying widgets while the
        worker still runs is what deadlocks Qt. (``cancel``: as `BackgroundTask.stop`; the runs are always
        cancelled, a run left going would outlive its widgets.)
        """
        self.service.stop()
        super().stop(cancel)  # joins the worker thread

    def work(self) -> None:
        try:
            self.service.serve()
        finally:
            release_render_scene()


# -- the stopping test (speco3.vetting.stopping) -------------------------------------------------------------------


@dataclass(frozen=True)
class StoppingJob:
    """One request to `StoppingWorker`: the stopping test of ``task`` in ``store`` (`speco3.vetting.stopping.current`:
    at the latest draw's target, or ``recall`` and ``confidence``, the app's settings, until a draw records one);
    ``audit``: first add to the audit sample what the test asks for (`speco3.vetting.stopping.audit_rest`, "Audit the
    rest", recorded as ``vetter``)."""

    job_id: int
    store: VettingStore
    task: str
    recall: float
    confidence: float
    audit: bool = False
    vetter: str = ""
    archive: int | None = None  # spectra in the archive (the index), for the count of those not screened


class StoppingWorker(BackgroundTask):
    """The stopping test (`speco3.vetting.stopping`) off the GUI thread: at 170,000 screened spectra one test reads
    and orders them all (1-2 s), which would freeze the queue after every decision.

    Jobs run one at a time, in the order submitted; a refresh still waiting when another is submitted is dropped (the
    later one answers for both: no signal for it), an audit never is. A refresh reads through a read-only connection
    of its own to the store's file (SQLite's WAL lets it read while the window writes, so the window never waits
    for it); an audit (it writes the draw), a store kept in memory and a store that cannot be opened a second time
    go through the window's store, whose connection serialises every use under one lock (as the inference thread's
    recordings do). Signal: done(job id, `Certificate` or None, error text: "" when none)."""

    done = Signal(int, object, str)

    def __init__(self, parent: QObject | None = None):
        super().__init__("speco3-stopping", parent)
        self._jobs: collections.deque[StoppingJob] = collections.deque()
        self._wake = threading.Condition()

    def submit(self, job: StoppingJob) -> None:
        """Queue ``job`` (see class doc) and start the thread when it is not running."""
        with self._wake:
            if not job.audit:
                self._jobs = collections.deque(j for j in self._jobs if j.audit)
            self._jobs.append(job)
            self._wake.notify()
        self.start()

    def pending(self) -> int:
        """Jobs submitted and not yet started."""
        with self._wake:
            return len(self._jobs)

    def stop(self, cancel: bool = True) -> None:
        with self._wake:
            if cancel:
                self.cancel.set()
            self._jobs.clear()
            self._wake.notify_all()
        super().stop(cancel)

    def work(self) -> None:
        while True:
            with self._wake:
                while not self._jobs and not self.cancel.is_set():
                    self._wake.wait()
                if self.cancel.is_set():
                    return
                job = self._jobs.popleft()
            try:
                cert = self._run(job)
            except StoreError as exc:  # a store that cannot be read or written now: said, not a crash
                self.done.emit(job.job_id, None, str(exc))
            except Exception as exc:  # the app's boundary: logged with its traceback, the thread goes on
                log.exception("the stopping test of task %s failed", job.task)
                self.done.emit(job.job_id, None, f"{type(exc).__name__}: {exc}")
            else:
                self.done.emit(job.job_id, cert, "")

    @staticmethod
    def _run(job: StoppingJob) -> Certificate | None:
        if job.audit:
            return stopping.audit_rest(job.store, job.task, job.vetter, job.recall, job.confidence, job.archive)
        reader = None
        if not job.store.is_in_memory:
            try:
                reader = VettingStore(job.store.path, readonly=True)
            except StoreError:  # e.g. unmerged changes in a read-only place: read through the window's connection
                log.info("the stopping test reads %s through the window's connection", job.store.path)
        if reader is None:
            return stopping.current(job.store, job.task, job.recall, job.confidence, job.archive)
        with reader:
            return stopping.current(reader, job.task, job.recall, job.confidence, job.archive)

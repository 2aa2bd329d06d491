"""Background workers: archive indexing and the one inference thread (interactive runs and batch pre-screen).

The GUI thread never blocks: every long task runs here and reports back through queued Qt signals.

* `IndexWorker` scans an archive folder with its own `ArchiveIndex` connection (SQLite connections stay in
  their thread) and reports progress; the GUI then opens its own connection for queries.
* `InferenceThread` owns the engine (llama.cpp contexts are not thread-safe; one thread drives them). It serves
  interactive runs first and batch items in between, so the vetter can ask the agent about the current spectrum
  while a batch pre-screen is running. Tokens are coalesced (≈ 25 updates per second) before crossing threads.
  With one rollout per spectrum on a llama.cpp engine with parallel sequences, batch items run several at once
  on the same thread (`speco3.gui.slot_batch`); a paused batch or a waiting interactive run stops the refill and
  goes on once the spectra in flight are done.

Thread rules (a GUI deadlock came from breaking them): a worker receives plain data only (`AgentJob` holds no Qt
object, and its engine factory no widget), reports through signals of a QObject that lives on the GUI thread, and
is stopped *and joined* before its widgets go. The QObjects here have parents on the GUI thread, so Qt, not Python
reference counting or the cyclic garbage collector (which runs on whichever thread allocates), destroys them, on
the GUI thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from speco3.agent.eta import QueueEstimate, Rates, TimeToVerdict
from speco3.gui.collector import collect_garbage_on_gui_thread, restore_automatic_garbage_collection  # noqa: F401
from speco3.gui.slot_batch import serve_slots, slot_width
from speco3.spectra.model import Spectrum

log = logging.getLogger(__name__)

EngineFactory = Callable[[], Any]  # () -> Engine (loaded lazily by the agent loop)


def release_render_scene() -> None:
    """Drop this thread's offscreen render scene while the thread can still run Python.

    `speco3.render` keeps one Qt scene per thread; left there, it would be destroyed while the thread's Python
    state is torn down, which crashes PySide6. Call at the end of a worker thread.
    """
    from speco3.render import release_thread_scene

    release_thread_scene()


def render_png(view) -> bytes:
    """The agent's render function: the training-faithful renderer, PNG bytes."""
    from speco3.render import render_view

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


@dataclass
class AgentJob:
    """One agent run. ``spectrum`` or ``entry`` (loaded in the worker) must be given."""

    key: str
    task: Any
    engine_key: str
    engine_factory: EngineFactory
    spectrum: Spectrum | None = None
    entry: Any = None
    batch: bool = False
    scripted: bool = False
    job_id: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)
    plan: Any = None  # a `speco3.agent.rollouts.RolloutPlan` (K sampled rollouts); None: one run as the engine samples


def engine_label(engine_key: str) -> str:
    """The model an engine key names, for people: ``tiny-q8_0`` or ``MODEL on URL`` (the key also holds the
    settings the engine was opened with, which are not shown)."""
    parts = engine_key.split("|")
    if parts[0] == "server" and len(parts) > 2:
        return f"{parts[2] or 'the served model'} on {parts[1]}"
    return parts[0]


class InferenceThread(BackgroundTask):
    """The owner of the engine: a QObject on the GUI thread (signals, queues) driving one Python worker thread.

    The worker is a plain `threading.Thread` (a Python ``QThread.run`` override crashes PySide6 6.12 on Python 3.11
    when the thread ends); signals emitted from it are queued to the GUI thread. `stop` cancels, then joins it:
    call it before the parent widget is destroyed.

    Signals
    -------
    started_job(job_id, key, info) ; tokens(job_id, text) ; step(job_id, step) ; finished_job(job_id, key, verdict, info)
    failed_job(job_id, key, message) ; batch_progress(done, total) ; batch_state(state) ; engine_status(text)
    batch_follow(job_id, key, in_flight) : the batch item the time estimate follows (0, "", 0 when none)
    """

    started_job = Signal(int, str, object)
    tokens = Signal(int, str)
    step = Signal(int, object)
    finished_job = Signal(int, str, object, object)
    failed_job = Signal(int, str, str)
    batch_progress = Signal(int, int)
    batch_state = Signal(str)
    engine_status = Signal(str)
    eta = Signal(int, float, float)  # job id, seconds left for it, for it and the batch queue (-1: unknown)
    batch_follow = Signal(int, str, int)

    def __init__(self, render: Callable[[Any], bytes] = render_png, parent: QObject | None = None):
        super().__init__("speco3-inference", parent)
        self.render = render
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._interactive: collections.deque[AgentJob] = collections.deque()
        self._batch: collections.deque[AgentJob] = collections.deque()
        self._batch_total = 0
        self._batch_done = 0
        self._paused = False
        self._current: AgentJob | None = None
        self._flight: dict[int, AgentJob] = {}  # batch items running together in slots (`speco3.gui.slot_batch`)
        self._engine = None
        self._engine_key: str | None = None
        self._next_id = 1
        self._queue_eta = QueueEstimate()

    # -- GUI-thread API ------------------------------------------------------------------------------------------
    def isRunning(self) -> bool:  # noqa: N802 - mirrors QThread
        return self.running()

    def submit(self, job: AgentJob) -> int:
        """Queue an interactive run (served before batch items); returns its job id."""
        with self._lock:
            job.job_id = self._next_id
            self._next_id += 1
            self._interactive.append(job)
        self._wake.set()
        return job.job_id

    def start_batch(self, jobs: list[AgentJob]) -> None:
        with self._lock:
            for job in jobs:
                job.job_id = self._next_id
                self._next_id += 1
                job.batch = True
            self._batch = collections.deque(jobs)
            self._batch_total, self._batch_done, self._paused = len(jobs), 0, False
        self.batch_state.emit("running")
        self.batch_progress.emit(0, len(jobs))
        self._wake.set()

    def pause_batch(self, paused: bool = True) -> None:
        with self._lock:
            self._paused = paused
        self.batch_state.emit("paused" if paused else "running")
        self._wake.set()

    def cancel_batch(self) -> None:
        with self._lock:
            self._batch.clear()
            self._paused = False
            running = self._running()
        for job in running:
            if job.batch:
                job.cancel.set()
        self.batch_state.emit("cancelled")

    def cancel_current(self) -> bool:
        """Cancel the running interactive job (and queued ones); True when something was cancelled."""
        with self._lock:
            cur = self._current
            queued = list(self._interactive)
            self._interactive.clear()
        for job in queued:
            self.failed_job.emit(job.job_id, job.key, "cancelled before it started")
        if cur is not None and not cur.batch:
            cur.cancel.set()
            return True
        return bool(queued)

    def batch_running(self) -> bool:
        with self._lock:
            return bool(self._batch) or any(job.batch for job in self._running())

    def busy(self) -> bool:
        with self._lock:
            return bool(self._running() or self._interactive)

    def _running(self) -> list[AgentJob]:
        """The jobs under way (call with the lock held)."""
        return [job for job in (self._current, *self._flight.values()) if job is not None]

    def stop(self) -> None:
        """Cancel everything, close the engine and join the worker thread (however long the current step takes).

        A running generation stops at its next token; an engine that is still loading finishes loading first (a
        native call cannot be interrupted). Joining without a bound is deliberate: destroying widgets while the
        worker still runs is what deadlocks Qt.
        """
        with self._lock:
            self._stop = True
            self._batch.clear()
            self._interactive.clear()
            running = self._running()
        for job in running:
            job.cancel.set()
        self._wake.set()
        super().stop()  # joins the worker thread

    # -- worker thread -------------------------------------------------------------------------------------------
    def _next_job(self) -> AgentJob | None:
        with self._lock:
            if self._stop:
                return None
            if self._interactive:
                self._current = self._interactive.popleft()
            elif self._batch and not self._paused:
                self._current = self._batch.popleft()
            else:
                self._current = None
            return self._current

    def work(self) -> None:
        try:
            self._serve()
        finally:
            self._close_engine()
            release_render_scene()

    def _serve(self) -> None:
        while True:
            with self._lock:
                if self._stop:
                    break
            job = self._next_job()
            if job is None:
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            try:
                if job.batch and slot_width(self, job) > 1:
                    serve_slots(self, job)  # reports and counts each item itself
                    continue
                self._run_job(job)
            except Exception as exc:  # never let the thread die
                log.exception("agent job on %s failed", job.key)
                self.failed_job.emit(job.job_id, job.key, f"{type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    self._current = None
            self._item_done(job)

    def _item_done(self, job: AgentJob) -> None:
        """Count a finished batch item and report the batch's progress (nothing for an interactive run)."""
        if not job.batch:
            return
        with self._lock:
            self._batch_done += 1
            done, total, left = self._batch_done, self._batch_total, len(self._batch) + len(self._flight)
        self.batch_progress.emit(done, total)
        if not left and done >= total:
            self.batch_state.emit("finished")

    def _emit_eta(self, job: AgentJob, eta: TimeToVerdict, parallel: int = 1) -> None:
        """The time left for ``job`` and, for a batch item, the queue: the items queued and the others in flight,
        ``parallel`` at a time."""
        with self._lock:
            queued = len(self._batch) + max(0, len(self._flight) - 1) if job.batch else 0
        left = eta.remaining()
        queue = self._queue_eta.remaining(eta, queued, parallel) if job.batch else None
        self.eta.emit(job.job_id, -1.0 if left is None else left, -1.0 if queue is None else queue)

    def _close_engine(self) -> None:
        if self._engine is not None:
            try:
                self._engine.close()
            except Exception:
                log.exception("closing the engine failed")
        self._engine, self._engine_key = None, None

    def _engine_for(self, job: AgentJob):
        if job.scripted:  # demo scripts are per spectrum; never cached
            return job.engine_factory()
        if self._engine_key != job.engine_key:
            self._close_engine()
            name = engine_label(job.engine_key)
            self.engine_status.emit(f"loading {name} …")
            t0 = time.perf_counter()
            self._engine = job.engine_factory()
            self._engine.load()
            self._engine_key = job.engine_key
            extra = getattr(self._engine.stats(), "extra", {}) if hasattr(self._engine, "stats") else {}
            fit = "; ".join([extra.get("fit", ""), *extra.get("fit_notes", ())]).strip("; ")
            self.engine_status.emit(f"{name} loaded in {time.perf_counter() - t0:.1f} s"
                                    + (f": {fit}" if fit else ""))
        return self._engine

    def _job_started(self, job: AgentJob, engine) -> dict:
        """The run's description (what `AgentController` records with it); emitted as ``started_job``."""
        stats = engine.stats() if hasattr(engine, "stats") else None
        info = {"backend": getattr(stats, "backend", "?"), "model": getattr(engine.info, "model_id", "?"),
                "quant": getattr(engine.info, "quant", None), "scripted": job.scripted,
                "settings": engine.settings.to_dict() if hasattr(engine, "settings") else {},
                "prompt_version": getattr(job.task, "prompt_version", None), "task": getattr(job.task, "id", None),
                "t0": time.time()}
        self.started_job.emit(job.job_id, job.key, info)
        return info

    def _job_finished(self, job: AgentJob, run, spectrum: Spectrum, info: dict) -> None:
        """Report a run's end (``finished_job`` with its final step: the first cancelled one, else rollout 0's)."""
        final = next((f for f in run.finals if f is None or f.outcome.value == "cancelled"), run.finals[0])
        if final is not None and final.kind == "verdict" and not job.scripted:
            self._queue_eta.finished(final)
        info.update(run=run, steps=run.traces[0].steps, spectrum=spectrum, elapsed=time.time() - info["t0"])
        self.finished_job.emit(job.job_id, job.key, final, info)

    def _run_job(self, job: AgentJob) -> None:
        from speco3.vetting.rollout_runs import run_traced

        spectrum = job.spectrum if job.spectrum is not None else job.entry.load()
        engine = self._engine_for(job)
        stats = engine.stats() if hasattr(engine, "stats") else None
        info = self._job_started(job, engine)
        buf: list[str] = []
        last = [time.perf_counter()]

        def flush() -> None:
            if buf:
                self.tokens.emit(job.job_id, "".join(buf))
                buf.clear()
            last[0] = time.perf_counter()

        def on_token(piece: str) -> None:
            buf.append(piece)
            if time.perf_counter() - last[0] > 0.04:
                flush()

        k = job.plan.k if job.plan is not None else 1
        eta = self._queue_eta.new_episode(Rates.from_stats(stats))

        def on_step(i: int, step) -> None:  # the panel follows the first rollout (its verdict is not the fold's)
            flush()
            if i == 0 and not job.batch and not (k > 1 and step.kind == "verdict"):
                self.step.emit(job.job_id, step)
            if i == 0:  # the estimate follows the first rollout too (K rollouts advance together)
                eta.observe(step, engine.stats() if step.kind == "assistant" and hasattr(engine, "stats") else None)
                self._emit_eta(job, eta)

        run = run_traced(engine, spectrum, job.task, self.render, job.plan, cancel=job.cancel, on_step=on_step,
                         on_token=on_token if k == 1 else None)
        flush()
        self._job_finished(job, run, spectrum, info)

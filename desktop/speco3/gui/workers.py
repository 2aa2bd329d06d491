"""Background workers: archive indexing and the one inference thread (interactive runs and batch pre-screen).

The GUI thread never blocks: every long task runs here and reports back through queued Qt signals.

* `IndexWorker` scans an archive folder with its own `ArchiveIndex` connection (SQLite connections stay in
  their thread) and reports progress; the GUI then opens its own connection for queries.
* `InferenceThread` owns the engine (llama.cpp contexts are not thread-safe; one thread drives them). It serves
  interactive runs first and batch items in between, so the vetter can ask the agent about the current spectrum
  while a batch pre-screen is running. Every run goes through the screening core (`speco3.vetting.screening`,
  the path of ``spec-o3 vet``): the core records each verdict row, rollouts and traces on this thread, and the
  thread turns the core's events into signals. Tokens are coalesced (≈ 25 updates per second) before crossing
  threads. With one rollout per spectrum on a llama.cpp engine with parallel sequences, batch items run several
  at once (the core's `speco3.vetting.schedulers.on_slots`, as ``vet --slots N``); a paused batch, a waiting
  interactive run, a stop or an item for another engine stops the refill, and the spectra in flight finish first.
  A cancel ends the items in flight, each reported cancelled (nothing recorded, so a later pre-screen does them
  again). The time estimate follows one item in flight, the earliest started (``batch_follow`` names it); the
  queue estimate counts the others as running N at a time.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from speco3.agent.eta import QueueEstimate, Rates, TimeToVerdict
from speco3.agent.steps import AssistantStep, VerdictStep
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.engine.choice import EngineKey
from speco3.engine.parallel import parallel_sequences
from speco3.render import release_thread_scene, render_view
from speco3.vetting.schedulers import on_slots, one_at_a_time
from speco3.vetting.screening import (
    Cancelled,
    Event,
    Recorded,
    Scheduler,
    Screening,
    Skipped,
    Stepped,
    VetItem,
    screen,
)

log = logging.getLogger(__name__)

EngineFactory = Callable[[], Engine]  # () -> Engine (loaded by the inference thread)


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


@dataclass
class AgentJob:
    """One agent run: the spectrum (``item``: loaded in the worker unless it holds the spectrum), where and how it
    is screened and recorded (``screening``: the store, task, plan and cancel; batch items share one), and the
    engine to run it on."""

    key: str
    item: VetItem
    screening: Screening
    engine_key: EngineKey
    engine_factory: EngineFactory
    batch: bool = False
    scripted: bool = False
    job_id: int = 0

    @property
    def task(self) -> Task:
        return self.screening.task

    @property
    def cancel(self) -> threading.Event:
        return self.screening.cancel

    @property
    def k(self) -> int:
        """The rollouts' budget (K; the most ``--rollouts auto`` runs)."""
        return self.screening.rollouts

    @property
    def first_round(self) -> int:
        """The rollouts that start together (K; ``--rollouts auto``: its first round)."""
        plan = self.screening.plan
        return 1 if plan is None else plan.first_round


@dataclass
class _Live:
    """A job under way on the inference thread: what ``started_job`` said, and its time estimate."""

    job: AgentJob
    info: dict
    eta: TimeToVerdict


def engine_label(engine_key: EngineKey) -> str:
    """The model an engine key names, for people: ``tiny-q8_0`` or ``MODEL on URL`` (the key also holds the
    settings the engine was opened with, which are not shown)."""
    return engine_key.label


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
    tokens = Signal(int, int, str)  # (job id, rollout index, text): every rollout streams
    step = Signal(int, object)
    finished_job = Signal(int, str, object, object)
    failed_job = Signal(int, str, str)
    batch_progress = Signal(int, int)
    batch_state = Signal(str)
    engine_status = Signal(str)
    eta = Signal(int, float, float)  # job id, seconds left for it, for it and the batch queue (-1: unknown)
    batch_follow = Signal(int, str, int)

    def __init__(self, render: RenderFn = render_png, parent: QObject | None = None):
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
        self._flight: dict[int, AgentJob] = {}  # batch items running together in slots
        self._engine: Engine | None = None
        self._engine_key: EngineKey | None = None
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
                engine = self._engine_for(job)
                width = parallel_sequences(engine) if job.batch and self._one_rollout(job) else 1
                if width > 1:
                    self._serve_slots(job, engine, width)  # reports and counts each item itself
                    continue
                self._run_job(job, engine)
            except Exception as exc:  # the thread goes on; the traceback is in the log
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

    def _engine_for(self, job: AgentJob) -> Engine:
        if job.scripted:  # demo scripts are per spectrum; never cached
            engine = job.engine_factory()
            engine.load()
            return engine
        if self._engine is None or self._engine_key != job.engine_key:
            self._close_engine()
            name = engine_label(job.engine_key)
            self.engine_status.emit(f"loading {name} …")
            t0 = time.perf_counter()
            engine = job.engine_factory()
            engine.load()
            self._engine, self._engine_key = engine, job.engine_key
            stats = engine.stats()
            extra = stats.extra
            fit = "; ".join([extra.get("fit", ""), *extra.get("fit_notes", ())]).strip("; ")
            notice = extra.get("backend_notice")  # the CPU fallback of a build with loadable backends
            self.engine_status.emit(f"{name} loaded in {time.perf_counter() - t0:.1f} s on {stats.backend}"
                                    + (f": {fit}" if fit else "") + (f" — {notice}" if notice else ""))
        return self._engine

    @staticmethod
    def _one_rollout(job: AgentJob) -> bool:
        return not job.scripted and job.k == 1

    def _job_started(self, job: AgentJob, engine: Engine) -> _Live:
        """The run's description, emitted as ``started_job``, and its time estimate (the queue's is calibrated on
        the K in use: measured with another K, it starts again)."""
        if job.k != self._queue_eta.rollouts and not job.scripted:
            self._queue_eta = QueueEstimate(rollouts=job.k)
        stats = engine.stats()
        info = {"backend": stats.backend, "model": engine.info.model_id, "quant": engine.info.quant,
                "scripted": job.scripted, "settings": engine.settings.to_dict(),
                "prompt_version": job.task.prompt_version, "task": job.task.id, "t0": time.time()}
        self.started_job.emit(job.job_id, job.key, info)
        return _Live(job, info, self._queue_eta.new_episode(Rates.from_stats(stats)))

    def _job_ended(self, live: _Live, event: Event) -> None:
        """Report a run's end: ``finished_job`` with its final step (rollout 0's; the cancelled one when cut
        short; None when it was skipped or its spectrum could not be read) and in ``info`` what the core recorded
        (``verdict``, ``confidence``; absent when nothing was; ``elsewhere``: another run on the store screened it)."""
        job, info = live.job, live.info
        final: VerdictStep | None = None
        if isinstance(event, Recorded | Cancelled) and event.started is not None:
            run = event.started.run
            final = next((f for f in run.finals if f is None or f.outcome.value == "cancelled"), run.finals[0])
            info.update(run=run, steps=run.traces[0].steps, spectrum=event.started.spectrum)
        if isinstance(event, Skipped) and event.elsewhere and not event.held:  # another run on the store did it
            info["elsewhere"] = True
        if isinstance(event, Recorded):
            info.update(verdict=event.verdict, confidence=event.confidence)
            if final is not None and not job.scripted:  # the spectrum's wall time, all its rollouts
                self._queue_eta.finished(final, event.verdict.seconds)
        info["elapsed"] = time.time() - info["t0"]
        self.finished_job.emit(job.job_id, job.key, final, info)

    def _observe(self, live: _Live, event: Stepped, engine: Engine, parallel: int, follow: bool) -> None:
        """A step of a run under way: the agent panel follows rollout 0 of an interactive run (its verdict is not
        the fold's when K > 1), the estimate follows rollout 0 (K rollouts advance together)."""
        if event.rollout != 0:
            return
        job, step = live.job, event.step
        if not job.batch and not (job.k > 1 and isinstance(step, VerdictStep)):
            self.step.emit(job.job_id, step)
        live.eta.observe(step, engine.stats() if isinstance(step, AssistantStep) else None)
        if follow:
            self._emit_eta(job, live.eta, parallel)

    def _run_job(self, job: AgentJob, engine: Engine) -> None:
        """One spectrum through the screening core, one at a time (its K rollouts on the parallel sequences)."""
        live = self._job_started(job, engine)
        bufs: dict[int, list[str]] = {}  # rollout index -> text not sent yet
        last = [time.perf_counter()]

        def flush() -> None:
            for i, buf in bufs.items():
                if buf:
                    self.tokens.emit(job.job_id, i, "".join(buf))
                    buf.clear()
            last[0] = time.perf_counter()

        def on_token(i: int, piece: str) -> None:
            bufs.setdefault(i, []).append(piece)
            if time.perf_counter() - last[0] > 0.04:
                flush()

        for event in screen(job.screening, [job.item], one_at_a_time(engine, on_token=on_token),
                            engine.info.model_id):
            flush()
            if isinstance(event, Stepped):
                self._observe(live, event, engine, 1, follow=True)
            elif isinstance(event, Recorded | Cancelled | Skipped):
                self._job_ended(live, event)

    # -- batch items in slots ------------------------------------------------------------------------------------
    def _take_next(self, like: AgentJob) -> AgentJob | None:
        """The next queued batch item, moved in flight; None to stop the refill (see module doc)."""
        with self._lock:
            if self._stop or self._paused or self._interactive or not self._batch:
                return None
            job = self._batch[0]
            if job.engine_key != like.engine_key or not self._one_rollout(job) or job.screening is not like.screening:
                return None
            self._batch.popleft()
            self._flight[job.job_id] = job
            return job

    def _serve_slots(self, first: AgentJob, engine: Engine, width: int) -> None:
        """Run ``first`` and the batch items after it ``width`` at a time (`on_slots`) until the refill stops and
        the last one ends; count and report each (see module doc)."""
        with self._lock:
            self._current = None
            self._flight[first.job_id] = first
        live: dict[str, _Live] = {}  # by store key: one run per spectrum in a screening
        followed = [0, 0]  # job id, items in flight as last reported

        def follow() -> None:
            with self._lock:
                n = len(self._flight)
                started = [lv.job.job_id for lv in live.values() if lv.job.job_id in self._flight]
                job = self._flight.get(min(started, default=0))
            now = [job.job_id if job is not None else 0, n]
            if now != followed:
                followed[:] = now
                self.batch_follow.emit(now[0], job.key if job is not None else "", n)

        def items() -> Iterator[VetItem]:
            job: AgentJob | None = first
            while job is not None:
                live[job.item.key] = self._job_started(job, engine)
                follow()
                yield job.item
                job = self._take_next(first)

        scheduler: Scheduler = on_slots(engine, width)
        failure = "stopped"
        try:
            for event in screen(first.screening, items(), scheduler, engine.info.model_id):
                lv = live.get(event.item.key)
                if lv is None:
                    continue
                if isinstance(event, Stepped):
                    self._observe(lv, event, engine, width, follow=lv.job.job_id == followed[0])
                elif isinstance(event, Recorded | Cancelled | Skipped):
                    del live[event.item.key]
                    self._job_ended(lv, event)  # reported before the batch can look idle
                    with self._lock:
                        self._flight.pop(lv.job.job_id, None)
                    self._item_done(lv.job)
                    follow()
        except Exception as exc:  # the app's boundary: the items in flight fail (logged), the thread goes on
            log.exception("the batch slots failed")
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                left = list(self._flight.values())
                self._flight.clear()
            for job in left:  # the items the slots did not finish
                self.failed_job.emit(job.job_id, job.key, failure)
                self._item_done(job)
            self.batch_follow.emit(0, "", 0)


# -- the stopping test (speco3.vetting.stopping) -------------------------------------------------------------------
# Imported beside the class, not at the head of the file, while another change rewrites InferenceThread above (so
# that the two merge without touching the same lines); to move up with the others afterwards.
from speco3.errors import StoreError  # noqa: E402
from speco3.vetting import stopping  # noqa: E402
from speco3.vetting.stopping import Certificate  # noqa: E402
from speco3.vetting.store import VettingStore  # noqa: E402


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
            return stopping.audit_rest(job.store, job.task, job.vetter, job.recall, job.confidence)
        reader = None
        if not job.store.is_in_memory:
            try:
                reader = VettingStore(job.store.path, readonly=True)
            except StoreError:  # e.g. unmerged changes in a read-only place: read through the window's connection
                log.info("the stopping test reads %s through the window's connection", job.store.path)
        if reader is None:
            return stopping.current(job.store, job.task, job.recall, job.confidence)
        with reader:
            return stopping.current(reader, job.task, job.recall, job.confidence)

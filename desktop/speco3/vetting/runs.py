"""The app's agent runs, without Qt: the run queue, the engine cache, slot refill and time estimates.

A `RunService` owns the engine (llama.cpp contexts are not thread-safe; one thread drives them): `serve` runs on
that thread, the other methods are called from any thread (the GUI's). It serves interactive runs first and batch
items in between, so the vetter can ask the agent about the current spectrum while a batch pre-screen is running.
Every run goes through the screening core (`speco3.vetting.screening`, the path of ``spec-o3 vet``): the core
records each verdict row, rollouts and traces, and the service reports what happens as typed events (`RunEvent`)
to its observer, on the thread that causes them (the serving thread for runs; the caller's for queue changes).
Tokens are coalesced (≈ 25 updates per second). With one rollout per spectrum on a llama.cpp engine with parallel
sequences, batch items run several at once (the core's `speco3.vetting.schedulers.on_slots`, as
``vet --slots N``); a paused batch, a waiting interactive run, a stop or an item for another engine stops the
refill, and the spectra in flight finish first. A cancel ends the items in flight, each reported cancelled
(nothing recorded, so a later pre-screen does them again). The time estimate follows one item in flight, the
earliest started (`BatchFollow` names it); the queue estimate counts the others as running N at a time.

A batch item another run on the store holds (a ``spec-o3 vet`` screening it now) is left to it without waiting,
and looked at once more when the rest of the batch is done: by then that run may have been killed (its lease ran
out, or its process is gone on this host), and its spectrum is screened here; one still held then is reported as
left to the other run (`RunEnded` without a verdict).

Engines are cached by their `speco3.engine.choice.EngineKey` (the typed model choice and the settings); a scripted
job's engine is made per spectrum and never cached. `speco3.gui.workers.InferenceThread` runs `serve` on a worker
thread and turns the events into Qt signals.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from speco3.agent.confidence import Confidence
from speco3.agent.eta import QueueEstimate, Rates, TimeToVerdict
from speco3.agent.steps import AssistantStep, Outcome, Step, VerdictStep
from speco3.agent.tasks import Task
from speco3.engine.base import Engine
from speco3.engine.choice import EngineKey
from speco3.engine.parallel import parallel_sequences
from speco3.vetting.records import ModelVerdict
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

EngineFactory = Callable[[], Engine]  # () -> Engine, not loaded (the serving thread loads it)
BatchStateName = Literal["running", "paused", "cancelled", "finished"]


@dataclass
class RunJob:
    """One agent run: the spectrum (``item``: loaded on the serving thread unless it holds the spectrum), where
    and how it is screened and recorded (``screening``: the store, task, plan and cancel; batch items share one),
    and the engine to run it on (``engine_key`` and the factory that opens it). Plain data only: no Qt object, and
    a factory bound to values, never to a widget. ``job_id`` is set when it is queued."""

    key: str
    item: VetItem
    screening: Screening
    engine_key: EngineKey
    engine_factory: EngineFactory
    batch: bool = False
    scripted: bool = False
    job_id: int = 0
    revisit: bool = False  # a batch item held by another run, queued again at the batch's end (see module doc)

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

    @property
    def one_rollout(self) -> bool:
        """A model run of one rollout per spectrum (batch items of this kind share slots)."""
        return not self.scripted and self.k == 1


# -- events ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunInfo:
    """What a run runs on, as it starts: the backend, model and quantization, whether it is scripted (not a
    model), the engine settings, the task and its prompt version, and when it started (``t0``, epoch seconds)."""

    backend: str
    model: str
    quant: str | None
    scripted: bool
    settings: dict[str, object]
    task: str
    prompt_version: str
    t0: float


@dataclass(frozen=True)
class RunStarted:
    job_id: int
    key: str
    info: RunInfo


@dataclass(frozen=True)
class RunTokens:
    """Text that rollout ``rollout`` generated since the last report."""

    job_id: int
    rollout: int
    text: str


@dataclass(frozen=True)
class RunStep:
    """A step of an interactive run's rollout 0 (not its verdict when K > 1: that is the fold's)."""

    job_id: int
    step: Step


@dataclass(frozen=True)
class RunEnded:
    """A run ended. ``final``: rollout 0's final step (the cancelled one when cut short; None when the spectrum
    was skipped or could not be read); ``verdict`` and ``confidence``: what the core recorded (None when nothing
    was); ``elsewhere``: another run on the store screened it; ``elapsed``: seconds since it started."""

    job_id: int
    key: str
    info: RunInfo
    final: VerdictStep | None
    verdict: ModelVerdict | None = None
    confidence: Confidence | None = None
    elsewhere: bool = False
    elapsed: float = 0.0

    @property
    def cancelled(self) -> bool:
        return self.verdict is None and self.final is not None and self.final.outcome is Outcome.CANCELLED


@dataclass(frozen=True)
class RunFailed:
    """A run did not end in the core: cancelled before it started, or an error (the traceback is in the log)."""

    job_id: int
    key: str
    message: str


@dataclass(frozen=True)
class RunEstimate:
    """Seconds left for the run ``job_id`` and, for a batch item, for it and the batch queue (None: not known)."""

    job_id: int
    left: float | None
    queue_left: float | None


@dataclass(frozen=True)
class BatchProgress:
    done: int
    total: int


@dataclass(frozen=True)
class BatchState:
    state: BatchStateName


@dataclass(frozen=True)
class BatchFollow:
    """The batch item the time estimate follows and how many are in flight (0, "", 0: none)."""

    job_id: int
    key: str
    in_flight: int


@dataclass(frozen=True)
class EngineStatus:
    """The engine is loading, or loaded (with its backend and fit), for the status bar."""

    text: str


RunEvent = (RunStarted | RunTokens | RunStep | RunEnded | RunFailed | RunEstimate | BatchProgress | BatchState
            | BatchFollow | EngineStatus)
RunObserver = Callable[[RunEvent], None]


@dataclass
class _Live:
    """A job under way: what `RunStarted` said, and its time estimate."""

    job: RunJob
    info: RunInfo
    eta: TimeToVerdict


class RunService:
    """See module doc. ``observer`` receives every `RunEvent`; it must not call back into the service's serving
    methods, and should be quick (it runs on the serving thread for run events)."""

    def __init__(self, observer: RunObserver):
        self.observer = observer
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._interactive: collections.deque[RunJob] = collections.deque()
        self._batch: collections.deque[RunJob] = collections.deque()
        self._held: list[RunJob] = []  # batch items another run held, looked at again when the batch is done
        self._batch_total = 0
        self._batch_done = 0
        self._paused = False
        self._current: RunJob | None = None
        self._flight: dict[int, RunJob] = {}  # batch items running together in slots
        self._engine: Engine | None = None
        self._engine_key: EngineKey | None = None
        self._next_id = 1
        self._queue_eta = QueueEstimate()

    # -- any thread ------------------------------------------------------------------------------------------------
    def submit(self, job: RunJob) -> int:
        """Queue an interactive run (served before batch items); returns its job id."""
        with self._lock:
            job.job_id = self._next_id
            self._next_id += 1
            self._interactive.append(job)
        self._wake.set()
        return job.job_id

    def start_batch(self, jobs: list[RunJob]) -> None:
        """Replace the batch queue with ``jobs`` (each gets its job id)."""
        with self._lock:
            for job in jobs:
                job.job_id = self._next_id
                self._next_id += 1
                job.batch = True
            self._batch = collections.deque(jobs)
            self._held = []
            self._batch_total, self._batch_done, self._paused = len(jobs), 0, False
        self.observer(BatchState("running"))
        self.observer(BatchProgress(0, len(jobs)))
        self._wake.set()

    def pause_batch(self, paused: bool = True) -> None:
        with self._lock:
            self._paused = paused
        self.observer(BatchState("paused" if paused else "running"))
        self._wake.set()

    def cancel_batch(self) -> None:
        """Drop the queued batch items and cancel those in flight (each reported as it ends)."""
        with self._lock:
            self._batch.clear()
            self._held.clear()
            self._paused = False
            running = self._running()
        for job in running:
            if job.batch:
                job.cancel.set()
        self.observer(BatchState("cancelled"))

    def cancel_current(self) -> bool:
        """Cancel the running interactive job (and queued ones); True when something was cancelled."""
        with self._lock:
            cur = self._current
            queued = list(self._interactive)
            self._interactive.clear()
        for job in queued:
            self.observer(RunFailed(job.job_id, job.key, "cancelled before it started"))
        if cur is not None and not cur.batch:
            cur.cancel.set()
            return True
        return bool(queued)

    def batch_running(self) -> bool:
        with self._lock:
            return bool(self._batch or self._held) or any(job.batch for job in self._running())

    def busy(self) -> bool:
        with self._lock:
            return bool(self._running() or self._interactive)

    def stop(self) -> None:
        """Cancel everything and make `serve` return (its caller joins the serving thread); a running generation
        stops at its next token, an engine that is loading finishes loading first."""
        with self._lock:
            self._stop = True
            self._batch.clear()
            self._held.clear()
            self._interactive.clear()
            running = self._running()
        for job in running:
            job.cancel.set()
        self._wake.set()

    def _running(self) -> list[RunJob]:
        """The jobs under way (call with the lock held)."""
        return [job for job in (self._current, *self._flight.values()) if job is not None]

    # -- the serving thread ----------------------------------------------------------------------------------------
    def serve(self, *, until_idle: bool = False) -> None:
        """Serve the queues until `stop` (``until_idle``: until nothing is left to run now; a paused batch counts
        as nothing), then close the engine."""
        try:
            while True:
                with self._lock:
                    if self._stop:
                        break
                job = self._next_job()
                if job is None:
                    if until_idle:
                        break
                    self._wake.wait(0.2)
                    self._wake.clear()
                    continue
                self._serve_one(job)
        finally:
            self.close_engine()

    def _next_job(self) -> RunJob | None:
        with self._lock:
            if self._stop:
                return None
            if not self._batch and self._held and not self._flight and not self._paused:
                self._batch.extend(self._held)  # the rest is done: the held ones once more (see module doc)
                self._held.clear()
            if self._interactive:
                self._current = self._interactive.popleft()
            elif self._batch and not self._paused:
                self._current = self._batch.popleft()
            else:
                self._current = None
            return self._current

    def _serve_one(self, job: RunJob) -> None:
        try:
            engine = self.engine_for(job)
            width = parallel_sequences(engine) if job.batch and job.one_rollout else 1
            if width > 1:
                self._serve_slots(job, engine, width)  # reports and counts each item itself
                return
            if self._run_job(job, engine):
                return
        except Exception as exc:  # the service goes on; the traceback is in the log
            log.exception("agent job on %s failed", job.key)
            self.observer(RunFailed(job.job_id, job.key, f"{type(exc).__name__}: {exc}"))
        finally:
            with self._lock:
                self._current = None
        self._item_done(job)

    def _held_back(self, job: RunJob, event: Event) -> bool:
        """A batch item left to another run that holds it, the first time: kept to be looked at again when the
        rest of the batch is done (not reported nor counted yet; see module doc)."""
        if not (job.batch and not job.revisit and isinstance(event, Skipped) and event.held):
            return False
        job.revisit = True
        with self._lock:
            self._held.append(job)
        return True

    def _item_done(self, job: RunJob) -> None:
        """Count a finished batch item and report the batch's progress (nothing for an interactive run)."""
        if not job.batch:
            return
        with self._lock:
            self._batch_done += 1
            done, total = self._batch_done, self._batch_total
            left = len(self._batch) + len(self._flight) + len(self._held)
        self.observer(BatchProgress(done, total))
        if not left and done >= total:
            self.observer(BatchState("finished"))

    def _estimate(self, job: RunJob, eta: TimeToVerdict, parallel: int = 1) -> None:
        """The time left for ``job`` and, for a batch item, the queue: the items queued and the others in flight,
        ``parallel`` at a time."""
        with self._lock:
            queued = len(self._batch) + max(0, len(self._flight) - 1) if job.batch else 0
        queue = self._queue_eta.remaining(eta, queued, parallel) if job.batch else None
        self.observer(RunEstimate(job.job_id, eta.remaining(), queue))

    def close_engine(self) -> None:
        if self._engine is not None:
            try:
                self._engine.close()
            except Exception:
                log.exception("closing the engine failed")
        self._engine, self._engine_key = None, None

    def engine_for(self, job: RunJob) -> Engine:
        """The loaded engine of ``job``: the cached one when its key matches, else opened and loaded (the one it
        replaces closed first), with `EngineStatus` before and after; a scripted job's own, never cached."""
        if job.scripted:  # demo scripts are per spectrum; never cached
            engine = job.engine_factory()
            engine.load()
            return engine
        if self._engine is None or self._engine_key != job.engine_key:
            self.close_engine()
            name = job.engine_key.label
            self.observer(EngineStatus(f"loading {name} …"))
            t0 = time.perf_counter()
            engine = job.engine_factory()
            engine.load()
            self._engine, self._engine_key = engine, job.engine_key
            stats = engine.stats()
            extra = stats.extra
            fit = "; ".join([extra.get("fit", ""), *extra.get("fit_notes", ())]).strip("; ")
            notice = extra.get("backend_notice")  # the CPU fallback of a build with loadable backends
            self.observer(EngineStatus(f"{name} loaded in {time.perf_counter() - t0:.1f} s on {stats.backend}"
                                       + (f": {fit}" if fit else "") + (f" — {notice}" if notice else "")))
        return self._engine

    def job_started(self, job: RunJob, engine: Engine) -> _Live:
        """Report `RunStarted` and begin the run's time estimate (the queue's is calibrated on the K in use:
        measured with another K, it starts again)."""
        if job.k != self._queue_eta.rollouts and not job.scripted:
            self._queue_eta = QueueEstimate(rollouts=job.k)
        stats = engine.stats()
        info = RunInfo(backend=stats.backend, model=engine.info.model_id, quant=engine.info.quant,
                       scripted=job.scripted, settings=engine.settings.to_dict(), task=job.task.id,
                       prompt_version=job.task.prompt_version, t0=time.time())
        self.observer(RunStarted(job.job_id, job.key, info))
        return _Live(job, info, self._queue_eta.new_episode(Rates.from_stats(stats)))

    def _job_ended(self, live: _Live, event: Event) -> None:
        """Report `RunEnded` from the core's last event of the spectrum."""
        job, info = live.job, live.info
        final: VerdictStep | None = None
        if isinstance(event, Recorded | Cancelled) and event.started is not None:
            run = event.started.run
            final = next((f for f in run.finals if f is None or f.outcome is Outcome.CANCELLED), run.finals[0])
        elsewhere = isinstance(event, Skipped) and event.elsewhere and not event.held  # another run did it
        verdict = confidence = None
        if isinstance(event, Recorded):
            verdict, confidence = event.verdict, event.confidence
            if final is not None and not job.scripted:  # the spectrum's wall time, all its rollouts
                self._queue_eta.finished(final, event.verdict.seconds)
        self.observer(RunEnded(job.job_id, job.key, info, final, verdict, confidence, elsewhere,
                               time.time() - info.t0))

    def _observe(self, live: _Live, event: Stepped, engine: Engine, parallel: int, follow: bool) -> None:
        """A step of a run under way: an interactive run's rollout 0 is reported (its verdict is not the fold's
        when K > 1), the estimate follows rollout 0 (K rollouts advance together)."""
        if event.rollout != 0:
            return
        job, step = live.job, event.step
        if not job.batch and not (job.k > 1 and isinstance(step, VerdictStep)):
            self.observer(RunStep(job.job_id, step))
        live.eta.observe(step, engine.stats() if isinstance(step, AssistantStep) else None)
        if follow:
            self._estimate(job, live.eta, parallel)

    def _run_job(self, job: RunJob, engine: Engine) -> bool:
        """One spectrum through the screening core, one at a time (its K rollouts on the parallel sequences); True
        when it was held back to be looked at again (`_held_back`: not reported)."""
        live = self.job_started(job, engine)
        bufs: dict[int, list[str]] = {}  # rollout index -> text not sent yet
        last = [time.perf_counter()]

        def flush() -> None:
            for i, buf in bufs.items():
                if buf:
                    self.observer(RunTokens(job.job_id, i, "".join(buf)))
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
            elif self._held_back(job, event):
                return True
            elif isinstance(event, Recorded | Cancelled | Skipped):
                self._job_ended(live, event)
        return False

    # -- batch items in slots ----------------------------------------------------------------------------------------
    def _take_next(self, like: RunJob) -> RunJob | None:
        """The next queued batch item, moved in flight; None to stop the refill (see module doc)."""
        with self._lock:
            if self._stop or self._paused or self._interactive or not self._batch:
                return None
            job = self._batch[0]
            if job.engine_key != like.engine_key or not job.one_rollout or job.screening is not like.screening:
                return None
            self._batch.popleft()
            self._flight[job.job_id] = job
            return job

    def _serve_slots(self, first: RunJob, engine: Engine, width: int) -> None:
        """Run ``first`` and the batch items after it ``width`` at a time (`on_slots`) until the refill stops and
        the last one ends; count and report each (see module doc)."""
        with self._lock:
            self._current = None
            self._flight[first.job_id] = first
        live: dict[str, _Live] = {}  # by store key: one run per spectrum in a screening
        followed = BatchFollow(0, "", 0)

        def follow() -> None:
            nonlocal followed
            with self._lock:
                n = len(self._flight)
                started = [lv.job.job_id for lv in live.values() if lv.job.job_id in self._flight]
                job = self._flight.get(min(started, default=0))
            now = BatchFollow(job.job_id, job.key, n) if job is not None else BatchFollow(0, "", n)
            if (now.job_id, now.in_flight) != (followed.job_id, followed.in_flight):
                followed = now
                self.observer(now)

        def items() -> Iterator[VetItem]:
            job: RunJob | None = first
            while job is not None:
                live[job.item.key] = self.job_started(job, engine)
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
                    self._observe(lv, event, engine, width, follow=lv.job.job_id == followed.job_id)
                elif isinstance(event, Recorded | Cancelled | Skipped):
                    del live[event.item.key]
                    held = self._held_back(lv.job, event)
                    if not held:
                        self._job_ended(lv, event)  # reported before the batch can look idle
                    with self._lock:
                        self._flight.pop(lv.job.job_id, None)
                    if not held:
                        self._item_done(lv.job)
                    follow()
        except Exception as exc:  # the app's boundary: the items in flight fail (logged), the service goes on
            log.exception("the batch slots failed")
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                left = list(self._flight.values())
                self._flight.clear()
            for job in left:  # the items the slots did not finish
                self.observer(RunFailed(job.job_id, job.key, failure))
                self._item_done(job)
            self.observer(BatchFollow(0, "", 0))

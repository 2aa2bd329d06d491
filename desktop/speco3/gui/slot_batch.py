"""The batch pre-screen with several spectra at once: the app's side of `speco3.vetting.slots.run_in_slots`.

With one rollout per spectrum on a local llama.cpp engine with parallel sequences (``EngineSettings.n_seq`` > 1),
`speco3.gui.workers.InferenceThread` runs batch items through the loop ``spec-o3 vet --slots N`` uses: up to N
spectra in flight, a slot refilled with the next queued item as one ends, each run reported (``finished_job``) as
its spectrum finishes and recorded by `speco3.gui.agent_control.AgentController` on the GUI thread, as a
one-at-a-time item is. Everything here runs on the inference thread (the engine's one thread; tool images are
rendered there, as for a single run).

The refill stops, and the spectra in flight are finished, when the batch is paused, an interactive run waits, the
thread stops or the next item needs another engine; the thread then serves those and starts a new slot run for the
rest. A cancel ends the items in flight, each reported cancelled (nothing recorded, so a later pre-screen does them
again, as `vet_slots` does). The time estimate follows one item in flight, the earliest started (``batch_follow``
names it); the queue estimate counts the others as running N at a time. The scripted demo engine, a model server
(it has its own concurrency) and K > 1 rollouts (they share the sequences instead) keep the one-at-a-time path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from speco3.agent.eta import Rates, TimeToVerdict
from speco3.engine.parallel import parallel_sequences
from speco3.vetting.rollout_runs import new_run
from speco3.vetting.slots import SlotEpisode, run_in_slots

if TYPE_CHECKING:
    from speco3.gui.workers import AgentJob, InferenceThread

log = logging.getLogger(__name__)


def _one_rollout(job: AgentJob) -> bool:
    return not job.scripted and (job.plan is None or job.plan.k == 1)


def slot_width(thread: InferenceThread, job: AgentJob) -> int:
    """How many batch items run at once from ``job`` on: the engine's parallel sequences for one rollout per
    spectrum on a local llama.cpp engine, else 1 (loads ``job``'s engine when it is not the loaded one)."""
    if not _one_rollout(job):
        return 1
    return parallel_sequences(thread._engine_for(job))


def _take_next(thread: InferenceThread, like: AgentJob) -> AgentJob | None:
    """The next queued batch item, moved in flight; None to stop the refill (see module doc)."""
    with thread._lock:
        if thread._stop or thread._paused or thread._interactive or not thread._batch:
            return None
        job = thread._batch[0]
        if job.engine_key != like.engine_key or not _one_rollout(job):
            return None
        thread._batch.popleft()
        thread._flight[job.job_id] = job
        return job


def serve_slots(thread: InferenceThread, first: AgentJob) -> None:
    """Run ``first`` and the batch items after it in slots until the refill stops and the last one ends; count
    and report each (see module doc). ``first``'s engine is the loaded one (`slot_width` loaded it)."""
    engine = thread._engine
    width = parallel_sequences(engine)
    with thread._lock:
        thread._current = None
        thread._flight[first.job_id] = first
    etas: dict[int, TimeToVerdict] = {}
    followed = [0, 0]  # job id, items in flight as last reported

    def follow() -> None:
        with thread._lock:
            n = len(thread._flight)
            job = thread._flight.get(min((i for i in thread._flight if i in etas), default=0))
        now = [job.job_id if job is not None else 0, n]
        if now != followed:
            followed[:] = now
            thread.batch_follow.emit(now[0], job.key if job is not None else "", n)

    def episodes():
        job: AgentJob | None = first
        while job is not None:
            try:
                spectrum = job.spectrum if job.spectrum is not None else job.entry.load()
                info = thread._job_started(job, engine)
                run = new_run(engine, spectrum, job.task, job.plan)
            except Exception as exc:  # this item cannot start: reported failed, the batch goes on
                log.exception("batch item %s failed to start", job.key)
                with thread._lock:
                    thread._flight.pop(job.job_id, None)
                thread.failed_job.emit(job.job_id, job.key, f"{type(exc).__name__}: {exc}")
                thread._item_done(job)
            else:
                etas[job.job_id] = thread._queue_eta.new_episode(Rates.from_stats(engine.stats()))
                follow()
                yield SlotEpisode(run, spectrum, job.task, job.cancel, tag=(job, info))
            job = _take_next(thread, first)

    def on_step(ep: SlotEpisode, step) -> None:
        job = ep.tag[0]
        eta = etas[job.job_id]
        eta.observe(step, engine.stats() if step.kind == "assistant" else None)
        if job.job_id == followed[0]:
            thread._emit_eta(job, eta, width)

    failure = "stopped"
    try:
        for ep in run_in_slots(episodes(), engine, thread.render, slots=width, on_step=on_step):
            job, info = ep.tag
            etas.pop(job.job_id, None)
            thread._job_finished(job, ep.run, ep.spectrum, info)  # reported before the batch can look idle
            with thread._lock:
                thread._flight.pop(job.job_id, None)
            thread._item_done(job)
            follow()
    except Exception as exc:  # the engine or the slots failed: the items in flight fail, the thread goes on
        log.exception("the batch slots failed")
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        with thread._lock:
            left = list(thread._flight.values())
            thread._flight.clear()
        for job in left:
            thread.failed_job.emit(job.job_id, job.key, failure)
            thread._item_done(job)
        thread.batch_follow.emit(0, "", 0)


__all__ = ["serve_slots", "slot_width"]

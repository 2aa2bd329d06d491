"""Batch screening with several spectra at once: a slot per spectrum, refilled as spectra finish.

`vet_slots` is `speco3.vetting.batch.vet_batch` with ``slots`` > 1: the same skipping, resuming, recording and
reporting, but the episodes run through the agent driver (`speco3.agent.driver.drive`) on the engine's parallel
sequences (`speco3.engine.parallel`), so one batched decode advances every spectrum in flight. Verdicts are
recorded as each episode ends (out of input order); ``progress`` receives the number of items reported so far.
A cancel ends every episode in flight; none of them is recorded, so a resumed run does them again. On an engine
without parallel sequences (the scripted engine, ``n_seq`` 1) the spectra run one at a time.

`run_in_slots` is the loop itself, shared with the desktop app's batch pre-screen (`speco3.gui.slot_batch`): it
takes prepared `SlotEpisode` s lazily (the caller decides what starts next, and stops feeding to pause), adds each
step to the episode's trace and hands back each episode when its verdict is in; what is recorded, and where, is
the caller's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speco3.agent.confidence import Thresholds
from speco3.agent.driver import drive
from speco3.agent.loop import episode_run
from speco3.agent.rollouts import RolloutPlan
from speco3.agent.steps import VerdictStep
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.engine.parallel import open_slots
from speco3.fileio import Progress
from speco3.spectra.model import Spectrum
from speco3.vetting.batch import (
    BatchResult,
    DoneCheck,
    ItemDone,
    VetItem,
    _report,
    count_verdict,
    finish_item,
    start_item,
)
from speco3.vetting.records import ModelVerdict
from speco3.vetting.rollout_runs import RolloutRun
from speco3.vetting.store import VettingStore

logger = logging.getLogger(__name__)


@dataclass
class SlotEpisode:
    """One spectrum's single rollout to run in a slot: its traces (``run``), the spectrum, the task, the cancel
    that ends it, and whatever the caller needs back with it (``tag``)."""

    run: RolloutRun
    spectrum: Spectrum
    task: Task
    cancel: threading.Event | None = None
    tag: Any = None


def run_in_slots(episodes: Iterable[SlotEpisode], engine: Engine, render: RenderFn, *, slots: int,
                 on_step: Callable[[SlotEpisode, Any], None] | None = None) -> Iterator[SlotEpisode]:
    """Run ``episodes`` (taken lazily, in order) with up to ``slots`` in flight on ``engine``'s parallel sequences
    (`speco3.engine.parallel.open_slots`); each step goes into the episode's trace (then to ``on_step``), and each
    episode is yielded when its verdict is in (its run's ``seconds`` set). Closing the iterator ends the episodes
    in flight and releases the sequences."""
    started: list[tuple[SlotEpisode, float]] = []  # per episode, in the order the driver numbers them

    def generators() -> Iterator:
        for ep in episodes:
            if len(ep.run.samplings) != 1:
                raise ValueError("a slot runs one rollout per spectrum; K rollouts share the sequences instead")
            started.append((ep, time.perf_counter()))
            yield episode_run(engine, ep.spectrum, ep.task, render, cancel=ep.cancel, sampling=ep.run.samplings[0])

    slot_set = open_slots(engine, slots)
    try:
        for n, step in drive(generators(), slot_set, width=slots):
            ep, t0 = started[n]
            ep.run.traces[0].add(step)
            if on_step is not None:
                on_step(ep, step)
            if isinstance(step, VerdictStep):
                ep.run.seconds = time.perf_counter() - t0
                yield ep
    finally:
        slot_set.close()


def vet_slots(
    items: Iterable[VetItem],
    store: VettingStore,
    engine: Engine,
    task: Task,
    render: RenderFn,
    *,
    slots: int,
    trace_root: str | Path | None = None,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    on_item: ItemDone | None = None,
    resume: bool = True,
    total: int | None = None,
    plan: RolloutPlan | None = None,
    thresholds: Thresholds | None = None,
) -> BatchResult:
    """Screen ``items`` with up to ``slots`` spectra in flight (see module doc and `vet_batch`); ``plan``, when
    given, has one rollout (its sampling is used)."""
    if plan is not None and plan.k != 1:
        raise ValueError("vet_slots runs one rollout per spectrum; K rollouts share the sequences instead")
    items = list(items)
    result = BatchResult(total=total if total is not None else len(items))
    t0 = time.perf_counter()
    check = DoneCheck(store, task, engine.info.model_id, resume=resume, rollouts=1)
    root = Path(trace_root) if trace_root is not None else None
    reported = 0

    def report(item: VetItem, verdict: ModelVerdict | None) -> None:
        nonlocal reported
        reported += 1
        _report(progress, on_item, reported, result.total, item, verdict)

    def record(verdict: ModelVerdict, changed: bool) -> None:
        check.mark(verdict.spectrum_key, verdict.file_sha256)
        count_verdict(result, verdict, changed)

    def episodes() -> Iterator[SlotEpisode]:
        for item in items:
            if cancel is not None and cancel.is_set():
                result.cancelled = True
                return
            state = check.state(item.key, item.path)
            if state == "done":
                result.skipped += 1
                report(item, None)
                continue
            changed = state == "changed"
            run = start_item(item, store, engine, task, plan, files=check.files)
            if isinstance(run, ModelVerdict):  # unreadable: recorded without an episode
                record(run, changed)
                report(item, run)
                continue
            yield SlotEpisode(run.run, run.spectrum, task, cancel, tag=(run, changed))

    for ep in run_in_slots(episodes(), engine, render, slots=slots):
        run, changed = ep.tag
        verdict = finish_item(run, store, task, root, thresholds)
        if verdict is None:  # cancelled: not recorded, done again on resume
            result.cancelled = True
            continue
        record(verdict, changed)
        report(run.item, verdict)
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


__all__ = ["SlotEpisode", "run_in_slots", "vet_slots"]

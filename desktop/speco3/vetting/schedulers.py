"""Schedulers of the screening core (`speco3.vetting.screening`): how the spectra to screen are run.

A scheduler takes the `Pending` items lazily (the core's done rule has skipped the others) and yields the events
of each: `Screening.start`, a `Stepped` event per step (added to its rollout's trace), then `Screening.finish`.

- `one_at_a_time(engine)`: one spectrum after another; its K rollouts run together on the engine's parallel
  sequences (`speco3.agent.rollouts.iter_rollouts`), one after another on other engines.
- `on_slots(engine, width)`: up to ``width`` spectra in flight (one rollout each) on the engine's parallel
  sequences, a slot refilled with the next item as one ends (`speco3.agent.driver.drive`): one batched decode
  advances every spectrum in flight; verdicts come out of input order.
- `on_threads(engines)`: one worker thread per engine (a model server batches the concurrent conversations);
  the events are yielded on the calling thread, in completion order; an error in a worker stops the others and
  is raised here.
- `engine_per_item(open_engine)`: one spectrum after another, each on an engine opened for it and closed after it
  (the scripted demo session, whose script is the spectrum's own: ``spec-o3 vet --demo``).
- `choose(engine, slots, plan)`: the scheduler ``spec-o3 vet`` uses for an in-process engine.

A new scheduler is a function of the same shape; the core stays as it is (``docs/architecture.md``).
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Unpack

from speco3.agent.adaptive import STOP_FIXED
from speco3.agent.driver import drive
from speco3.agent.loop import episode_steps
from speco3.agent.rollouts import RolloutGroup, RolloutPlan, iter_rollouts
from speco3.agent.steps import VerdictStep
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.engine.parallel import open_slots, parallel_sequences
from speco3.vetting.screening import (
    BatchResult,
    Event,
    ItemRun,
    Pending,
    Scheduler,
    Screening,
    ScreeningOptions,
    Started,
    Stepped,
    VetItem,
    vet,
)
from speco3.vetting.store import VettingStore

TokenSink = Callable[[int, str], None]  # (rollout index, generated text)


def run_item(screening: Screening, engine: Engine, started: ItemRun, *,
             on_token: TokenSink | None = None) -> Iterator[Event]:
    """The steps of one started spectrum's rollouts (`Stepped`), then its end (`Screening.finish`: the traces of
    the rollouts that ran, with the group's stop reason); ``on_token`` streams the text of every rollout, with its
    index."""
    run = started.run
    group = RolloutGroup([], run.plan.k, STOP_FIXED)
    for i, step in iter_rollouts(engine, started.spectrum, screening.task, screening.render, run.plan,
                                 screening.options, thresholds=screening.thresholds, group=group,
                                 on_rollout_token=on_token):
        run.traces[i].add(step)
        yield Stepped(started.item, started, i, step)
    run.keep(group)
    yield screening.finish(started)


def one_at_a_time(engine: Engine, *, on_token: TokenSink | None = None) -> Scheduler:
    """Spectra one after another (see module doc); ``on_token(i, text)`` streams the text of rollout ``i``."""

    def schedule(screening: Screening, pending: Iterator[Pending]) -> Iterator[Event]:
        for item, changed in pending:
            event = screening.start(item, engine, changed)
            yield event
            if isinstance(event, Started):
                yield from run_item(screening, engine, event.started, on_token=on_token)

    return schedule


def engine_per_item(open_engine: Callable[[VetItem], Engine]) -> Scheduler:
    """Spectra one after another, each on an engine of its own: ``open_engine(item)``, loaded before its run and
    closed after it (see module doc)."""

    def schedule(screening: Screening, pending: Iterator[Pending]) -> Iterator[Event]:
        for item, changed in pending:
            engine = open_engine(item)
            try:
                engine.load()
                yield from one_at_a_time(engine)(screening, iter([(item, changed)]))
            finally:
                engine.close()

    return schedule


def on_slots(engine: Engine, width: int) -> Scheduler:
    """Up to ``width`` spectra at once, one rollout each, on ``engine``'s parallel sequences (see module doc)."""

    def schedule(screening: Screening, pending: Iterator[Pending]) -> Iterator[Event]:
        if screening.rollouts != 1:
            raise ValueError("a slot runs one rollout per spectrum; K rollouts share the sequences instead")
        started: list[ItemRun] = []  # per episode, in the order the driver numbers them
        side: collections.deque[Event] = collections.deque()  # events of the items started between steps

        def episodes() -> Iterator:
            for item, changed in pending:
                event = screening.start(item, engine, changed)
                side.append(event)
                if isinstance(event, Started):
                    run = event.started
                    started.append(run)
                    yield episode_steps(engine, run.spectrum, screening.task, screening.render,
                                        screening.options, sampling=run.run.samplings[0])

        slot_set = open_slots(engine, width)
        try:
            for n, step in drive(episodes(), slot_set, width=width):
                while side:
                    yield side.popleft()
                run = started[n]
                run.run.traces[0].add(step)
                yield Stepped(run.item, run, 0, step)
                if isinstance(step, VerdictStep):
                    yield screening.finish(run)
            while side:
                yield side.popleft()
        finally:
            slot_set.close()

    return schedule


_DONE = object()


def on_threads(engines: Sequence[Engine]) -> Scheduler:
    """One worker thread per engine, each screening one spectrum at a time (see module doc)."""
    if not engines:
        raise ValueError("on_threads needs at least one engine")

    def schedule(screening: Screening, pending: Iterator[Pending]) -> Iterator[Event]:
        lock = threading.Lock()
        events: queue.Queue = queue.Queue()

        def take() -> Iterator[Pending]:
            while not screening.cancelled():
                with lock:
                    nxt = next(pending, None)
                if nxt is None:
                    return
                yield nxt

        def work(engine: Engine) -> None:
            try:
                for event in one_at_a_time(engine)(screening, take()):
                    events.put(event)
            except BaseException as exc:  # raised again on the calling thread (the run stops there)
                events.put(exc)
            finally:
                events.put(_DONE)

        workers = [threading.Thread(target=work, args=(engine,), name=f"vet-{n}", daemon=True)
                   for n, engine in enumerate(engines)]
        for w in workers:
            w.start()
        running, failure = len(workers), None
        try:
            while running:
                got = events.get()
                if got is _DONE:
                    running -= 1
                elif isinstance(got, BaseException):
                    failure = failure or got
                    screening.cancel.set()  # the others stop between tokens
                elif failure is None:
                    yield got
        finally:
            if running:  # closed early: the workers stop between tokens
                screening.cancel.set()
            for w in workers:
                w.join()
        if failure is not None:
            raise failure

    return schedule


def choose(engine: Engine, slots: int | None, plan: RolloutPlan | None, *,
           on_token: TokenSink | None = None) -> Scheduler:
    """``spec-o3 vet``'s scheduler for an in-process engine: `on_slots` for ``slots`` > 1 with one rollout per
    spectrum on an engine with parallel sequences, else `one_at_a_time` (K > 1 rollouts share the sequences; an
    adaptive plan runs its rounds there)."""
    if (slots or 1) > 1 and (plan is None or (plan.k == 1 and plan.adaptive is None)):
        width = min(slots or 1, parallel_sequences(engine))
        if width > 1:
            return on_slots(engine, width)
    return one_at_a_time(engine, on_token=on_token)


def vet_batch(items: Iterable[VetItem], store: VettingStore, engine: Engine, task: Task, render: RenderFn, *,
              slots: int = 1, on_event: Callable[[Event], None] | None = None,
              on_token: TokenSink | None = None, **screening: Unpack[ScreeningOptions]) -> BatchResult:
    """Screen ``items`` on one in-process engine to the end (`Screening` + `choose` + `vet`); ``screening``: the
    `Screening` options (``trace_root``, ``plan``, ``thresholds``, ``resume``, ``cancel``)."""
    scr = Screening(store, task, render, **screening)
    return vet(scr, items, choose(engine, slots, scr.plan, on_token=on_token), engine.info.model_id,
               on_event=on_event)


__all__ = ["choose", "engine_per_item", "on_slots", "on_threads", "one_at_a_time", "run_item", "vet_batch"]

"""Screening with N episodes in flight against a model server (``spec-o3 vet --server URL --concurrency N``).

The server batches the requests of concurrent conversations (llama-server's parallel slots, vLLM's and SGLang's
continuous batching); here each of N worker threads drives its own `speco3.engine.remote.RemoteEngine`
conversation (one shared HTTP client) through `vet_one`, exactly as the sequential `vet_batch` does. What is
screened, skipped or screened again is decided the same way (`vet_batch`'s rules, in `pending_items`); each
spectrum is recorded once by the worker that ran it (the store is thread-safe), and an episode whose requests
failed even after the client's retries is recorded as ``engine_error`` with the reason, so a resumed run does it
again. Progress and ``on_item`` are called on the calling thread, in completion order.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from speco3.agent.confidence import Thresholds
from speco3.agent.rollouts import RolloutPlan
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.fileio import Progress
from speco3.vetting.batch import (
    BatchResult,
    DoneCheck,
    FileCheck,
    ItemDone,
    VetItem,
    _report,
    count_verdict,
    vet_one,
)
from speco3.vetting.records import ModelVerdict
from speco3.vetting.store import VettingStore

logger = logging.getLogger(__name__)
_DONE = object()


def pending_items(items: Sequence[VetItem], check: DoneCheck) -> tuple[list[tuple[VetItem, bool]], list[VetItem]]:
    """``(to screen with "file changed" flags, skipped)`` by `vet_batch`'s resume rules (`DoneCheck`)."""
    todo, skipped = [], []
    for item in items:
        state = check.state(item.key, item.path)
        if state == "done":
            skipped.append(item)
        else:
            todo.append((item, state == "changed"))
    return todo, skipped


def vet_concurrent(
    items: Iterable[VetItem],
    store: VettingStore,
    engines: Sequence[Engine],
    task: Task,
    render: RenderFn,
    *,
    trace_root: str | Path | None = None,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    on_item: ItemDone | None = None,
    resume: bool = True,
    total: int | None = None,
    plan: RolloutPlan | None = None,
    thresholds: Thresholds | None = None,
) -> BatchResult:
    """Screen ``items`` with one worker thread per engine (``len(engines)`` episodes in flight); see module doc.
    ``plan`` and ``thresholds``: K rollouts per spectrum, as in `vet_batch`.

    The engines must report the same model id (one run). ``render`` is called from the worker threads.
    """
    if not engines:
        raise ValueError("vet_concurrent needs at least one engine")
    items = list(items)
    result = BatchResult(total=total if total is not None else len(items))
    t0 = time.perf_counter()
    cancel = cancel or threading.Event()
    check = DoneCheck(store, task, engines[0].info.model_id, resume=resume, rollouts=plan.k if plan else 1)
    files = check.files
    todo, skipped = pending_items(items, check)
    i = 0
    for item in skipped:
        i += 1
        result.skipped += 1
        _report(progress, on_item, i, result.total, item, None)
    jobs: queue.Queue = queue.Queue()
    for job in todo:
        jobs.put(job)
    results: queue.Queue = queue.Queue()
    root = Path(trace_root) if trace_root is not None else None
    workers = [threading.Thread(target=_worker, args=(engine, jobs, results, store, task, render, root, cancel, files,
                                                         plan, thresholds),
                                name=f"vet-{n}", daemon=True) for n, engine in enumerate(engines[: max(1, len(todo))])]
    for w in workers:
        w.start()
    running, failure = len(workers), None
    while running:
        got = results.get()
        if got is _DONE:
            running -= 1
            continue
        item, changed, v, exc = got
        if exc is not None:  # the store failed: stop everything, the next run resumes
            failure = failure or exc
            cancel.set()
            continue
        if v is None:
            result.cancelled = True
            continue
        i += 1
        count_verdict(result, v, changed)
        _report(progress, on_item, i, result.total, item, v)
    if failure is not None:
        logger.error("stopping the batch: %s", failure)
        raise failure
    result.cancelled = result.cancelled or (cancel.is_set() and result.done + result.skipped < len(items))
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def _worker(engine: Engine, jobs: queue.Queue, results: queue.Queue, store: VettingStore, task: Task,
            render: RenderFn, root: Path | None, cancel: threading.Event, files: FileCheck,
            plan: RolloutPlan | None, thresholds: Thresholds | None) -> None:
    try:
        while not cancel.is_set():
            try:
                item, changed = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                v: ModelVerdict | None = vet_one(item, store, engine, task, render, trace_root=root, cancel=cancel,
                                                 files=files, plan=plan, thresholds=thresholds)
            except Exception as exc:  # noqa: BLE001 - the store or the file system failed: reported, run stops
                results.put((item, changed, None, exc))
                return
            results.put((item, changed, v, None))
    finally:
        results.put(_DONE)


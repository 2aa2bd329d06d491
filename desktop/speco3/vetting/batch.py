"""Batch pre-screening: run the agent over many spectra, store each verdict with its trace, resume after a stop.

Used by ``spec-o3 vet`` and by the desktop app's background pre-screen, with one "done" rule (`DoneCheck`). A
spectrum already done for the same task, model and prompt version is skipped (runs that were cancelled or hit an engine error are retried) unless its
file changed since (see `FileCheck`: size and mtime against a stamp kept in the store, the sha256 when they differ
or cannot be trusted; a changed sha256 means the spectrum is screened again). Each
verdict row carries the model id, quant, model file digests, prompt version, engine settings, turns, tokens, time,
the spectrum file's sha256 and the trace folder. Setting ``cancel`` stops between tokens; the interrupted spectrum
is not recorded, so a resumed run does it again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from speco3.agent.confidence import Thresholds
from speco3.agent.rollouts import RolloutPlan
from speco3.agent.steps import Outcome
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.errors import Speco3Error
from speco3.fileio import Progress, sha256_file
from speco3.spectra.model import Spectrum
from speco3.vetting.records import ModelVerdict, SpectrumInfo
from speco3.vetting.rollout_runs import RolloutRun, new_run, run_into, save_rollouts, verdict_row
from speco3.vetting.store import VettingStore, storable_text

logger = logging.getLogger(__name__)


@dataclass
class VetItem:
    """One spectrum to screen: its store key, how to load it, and its file (for the sha256)."""

    key: str
    load: Callable[[], Spectrum]
    path: str | None = None
    name: str = ""
    error: str | None = None  # known read error (e.g. from the archive index): recorded without loading


@dataclass
class BatchResult:
    total: int = 0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    cancelled: bool = False
    seconds: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    changed: int = 0  # done before, screened again because the file's content changed
    abstained: int = 0  # spectra whose rollouts left the model undecided (K > 1)

    def to_dict(self) -> dict:
        keys = ("total", "done", "skipped", "changed", "failed", "abstained", "cancelled", "seconds", "outcomes")
        return {k: getattr(self, k) for k in keys}


ItemDone = Callable[[VetItem, ModelVerdict | None], None]  # the item and its new verdict (None: skipped)


def file_sha256(path: str | Path, _cache: dict[str, str] | None = None) -> str | None:
    """SHA-256 of a file (None when it cannot be read)."""
    key = str(path)
    if _cache is not None and key in _cache:
        return _cache[key]
    try:
        digest = sha256_file(path)
    except OSError as exc:
        logger.warning("cannot hash %s: %s", path, exc)
        return None
    if _cache is not None:
        _cache[key] = digest
    return digest


#: A stamp is trusted only for files last modified this long before it was taken: a write within the same mtime
#: tick as the hashing could keep size and mtime while changing the content ("racily clean", as git calls it).
RACY_NS = 2_000_000_000


class FileCheck:
    """The sha256 of spectrum files, hashed only when their size or mtime differ from the store's stamp.

    A stamp (size, mtime_ns, sha256, when stamped) is written each time a file is hashed. It answers for the file
    while size and mtime are unchanged and the mtime is older than the stamp by `RACY_NS`; otherwise the file is
    hashed again and re-stamped. A file that cannot be read gives None.
    """

    def __init__(self, store: VettingStore):
        self.store = store
        self.stamps = store.file_stamps()
        self.hashed = 0

    def digest(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        stamp = self.stamps.get(path)
        if stamp is not None and stamp[:2] == (st.st_size, st.st_mtime_ns) and st.st_mtime_ns < stamp[3] - RACY_NS:
            return stamp[2]
        now = time.time_ns()  # before hashing: a write during the hash leaves an mtime that no stamp trusts
        sha = file_sha256(path)  # never a per-path cache: the file may have changed since (a long-lived check)
        if sha is not None:
            self.hashed += 1
            self.stamps[path] = (st.st_size, st.st_mtime_ns, sha, now)
            self.store.record_file_stamp(path, st.st_size, st.st_mtime_ns, sha, now)
        return sha


class DoneCheck:
    """The one "already done" rule, used by ``spec-o3 vet`` and the desktop pre-screen alike.

    A spectrum is done for ``task`` with ``model_id`` when a run with the task's current prompt version is stored
    for its key with ``rollouts`` rollouts and that run was not cancelled or stopped by an engine error
    (`RETRY_OUTCOMES`), unless its file now has another sha256 than the one the run was made on (`FileCheck`;
    unknown digests count as unchanged). ``resume=False`` counts nothing as done.
    """

    def __init__(self, store: VettingStore, task: Task, model_id: str, *, resume: bool = True, rollouts: int = 1):
        self.done = store.done_files(task.id, model_id, task.prompt_version, rollouts=rollouts) if resume else {}
        self.files = FileCheck(store)

    def state(self, key: str, path: str | None) -> str:
        """``"new"`` (never done), ``"done"`` (skip it) or ``"changed"`` (done on other file content)."""
        key = storable_text(key)  # keys come back from SQLite in their storable form
        if key not in self.done:
            return "new"
        return "changed" if _file_changed(path, self.done[key], self.files) else "done"

    def mark(self, key: str, file_sha256: str | None) -> None:
        self.done[storable_text(key)] = file_sha256


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` → (I, N) with 0 <= I < N (SLURM: ``--shard $SLURM_ARRAY_TASK_ID/N`` with ``--array=0-(N-1)``)."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 0 <= int(m[1]) < int(m[2]):
        raise ValueError(f"shard {text!r}: expected I/N with 0 <= I < N, e.g. 0/8 … 7/8")
    return int(m[1]), int(m[2])


def in_shard(key: str, shard: tuple[int, int]) -> bool:
    """Whether the spectrum with archive key ``key`` (archive-relative ``PATH#N``) belongs to ``shard`` (I, N).

    A hash of the key, not the listing order: the same spectrum falls in the same shard on every machine, however
    the folder is listed or filtered, and the N shards split any archive without overlap or gap.
    """
    i, n = shard
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % n == i


def trace_folder(root: Path, task: str, key: str, name: str) -> Path:
    """A stable, file-system-safe trace folder for one spectrum and task."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name or "spectrum").strip("._")[:60] or "spectrum"
    return root / task / f"{safe}-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


@dataclass
class ItemRun:
    """A spectrum being screened: what its verdict row records, its rollouts' traces, and when it started."""

    item: VetItem
    spectrum: Spectrum
    base: dict
    t0: float
    run: RolloutRun


def start_item(item: VetItem, store: VettingStore, engine: Engine, task: Task, plan: RolloutPlan | None = None, *,
               sha_cache: dict[str, str] | None = None, files: FileCheck | None = None) -> ItemRun | ModelVerdict:
    """Load the spectrum, record it and open its traces; an unreadable one gets its verdict (recorded) instead."""
    info = engine.info
    if item.path:
        sha = files.digest(item.path) if files is not None else file_sha256(item.path, sha_cache)
    else:
        sha = None
    base = dict(spectrum_key=item.key, task=task.id, model_id=info.model_id, quant=info.quant,
                text_sha256=info.text_sha256, mmproj_sha256=info.mmproj_sha256, prompt_version=task.prompt_version,
                file_sha256=sha, engine_settings=engine.settings.to_dict())
    t0 = time.perf_counter()
    spectrum = None
    error = item.error
    if error is None:
        try:
            spectrum = item.load()
        except (Speco3Error, OSError, ValueError) as exc:
            error = str(exc)
    if spectrum is None:
        v = ModelVerdict(verdict=None, outcome=Outcome.INPUT_ERROR.value, detail=f"unreadable: {error}",
                         seconds=time.perf_counter() - t0, **base)
        store.record_model_verdict(v)
        return v
    store.record_spectrum(SpectrumInfo.of(item.key, spectrum, sha))
    run = new_run(engine, spectrum, task, plan, spectrum_extra={"key": item.key, "file_sha256": sha})
    return ItemRun(item, spectrum, base, t0, run)


def finish_item(started: ItemRun, store: VettingStore, task: Task, trace_root: Path | None,
                thresholds: Thresholds | None = None) -> ModelVerdict | None:
    """Save the rollouts' traces and record the verdict row with their fold (None when cancelled: not recorded)."""
    run = started.run
    if run.cancelled:
        return None
    folder = None
    if trace_root is not None:
        folder = trace_folder(Path(trace_root), task.id, started.item.key, started.item.name or started.spectrum.name)
    records = save_rollouts(run, folder)
    v = verdict_row(run, records, run.confidence(thresholds), seconds=time.perf_counter() - started.t0,
                    **started.base)
    store.record_model_verdict(v, records)
    return v


def vet_one(
    item: VetItem,
    store: VettingStore,
    engine: Engine,
    task: Task,
    render: RenderFn,
    *,
    trace_root: Path | None = None,
    cancel: threading.Event | None = None,
    on_token: Callable[[str], None] | None = None,
    on_step: Callable[[object], None] | None = None,
    sha_cache: dict[str, str] | None = None,
    files: FileCheck | None = None,
    plan: RolloutPlan | None = None,
    thresholds: Thresholds | None = None,
) -> ModelVerdict | None:
    """Screen one spectrum and record the verdict; returns it (None when cancelled mid-episode).

    ``plan``: K rollouts (None: one, sampled as the engine's settings say); each is stored with its trace
    (``<folder>/rNN`` when K > 1) and the verdict row carries their fold (`speco3.agent.confidence.aggregate`
    with ``thresholds``); the row's verdict is the majority (None on a tie) and its trace the first rollout that
    gave it. On an engine with parallel sequences the K rollouts run together (`speco3.agent.rollouts`).
    """
    started = start_item(item, store, engine, task, plan, sha_cache=sha_cache, files=files)
    if isinstance(started, ModelVerdict):
        return started
    run_into(started.run, engine, started.spectrum, task, render, cancel=cancel, on_token=on_token,
             on_step=(lambda i, step: on_step(step)) if on_step else None)
    return finish_item(started, store, task, trace_root, thresholds)


def vet_batch(
    items: Iterable[VetItem],
    store: VettingStore,
    engine: Engine,
    task: Task,
    render: RenderFn,
    *,
    trace_root: str | Path | None = None,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    on_item: ItemDone | None = None,
    on_token: Callable[[str], None] | None = None,
    resume: bool = True,
    total: int | None = None,
    plan: RolloutPlan | None = None,
    thresholds: Thresholds | None = None,
    slots: int = 1,
) -> BatchResult:
    """Screen ``items`` in order; see module doc.

    After each item, ``on_item(item, verdict)`` (``verdict`` None when it was done before and skipped), then
    ``progress(item.key, i, total)``. ``plan`` and ``thresholds``: K rollouts per spectrum (see `vet_one`); a
    spectrum done before with another number of rollouts is screened again.
    ``slots`` > 1 with one rollout per spectrum screens that many spectra at once on the engine's parallel
    sequences (`speco3.vetting.slots`; items then finish out of order and ``on_token`` is not used); with K > 1
    rollouts the parallel sequences serve the K rollouts of each spectrum instead.
    """
    if slots > 1 and (plan is None or plan.k == 1):
        from speco3.vetting.slots import vet_slots

        return vet_slots(items, store, engine, task, render, slots=slots, trace_root=trace_root, cancel=cancel,
                         progress=progress, on_item=on_item, resume=resume, total=total, plan=plan,
                         thresholds=thresholds)
    items = list(items)
    result = BatchResult(total=total if total is not None else len(items))
    t0 = time.perf_counter()
    check = DoneCheck(store, task, engine.info.model_id, resume=resume, rollouts=plan.k if plan is not None else 1)
    root = Path(trace_root) if trace_root is not None else None
    for i, item in enumerate(items, 1):
        if cancel is not None and cancel.is_set():
            result.cancelled = True
            break
        state = check.state(item.key, item.path)
        if state == "done":
            result.skipped += 1
            _report(progress, on_item, i, result.total, item, None)
            continue
        changed = state == "changed"
        try:
            v = vet_one(item, store, engine, task, render, trace_root=root, cancel=cancel, on_token=on_token,
                        files=check.files, plan=plan, thresholds=thresholds)
        except Speco3Error as exc:  # the store failed: stop, the next run resumes here
            logger.error("stopping the batch: %s", exc)
            raise
        if v is None:
            result.cancelled = True
            break
        check.mark(item.key, v.file_sha256)
        count_verdict(result, v, changed)
        _report(progress, on_item, i, result.total, item, v)
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def count_verdict(result: BatchResult, v: ModelVerdict, changed: bool) -> None:
    result.done += 1
    result.changed += changed
    result.outcomes[v.outcome] = result.outcomes.get(v.outcome, 0) + 1
    result.abstained += bool(v.abstained)
    if v.outcome in ("engine_error", "input_error"):
        result.failed += 1


def _report(progress: Progress | None, on_item: ItemDone | None, i: int, total: int, item: VetItem,
            verdict: ModelVerdict | None) -> None:
    if on_item is not None:
        on_item(item, verdict)
    if progress is not None:
        progress(item.key, i, total)


def _file_changed(path: str | None, recorded: str | None, files: FileCheck) -> bool:
    """True when the file now has another sha256 than the one its stored verdict was made on.

    Unknown cases count as unchanged (the verdict stands): no file, no sha256 recorded, or a file that is gone.
    """
    if not path or recorded is None:
        return False
    current = files.digest(path)
    if current is None:
        logger.warning("%s: file unreadable now; keeping its earlier verdict", path)
        return False
    if current != recorded:
        logger.info("%s changed since it was screened (sha256 %s… -> %s…): screening again", path,
                    recorded[:12], current[:12])
        return True
    return False

"""The screening core: from a list of spectra to verdict rows in the store, once for every caller.

``spec-o3 vet``, ``spec-o3 evaluate``, the app's batch pre-screen and the app's single-spectrum agent all run
through `screen`: a `Screening` (the store, the task, the renderer, the rollout plan, the done rule, the trace
folders, cancel) and a scheduler (`speco3.vetting.schedulers`: one spectrum at a time, N spectra on the engine's
parallel sequences, N conversations on threads against a model server). `screen` yields typed events as the
work goes (`Skipped`, `Started`, `Stepped`, `Recorded`, `Cancelled`); the CLI draws its progress from them
(`vet`, which also counts them into a `BatchResult`), the app turns them into Qt signals.

The done rule (`DoneCheck`): a spectrum already screened for the same task, model, prompt version and number of
rollouts is skipped (runs that were cancelled or hit an engine error are retried) unless its file changed since
(`FileCheck`: size and mtime against a stamp kept in the store, the sha256 when they differ or cannot be
trusted). Recording (`Screening.start`, `Screening.finish`): every verdict row carries the model id, quant, model
file digests, prompt version, engine settings, turns, tokens, time, the spectrum file's sha256 and its trace
folder (`trace_folder`: one name for every caller); every rollout is stored with its trace. A spectrum cut short
by a cancel is not recorded, so a resumed run does it again.

Sharing a store (`speco3.vetting.claims`): `screen` claims each spectrum before the scheduler gets it; a spectrum
another live run claimed is left to it (looked at again when this run's share is done: finished there, it is
`Skipped` with ``elsewhere``; its run killed, it is screened here), and the verdict releases the claim in the
transaction that writes it. Several ``vet`` runs and the app's pre-screen on one store so divide the work, each
spectrum screened once. A run asked for explicitly (``share=False``: the app's single-spectrum run) claims a free
spectrum but does not wait for a held one.

Errors: a spectrum that cannot be read is recorded as ``input_error``; engine and transport failures end its
episode as ``engine_error`` (`speco3.agent.loop`); anything else (a bug, a store that fails) propagates.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypedDict

from speco3.agent.confidence import Confidence, Thresholds
from speco3.agent.loop import EpisodeOptions
from speco3.agent.rollouts import RolloutPlan
from speco3.agent.steps import Outcome, Step
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.errors import Speco3Error
from speco3.fileio import sha256_file
from speco3.spectra.index import IndexEntry
from speco3.spectra.model import Spectrum
from speco3.vetting.claims import RunClaims
from speco3.vetting.records import ClaimHolder, ModelVerdict, SpectrumInfo, Work
from speco3.vetting.rollout_runs import RolloutRun, new_run, save_rollouts, verdict_row
from speco3.vetting.store import DONE_ELSEWHERE, HELD, LEASE_S, VettingStore, storable_text

logger = logging.getLogger(__name__)

#: Outcomes counted as failed spectra (the input or the engine, not the model, stopped them).
FAILED_OUTCOMES = (Outcome.ENGINE_ERROR.value, Outcome.INPUT_ERROR.value)
#: Seconds between looks at the spectra other runs hold, once this run's share is done (first, most).
POLL_S = (0.2, 5.0)


@dataclass
class VetItem:
    """One spectrum to screen: its store key, how to load it, and its file (for the sha256)."""

    key: str
    load: Callable[[], Spectrum]
    path: str | None = None
    name: str = ""
    error: str | None = None  # known read error (e.g. from the archive index): recorded without loading
    spectrum: Spectrum | None = None  # already loaded (the app's current spectrum): not loaded again

    @classmethod
    def of_entry(cls, entry: IndexEntry, spectrum: Spectrum | None = None) -> VetItem:
        """The item of an archive index entry (key ``PATH#N``, the index's display name and read error), as
        ``spec-o3 vet`` and the app screen it."""
        return cls(key=entry.address, load=entry.load, path=entry.path, name=entry.name,
                   error=entry.error, spectrum=spectrum)


# -- the done rule ----------------------------------------------------------------------------------------------
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
    """The one "already done" rule.

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


# -- shards and trace folders -----------------------------------------------------------------------------------
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
    """The trace folder of one spectrum and task: ``ROOT/TASK/NAME-HASH`` (file-system safe, stable per key)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name or "spectrum").strip("._")[:60] or "spectrum"
    return root / task / f"{safe}-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


# -- events -----------------------------------------------------------------------------------------------------
class RowBase(TypedDict):
    """What every verdict row of a spectrum records before its run: where it ran and on what."""

    spectrum_key: str
    task: str
    model_id: str
    quant: str | None
    text_sha256: str | None
    mmproj_sha256: str | None
    prompt_version: str
    file_sha256: str | None
    engine_settings: dict[str, object]


@dataclass
class ItemRun:
    """A spectrum being screened: what its verdict row records, its rollouts' traces, and when it started."""

    item: VetItem
    spectrum: Spectrum
    base: RowBase
    t0: float
    run: RolloutRun
    changed: bool = False


@dataclass(frozen=True)
class Skipped:
    """Not screened by this run: done before (the done rule), or (``elsewhere``) screened by another run on the
    same store while this one ran; ``started``: this run screened it too (it was stopped past its lease and its
    claim taken over), but the other run's verdict was recorded first and counts: this one's is not written."""

    item: VetItem
    elsewhere: bool = False
    started: ItemRun | None = None
    held: bool = False  # left to another live run that holds it now (``Screening.wait`` False): not done yet


@dataclass(frozen=True)
class Started:
    """The spectrum was read and its traces opened; its rollouts run next."""

    item: VetItem
    started: ItemRun


@dataclass(frozen=True)
class Stepped:
    """One step of rollout ``rollout`` of a spectrum under way (already added to its trace)."""

    item: VetItem
    started: ItemRun
    rollout: int
    step: Step


@dataclass(frozen=True)
class Recorded:
    """The verdict row is in the store (``started`` None: the spectrum could not be read, ``input_error``)."""

    item: VetItem
    verdict: ModelVerdict
    changed: bool = False
    started: ItemRun | None = None
    confidence: Confidence | None = None

    @property
    def failed(self) -> bool:
        """The input or the engine stopped it (``input_error``, ``engine_error``), not the model."""
        return self.verdict.outcome in FAILED_OUTCOMES


@dataclass(frozen=True)
class Cancelled:
    """Cut short by the cancel: nothing recorded, a resumed run does it again."""

    item: VetItem
    started: ItemRun


Event = Skipped | Started | Stepped | Recorded | Cancelled


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
    elsewhere: int = 0  # of the skipped: screened by another run on the same store meanwhile
    dropped: int = 0  # of those: screened here too (past a lost lease), the other run's verdict recorded first
    held: int = 0  # of those: left to another live run that holds it (``Screening.wait`` False)

    def to_dict(self) -> dict:
        keys = ("total", "done", "skipped", "elsewhere", "dropped", "held", "changed", "failed", "abstained", "cancelled", "seconds",
                "outcomes")
        return {k: getattr(self, k) for k in keys}

    def add(self, event: Event) -> None:
        """Count one event (see `vet`)."""
        if isinstance(event, Skipped):
            self.skipped += 1
            self.elsewhere += event.elsewhere
            self.dropped += event.started is not None
            self.held += event.held
        elif isinstance(event, Cancelled):
            self.cancelled = True
        elif isinstance(event, Recorded):
            v = event.verdict
            self.done += 1
            self.changed += event.changed
            self.outcomes[v.outcome] = self.outcomes.get(v.outcome, 0) + 1
            self.abstained += bool(v.abstained)
            self.failed += event.failed


# -- the core ---------------------------------------------------------------------------------------------------
Pending = tuple[VetItem, bool]  # an item to screen and whether its file changed since it was done


class ScreeningOptions(TypedDict, total=False):
    """The keyword options of `Screening` (for callers that pass them on)."""

    trace_root: str | Path | None
    plan: RolloutPlan | None
    thresholds: Thresholds | None
    resume: bool
    cancel: threading.Event | None
    share: bool
    wait: bool
    lease_s: float


class Screening:
    """What a screening records, and where: see module doc.

    ``store``: the vetting store; ``task``; ``render``: the training-faithful renderer (`RenderFn`);
    ``trace_root``: the traces go to `trace_folder` under it (None: not saved); ``plan``: K rollouts (None: one,
    sampled as the engine's settings say); ``thresholds``: abstention of the fold; ``resume``: apply the done rule
    (False: screen everything); ``cancel``: set it to stop between tokens; ``share``: leave spectra other runs on
    the store claimed to them (False: a run asked for explicitly, see module doc); ``wait``: once the rest is done,
    wait for the spectra other runs hold and screen those whose run is gone (False: report them `Skipped` with
    ``held`` at once; the app's pre-screen, which may take one spectrum per call); ``lease_s``: how long a claim
    holds unrenewed.
    """

    def __init__(self, store: VettingStore, task: Task, render: RenderFn, *, trace_root: str | Path | None = None,
                 plan: RolloutPlan | None = None, thresholds: Thresholds | None = None, resume: bool = True,
                 cancel: threading.Event | None = None, share: bool = True, wait: bool = True,
                 lease_s: float = LEASE_S):
        self.store = store
        self.task = task
        self.render = render
        self.trace_root = Path(trace_root) if trace_root is not None else None
        self.plan = plan
        self.thresholds = thresholds
        self.resume = resume
        self.cancel = cancel if cancel is not None else threading.Event()
        self.share = share
        self.wait = wait
        self.lease_s = lease_s
        self._check: DoneCheck | None = None
        self._claims: RunClaims | None = None
        self._check_model: str | None = None
        self._lock = threading.Lock()  # `start` from several threads (`speco3.vetting.schedulers.on_threads`)

    @property
    def rollouts(self) -> int:
        return self.plan.k if self.plan is not None else 1

    def done_check(self, model_id: str) -> DoneCheck:
        """The done rule for ``model_id`` (read from the store once per model)."""
        return self._rules(model_id)[0]

    def claims(self, model_id: str) -> RunClaims:
        """This run's claims for ``model_id`` (begun with the done rule: a verdict after it is another run's)."""
        return self._rules(model_id)[1]

    def _rules(self, model_id: str) -> tuple[DoneCheck, RunClaims]:
        with self._lock:
            if self._check is None or self._claims is None or self._check_model != model_id:
                since = self.store.last_verdict_id()  # before the done rule reads: nothing falls between
                self._check = DoneCheck(self.store, self.task, model_id, resume=self.resume, rollouts=self.rollouts)
                self._claims = RunClaims(self.store, Work(self.task.id, model_id, self.task.prompt_version,
                                                          self.rollouts),
                                         since_id=since, lease_s=self.lease_s, share=self.share)
                self._check_model = model_id
            return self._check, self._claims

    def cancelled(self) -> bool:
        return self.cancel.is_set()

    @property
    def options(self) -> EpisodeOptions:
        """How its episodes run: stopped by its cancel, the engine's caps and the training turn budget."""
        return EpisodeOptions(cancel=self.cancel)

    def start(self, item: VetItem, engine: Engine, changed: bool = False) -> Started | Recorded | Skipped:
        """Read the spectrum, record it and open its traces (`Started`); an unreadable one gets its verdict,
        recorded (`Recorded` with outcome ``input_error``; `Skipped` when another run's came first)."""
        info = engine.info
        files = self.done_check(info.model_id).files
        with self._lock:
            sha = files.digest(item.path) if item.path else None
        base = RowBase(spectrum_key=item.key, task=self.task.id, model_id=info.model_id, quant=info.quant,
                       text_sha256=info.text_sha256, mmproj_sha256=info.mmproj_sha256,
                       prompt_version=self.task.prompt_version, file_sha256=sha,
                       engine_settings=engine.recorded_settings())
        t0 = time.perf_counter()
        spectrum = item.spectrum
        error = item.error if spectrum is None else None
        if spectrum is None and error is None:
            try:
                spectrum = item.load()
            except (Speco3Error, OSError, ValueError) as exc:
                error = str(exc)
        if spectrum is None:
            v = ModelVerdict(verdict=None, outcome=Outcome.INPUT_ERROR.value, detail=f"unreadable: {error}",
                             seconds=time.perf_counter() - t0, **base)
            recorded = self.claims(info.model_id).record(v)
            self.done_check(info.model_id).mark(item.key, v.file_sha256)
            return Recorded(item, v, changed) if recorded else Skipped(item, elsewhere=True)
        self.store.record_spectrum(SpectrumInfo.of(item.key, spectrum, sha))
        run = new_run(engine, spectrum, self.task, self.plan, spectrum_extra={"key": item.key, "file_sha256": sha})
        return Started(item, ItemRun(item, spectrum, base, t0, run, changed))

    def folder(self, started: ItemRun) -> Path | None:
        """Where the traces of ``started`` go (`trace_folder` under ``trace_root``)."""
        if self.trace_root is None:
            return None
        return trace_folder(self.trace_root, self.task.id, started.item.key,
                            started.item.name or started.spectrum.name)

    def finish(self, started: ItemRun) -> Recorded | Cancelled | Skipped:
        """Save the rollouts' traces and record the verdict row with their fold, releasing its claim (`Cancelled`:
        not recorded, the claim released when the run ends; `Skipped`: another run's verdict came first)."""
        run = started.run
        if run.cancelled:
            return Cancelled(started.item, started)
        folder = self.folder(started)
        try:
            records = save_rollouts(run, folder)
        except OSError as exc:  # a trace that cannot be written must not lose the verdict
            logger.warning("trace of %s not saved in %s: %s", started.item.key, folder, exc)
            records = save_rollouts(run, None)
        conf = run.confidence(self.thresholds)
        v = verdict_row(run, records, conf, seconds=time.perf_counter() - started.t0, **started.base)
        recorded = self.claims(v.model_id).record(v, records)
        self.done_check(v.model_id).mark(v.spectrum_key, v.file_sha256)
        if not recorded:
            logger.warning("%s: another run's verdict was recorded first; this run's is dropped", started.item.key)
            return Skipped(started.item, elsewhere=True, started=started)
        return Recorded(started.item, v, started.changed, started, conf)


class Scheduler(Protocol):
    """How the spectra to screen are run: takes `Pending` items lazily and yields the events of each (it calls
    `Screening.start` for each item, adds each step to its trace and calls `Screening.finish` when its verdict
    is in). See `speco3.vetting.schedulers`."""

    def __call__(self, screening: Screening, pending: Iterator[Pending]) -> Iterator[Event]: ...


def screen(screening: Screening, items: Iterable[VetItem], scheduler: Scheduler, model_id: str) -> Iterator[Event]:
    """Screen ``items`` (taken lazily, in order) with ``scheduler``: yields every event (see module doc).

    The done rule of ``model_id`` decides what is skipped (`Skipped`, in input order among the others); each other
    item is claimed before the scheduler gets it, and one that another live run holds is looked at again when the
    rest is done (`POLL_S`), until that run finished it or is gone; the cancel stops taking items. Closing the
    iterator ends the spectra in flight (not recorded) and releases this run's claims."""
    check = screening.done_check(model_id)
    claims = screening.claims(model_id)
    skipped: collections.deque[Event] = collections.deque()
    held: list[tuple[VetItem, bool, ClaimHolder | None]] = []

    def claimed(item: VetItem, changed: bool) -> bool:
        """Claim ``item``; False when it is left to another run (done there, or held by a live one)."""
        got = claims.take(item.key)
        if screening.share and got.state == DONE_ELSEWHERE:
            skipped.append(Skipped(item, elsewhere=True))
            return False
        if screening.share and got.state == HELD:
            if screening.wait:
                held.append((item, changed, got.holder))
            else:
                logger.info("%s: left to another run on the store (%s)", item.key, got.holder)
                skipped.append(Skipped(item, elsewhere=True, held=True))
            return False
        return True

    def pending() -> Iterator[Pending]:
        for item in items:
            if screening.cancelled():
                return
            state = check.state(item.key, item.path)
            if state == "done":
                skipped.append(Skipped(item))
                continue
            if claimed(item, state == "changed"):
                yield item, state == "changed"

    def run(todo: Iterator[Pending]) -> Iterator[Event]:
        for event in scheduler(screening, todo):
            while skipped:
                yield skipped.popleft()
            yield event
        while skipped:
            yield skipped.popleft()

    with claims.kept():
        yield from run(pending())
        wait, told = POLL_S[0], False
        while held and not screening.cancelled():
            waiting = list(held)
            held.clear()
            ready = [(item, changed) for item, changed, _ in waiting if claimed(item, changed)]
            if ready:
                yield from run(iter(ready))
                wait = POLL_S[0]
                continue
            while skipped:
                yield skipped.popleft()
            if held:
                if not told:
                    holders = sorted({str(h) for _, _, h in held if h is not None})
                    logger.warning("%d spectra are being screened by another run on %s (%s); waiting for them "
                                   "(a run that is killed leaves them to this one)", len(held), screening.store.path,
                                   ", ".join(holders))
                    told = True
                screening.cancel.wait(wait)
                wait = min(wait * 1.5, POLL_S[1])


def vet(screening: Screening, items: Iterable[VetItem], scheduler: Scheduler, model_id: str, *,
        total: int | None = None, on_event: Callable[[Event], None] | None = None) -> BatchResult:
    """`screen` to the end, counted into a `BatchResult` (``on_event`` sees every event first)."""
    items = list(items)
    result = BatchResult(total=total if total is not None else len(items))
    t0 = time.perf_counter()
    for event in screen(screening, items, scheduler, model_id):
        result.add(event)
        if on_event is not None:
            on_event(event)
    result.cancelled = result.cancelled or (screening.cancelled() and result.done + result.skipped < len(items))
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


__all__ = [
    "FAILED_OUTCOMES", "POLL_S", "RACY_NS", "BatchResult", "Cancelled", "DoneCheck", "Event", "FileCheck", "ItemRun",
    "Pending", "Recorded", "RowBase", "Scheduler", "Screening", "ScreeningOptions", "Skipped", "Started", "Stepped", "VetItem", "file_sha256",
    "in_shard", "parse_shard", "screen", "trace_folder", "vet",
]

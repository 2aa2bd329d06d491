"""Batch pre-screening: run the agent over many spectra, store each verdict with its trace, resume after a stop.

Used by ``spec-o3 vet`` and by the desktop app's background pre-screen. A spectrum already done for the same
task, model and prompt version is skipped (runs that were cancelled or hit an engine error are retried). Each
verdict row carries the model id, quant, model file digests, prompt version, engine settings, turns, tokens, time,
the spectrum file's sha256 and the trace folder. Setting ``cancel`` stops between tokens; the interrupted spectrum
is not recorded, so a resumed run does it again.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path

from speco3.agent.loop import run_episode
from speco3.agent.steps import Outcome, VerdictStep
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.agent.trace import Trace, spectrum_ref
from speco3.engine.base import Engine
from speco3.errors import Speco3Error
from speco3.spectra.model import Spectrum
from speco3.vetting.records import ModelVerdict, SpectrumInfo
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

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("total", "done", "skipped", "failed", "cancelled", "seconds", "outcomes")}


Progress = Callable[[int, int, VetItem, "ModelVerdict | None"], None]


def file_sha256(path: str | Path, _cache: dict[str, str] | None = None) -> str | None:
    """SHA-256 of a file (None when it cannot be read)."""
    key = str(path)
    if _cache is not None and key in _cache:
        return _cache[key]
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        logger.warning("cannot hash %s: %s", path, exc)
        return None
    digest = h.hexdigest()
    if _cache is not None:
        _cache[key] = digest
    return digest


def trace_folder(root: Path, task: str, key: str, name: str) -> Path:
    """A stable, file-system-safe trace folder for one spectrum and task."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name or "spectrum").strip("._")[:60] or "spectrum"
    return root / task / f"{safe}-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


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
) -> ModelVerdict | None:
    """Screen one spectrum and record the verdict; returns it (None when cancelled mid-episode)."""
    info = engine.info
    sha = file_sha256(item.path, sha_cache) if item.path else None
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
    trace = Trace(task_id=task.id, task_text=task.text, prompt_version=task.prompt_version,
                  spectrum={**spectrum_ref(spectrum), "key": item.key, "file_sha256": sha},
                  model=asdict(info) if is_dataclass(info) else dict(vars(info)), settings=engine.settings.to_dict())
    for step in trace.follow(run_episode(engine, spectrum, task, render, cancel=cancel, on_token=on_token)):
        if on_step is not None:
            on_step(step)
    final = trace.final
    assert isinstance(final, VerdictStep)
    if final.outcome is Outcome.CANCELLED:
        return None
    folder = None
    if trace_root is not None:
        folder = trace_folder(Path(trace_root), task.id, item.key, item.name or spectrum.name)
        trace.save(folder)
    v = ModelVerdict(verdict=final.verdict, outcome=final.outcome.value, turns=final.turns,
                     tokens=final.tokens_generated, seconds=time.perf_counter() - t0, zooms=final.zooms,
                     detail=final.detail, answer=final.answer, trace_dir=str(folder) if folder else None, **base)
    store.record_model_verdict(v)
    return v


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
    on_token: Callable[[str], None] | None = None,
    resume: bool = True,
    total: int | None = None,
) -> BatchResult:
    """Screen ``items`` in order; see module doc. ``progress(i, total, item, verdict_or_None)`` after each item."""
    items = list(items)
    result = BatchResult(total=total if total is not None else len(items))
    t0 = time.perf_counter()
    done = store.done_keys(task.id, engine.info.model_id, task.prompt_version) if resume else set()
    sha_cache: dict[str, str] = {}
    root = Path(trace_root) if trace_root is not None else None
    for i, item in enumerate(items, 1):
        if cancel is not None and cancel.is_set():
            result.cancelled = True
            break
        if storable_text(item.key) in done:  # keys come back from SQLite in their storable form
            result.skipped += 1
            if progress is not None:
                progress(i, result.total, item, None)
            continue
        try:
            v = vet_one(item, store, engine, task, render, trace_root=root, cancel=cancel, on_token=on_token,
                        sha_cache=sha_cache)
        except Speco3Error as exc:  # the store failed: stop, the next run resumes here
            logger.error("stopping the batch: %s", exc)
            raise
        if v is None:
            result.cancelled = True
            break
        done.add(storable_text(item.key))
        result.done += 1
        result.outcomes[v.outcome] = result.outcomes.get(v.outcome, 0) + 1
        if v.outcome in ("engine_error", "input_error"):
            result.failed += 1
        if progress is not None:
            progress(i, result.total, item, v)
    result.seconds = round(time.perf_counter() - t0, 3)
    return result

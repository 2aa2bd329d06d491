"""The evaluation loop: the agent on labelled items, one resumable vetting store per run.

A run store is an ordinary `speco3.vetting.VettingStore`: the ground truth of each item is recorded as a decision
of the vetter ``benchmark`` and every model run as a model verdict (through `speco3.vetting.batch.vet_one`, the
same path as ``spec-o3 vet``). So a run store and a user's own vetting store are scored by the same function,
`results`: the latest human (or benchmark) decision is the truth, the latest model verdict the prediction.
An item already done with the same model and prompt version is skipped (a resumed run continues where it stopped;
cancelled runs and engine errors are retried). Setting ``cancel`` stops between tokens; the interrupted item is not
recorded. The full view the model saw is compared with the benchmark's shipped image when there is one
(`speco3.evaluate.similarity`); the figures go to the store's state table under ``render:<key>``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from speco3.agent.tasks import get_task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.errors import Speco3Error
from speco3.evaluate.bench import BenchItem
from speco3.evaluate.similarity import render_similarity
from speco3.spectra.model import Spectrum
from speco3.spectra.view import View
from speco3.vetting.batch import VetItem, vet_one
from speco3.vetting.records import Decision, ModelVerdict
from speco3.vetting.store import VettingStore, storable_text

logger = logging.getLogger(__name__)

TRUTH_VETTER = "benchmark"


@dataclass
class EvalItem:
    """One labelled item: store key, task, truth, how to load the spectrum, and the shipped first image."""

    key: str
    task: str
    truth: str | None
    load: Callable[[], Spectrum]
    name: str = ""
    error: str | None = None
    image: bytes | None = None


def bench_items(items: Iterable[BenchItem]) -> list[EvalItem]:
    return [EvalItem(i.key, i.task, i.truth, i.spectrum, i.name, i.error, i.image) for i in items]


@dataclass
class RunResult:
    total: int = 0
    done: int = 0
    skipped: int = 0
    invalid: int = 0  # items with an unknown task
    cancelled: bool = False
    seconds: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"total": self.total, "done": self.done, "skipped": self.skipped, "invalid": self.invalid,
                "cancelled": self.cancelled,
                "seconds": self.seconds, "outcomes": dict(self.outcomes)}


class _FullViewTap:
    """Wraps a renderer and keeps the PNG of the last full (not zoomed) view."""

    def __init__(self, render: RenderFn):
        self.render = render
        self.full: bytes | None = None

    def __call__(self, view: View) -> bytes:
        png = self.render(view)
        if not view.is_zoom:
            self.full = png
        return png


def evaluate_items(
    items: list[EvalItem],
    store: VettingStore,
    engine: Engine,
    render: RenderFn,
    *,
    cancel: threading.Event | None = None,
    progress: Callable[[int, int, EvalItem, ModelVerdict | None], None] | None = None,
    trace_root: str | Path | None = None,
) -> RunResult:
    """Run the agent on every item not done yet; see module doc. ``progress(i, total, item, verdict_or_None)``."""
    result = RunResult(total=len(items))
    t0 = time.perf_counter()
    model_id = engine.info.model_id
    done: dict[tuple[str, str], set[str]] = {}
    tap = _FullViewTap(render)
    for i, item in enumerate(items, 1):
        if cancel is not None and cancel.is_set():
            result.cancelled = True
            break
        try:
            task = get_task(item.task)
        except Speco3Error as exc:  # an unknown task id: nothing to run or score
            logger.warning("%s: %s", item.key, exc)
            result.invalid += 1
            continue
        key = storable_text(item.key)
        if item.truth in ("YES", "NO") and store.decision(key, item.task) is None:
            store.record_decision(Decision(key, item.task, item.truth, vetter=TRUTH_VETTER))
        pv = task.prompt_version
        if (task.id, pv) not in done:
            done[(task.id, pv)] = store.done_keys(task.id, model_id, pv)
        if key in done[(task.id, pv)]:
            result.skipped += 1
            if progress is not None:
                progress(i, result.total, item, None)
            continue
        tap.full = None
        v = vet_one(VetItem(key=item.key, load=item.load, name=item.name, error=item.error), store, engine, task,
                    tap, trace_root=Path(trace_root) if trace_root else None, cancel=cancel)
        if v is None:
            result.cancelled = True
            break
        if item.image is not None and tap.full is not None:
            store.set_state(f"render:{key}", render_similarity(tap.full, item.image))
        done[(task.id, pv)].add(key)
        result.done += 1
        result.outcomes[v.outcome] = result.outcomes.get(v.outcome, 0) + 1
        if progress is not None:
            progress(i, result.total, item, v)
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


RESULT_FIELDS = ("key", "task", "truth", "verdict", "outcome", "correct", "turns", "zooms", "seconds", "tokens",
                 "model_id", "quant", "detail", "render_width", "render_height", "shipped_width", "shipped_height",
                 "same_size_class", "render_similarity", "render_error")


def results(store: VettingStore, tasks: list[str] | None = None, model_id: str | None = None) -> list[dict]:
    """Per-item rows: the latest decision (YES/NO; UNSURE and undecided items are left out) against the latest
    model verdict (of ``model_id`` when given), with the model's turns, zooms, time and tokens and the render comparison when there is one."""
    truths = {(d.spectrum_key, d.task): d.decision for d in store.decisions() if d.decision in ("YES", "NO")}
    rows = []
    for v in store.model_verdicts():
        truth = truths.get((v.spectrum_key, v.task))
        if truth is None or (tasks and v.task not in tasks) or (model_id and v.model_id != model_id):
            continue
        sim = store.get_state(f"render:{v.spectrum_key}") or {}
        rows.append({"key": v.spectrum_key, "task": v.task, "truth": truth, "verdict": v.verdict,
                     "outcome": v.outcome, "correct": v.verdict == truth, "turns": v.turns, "zooms": v.zooms,
                     "seconds": v.seconds, "tokens": v.tokens, "model_id": v.model_id, "quant": v.quant,
                     "detail": v.detail, **{k: sim.get(k) for k in RESULT_FIELDS[13:]}})
    return rows

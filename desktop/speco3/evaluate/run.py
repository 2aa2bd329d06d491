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
import re
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
ROLLOUT_RE = re.compile(r"^(?P<base>.*)~r(?P<k>\d+)$")


def rollout_key(key: str, k: int, rollouts: int) -> str:
    """The store key of rollout ``k`` of an item (the item's own key when there is one rollout)."""
    return key if rollouts == 1 else f"{key}~r{k}"


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
    rollouts: int = 1,
    temperature: float = 1.0,
) -> RunResult:
    """Run the agent on every item not done yet; see module doc. ``progress(i, total, item, verdict_or_None)``.

    With ``rollouts`` K > 1 each item runs K times, sampled at ``temperature`` with seeds ``settings.seed + k``
    (recorded with each verdict), under the keys ``KEY~rK``; `results` folds them into one row with ``p_yes``.
    """
    if rollouts < 1:
        raise ValueError(f"rollouts must be at least 1, got {rollouts}")
    settings = engine.settings
    saved = (settings.seed, settings.temperature)
    try:
        return _evaluate(items, store, engine, render, cancel, progress, trace_root, rollouts, temperature, saved[0])
    finally:
        settings.seed, settings.temperature = saved


def _evaluate(items, store, engine, render, cancel, progress, trace_root, rollouts, temperature, seed0) -> RunResult:
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
        todo = [k for k in range(rollouts) if storable_text(rollout_key(item.key, k, rollouts))
                not in done[(task.id, pv)]]
        if not todo:
            result.skipped += 1
            if progress is not None:
                progress(i, result.total, item, None)
            continue
        v = None
        for k in todo:
            if rollouts > 1:
                engine.settings.seed, engine.settings.temperature = seed0 + k, temperature
            rkey = rollout_key(item.key, k, rollouts)
            tap.full = None
            v = vet_one(VetItem(key=rkey, load=item.load, name=item.name, error=item.error), store, engine, task,
                        tap, trace_root=Path(trace_root) if trace_root else None, cancel=cancel)
            if v is None:
                break
            if k == 0 and item.image is not None and tap.full is not None:
                store.set_state(f"render:{key}", render_similarity(tap.full, item.image))
            done[(task.id, pv)].add(storable_text(rkey))
            result.outcomes[v.outcome] = result.outcomes.get(v.outcome, 0) + 1
        if v is None:
            result.cancelled = True
            break
        result.done += 1
        if progress is not None:
            progress(i, result.total, item, v)
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


RESULT_FIELDS = ("key", "task", "truth", "verdict", "outcome", "correct", "turns", "zooms", "seconds", "tokens",
                 "model_id", "quant", "detail", "render_width", "render_height", "shipped_width", "shipped_height",
                 "same_size_class", "render_similarity", "render_error", "rollouts", "p_yes")


def _mean(runs: list[ModelVerdict], attr: str):
    """One run's value as stored; the mean over several rollouts."""
    if len(runs) == 1:
        return getattr(runs[0], attr)
    return sum(getattr(r, attr) or 0 for r in runs) / len(runs)


def results(store: VettingStore, tasks: list[str] | None = None, model_id: str | None = None) -> list[dict]:
    """Per-item rows: the latest decision (YES/NO; UNSURE and undecided items are left out) against the latest
    model verdict (of ``model_id`` when given), with the model's turns, zooms, time and tokens and the render
    comparison when there is one. Rollouts (``KEY~rK``) fold into one row: the majority verdict (none on a tie),
    ``p_yes`` = share of YES among them, and the means of turns, zooms, seconds and tokens."""
    truths = {(d.spectrum_key, d.task): d.decision for d in store.decisions() if d.decision in ("YES", "NO")}
    groups: dict[tuple[str, str], list[ModelVerdict]] = {}
    for v in store.model_verdicts():
        m = ROLLOUT_RE.match(v.spectrum_key)
        base = m.group("base") if m else v.spectrum_key
        if (base, v.task) not in truths or (tasks and v.task not in tasks) or (model_id and v.model_id != model_id):
            continue
        groups.setdefault((base, v.task), []).append(v)
    rows = []
    for (key, task), vs in groups.items():
        truth = truths[(key, task)]
        sim = store.get_state(f"render:{key}") or {}
        if len(vs) == 1 and not ROLLOUT_RE.match(vs[0].spectrum_key):
            v = vs[0]
            verdict, outcome, extra = v.verdict, v.outcome, {"rollouts": 1, "p_yes": None}
        else:
            yes, no = sum(v.verdict == "YES" for v in vs), sum(v.verdict == "NO" for v in vs)
            verdict = "YES" if yes > no else "NO" if no > yes else None
            outcomes = [v.outcome for v in vs]
            outcome = verdict or max(set(outcomes), key=outcomes.count)
            extra = {"rollouts": len(vs), "p_yes": yes / len(vs)}
            v = vs[-1]
        rows.append({"key": key, "task": task, "truth": truth, "verdict": verdict, "outcome": outcome,
                     "correct": verdict == truth, **{a: _mean(vs, a) for a in ("turns", "zooms", "seconds", "tokens")},
                     "model_id": v.model_id, "quant": v.quant,
                     "detail": v.detail, **{k: sim.get(k) for k in RESULT_FIELDS[13:20]}, **extra})
    return rows

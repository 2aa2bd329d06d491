"""The evaluation loop: the agent on labelled items, one resumable vetting store per run.

A run store is an ordinary `speco3.vetting.VettingStore`: the ground truth of each item is recorded as a decision
of the vetter ``benchmark`` and every model run as a model verdict (through the screening core, `speco3.vetting.screening`, the
same path as ``spec-o3 vet``). So a run store and a user's own vetting store are scored by the same function,
`results`: the latest human (or benchmark) decision is the truth, the latest model verdict the prediction.
An item already done with the same model and prompt version is skipped (a resumed run continues where it stopped;
cancelled runs and engine errors are retried). Setting ``cancel`` stops between tokens; the interrupted item is not
recorded. The full view the model saw is compared with the benchmark's shipped image when there is one
(`speco3.evaluate.similarity`); the figures go to the store's state table under ``render:<key>``.
With K rollouts per item (``--rollouts K``) each item's verdict row carries the fold of its rollouts and every
rollout is stored with its trace, as ``spec-o3 vet --rollouts K`` does; with ``--rollouts auto`` (an adaptive
plan, `speco3.agent.adaptive`) as many as the stopping rule asked for, with the budget and the stop reason, and a
resumed run counts an item as done by its budget.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from speco3.agent.confidence import Thresholds, aggregate_outcomes
from speco3.agent.rollouts import RolloutPlan
from speco3.agent.tasks import get_task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.errors import Speco3Error
from speco3.evaluate.bench import BenchItem
from speco3.evaluate.similarity import render_similarity
from speco3.imaging import HasPixels
from speco3.spectra.model import Spectrum
from speco3.spectra.view import View
from speco3.vetting.records import Decision, ModelVerdict
from speco3.vetting.schedulers import one_at_a_time
from speco3.vetting.screening import Cancelled, Recorded, Screening, Skipped, VetItem, screen
from speco3.vetting.store import VettingStore, storable_text

logger = logging.getLogger(__name__)

TRUTH_VETTER = "benchmark"
ROLLOUT_RE = re.compile(r"^(?P<base>.*)~r(?P<k>\d+)$")


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
    """Wraps a renderer and keeps its last full (not zoomed) view: PNG bytes, or the rendered image with its pixels."""

    def __init__(self, render: RenderFn):
        self.render = render
        self.full: bytes | HasPixels | None = None

    def __call__(self, view: View) -> bytes | HasPixels:
        image = self.render(view)
        if not view.is_zoom:
            self.full = image
        return image


def evaluate_items(
    items: list[EvalItem],
    store: VettingStore,
    engine: Engine,
    render: RenderFn,
    *,
    cancel: threading.Event | None = None,
    progress: Callable[[int, int, EvalItem, ModelVerdict | None], None] | None = None,
    trace_root: str | Path | None = None,
    plan: RolloutPlan | None = None,
    thresholds: Thresholds | None = None,
) -> RunResult:
    """Run the agent on every item not done yet; see module doc. ``progress(i, total, item, verdict_or_None)``.

    Each item goes through the screening core (`speco3.vetting.screening`, one `Screening` per task, one spectrum
    at a time): the same done rule, recording and traces as ``spec-o3 vet``. ``plan``: K rollouts per item (None:
    one greedy run; `speco3.agent.settings.RunSettings.plan`, as ``vet`` builds it); the item's verdict row carries
    their fold (``p_yes``, agreement, abstained with ``thresholds``) and every rollout is stored with its trace. An
    item is the unit of resuming: one cancelled in the middle of its rollouts is run again from its first rollout.
    """
    result = RunResult(total=len(items))
    t0 = time.perf_counter()
    cancel = cancel if cancel is not None else threading.Event()
    model_id = engine.info.model_id
    tap = _FullViewTap(render)
    screenings: dict[str, Screening] = {}
    schedule = one_at_a_time(engine)
    for i, item in enumerate(items, 1):
        if cancel.is_set():
            result.cancelled = True
            break
        try:
            task = get_task(item.task)
        except Speco3Error as exc:  # an unknown task id: nothing to run or score
            logger.warning("%s: %s", item.key, exc)
            result.invalid += 1
            continue
        key = storable_text(item.key)
        if item.truth in ("YES", "NO") and store.decision(key, item.task) is None:  # once, however many runs
            store.record_decision(Decision(key, item.task, item.truth, vetter=TRUTH_VETTER), if_undecided=True)
        scr = screenings.get(task.id)
        if scr is None:
            scr = screenings[task.id] = Screening(store, task, tap, trace_root=trace_root, plan=plan,
                                                  thresholds=thresholds, cancel=cancel)
        tap.full = None
        verdict: ModelVerdict | None = None
        for event in screen(scr, [VetItem(key=item.key, load=item.load, name=item.name, error=item.error)], schedule,
                            model_id):
            if isinstance(event, Recorded):
                verdict = event.verdict
            elif isinstance(event, Cancelled):
                result.cancelled = True
            elif isinstance(event, Skipped):
                result.skipped += 1
        if result.cancelled:
            break
        if verdict is not None:
            if item.image is not None and tap.full is not None:
                store.set_state(f"render:{key}", render_similarity(tap.full, item.image))
            for outcome in verdict.outcomes or [verdict.outcome]:
                result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
            result.done += 1
        if progress is not None:
            progress(i, result.total, item, verdict)
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


RESULT_FIELDS = ("key", "task", "truth", "verdict", "outcome", "correct", "turns", "zooms", "seconds", "tokens",
                 "model_id", "quant", "detail", "render_width", "render_height", "shipped_width", "shipped_height",
                 "same_size_class", "render_similarity", "render_error", "rollouts", "p_yes", "p_yes_token",
                 "agreement", "abstained", "format_failures", "outcomes", "k_max", "stop_reason")
_COST = ("turns", "zooms", "seconds", "tokens")


def _fold(store: VettingStore, vs: list[ModelVerdict], thresholds: Thresholds | None) -> dict:
    """verdict, outcome, cost means and confidence of one item's model run(s).

    A run stored with its rollouts (K > 1) carries its fold; the cost is the mean over its rollouts.
    ``rollouts`` is the number that ran (``k_used``: fewer than the budget ``k_max`` when ``--rollouts auto``
    stopped early, for ``stop_reason``; `speco3.agent.adaptive`); rows stored before the budget was have
    ``k_max`` = ``rollouts``. Stores written by earlier versions hold one row per rollout under ``KEY~rK``: those
    are folded here by the same function (`speco3.agent.confidence.aggregate_outcomes`). A single run (K=1) has no ``p_yes`` (the calibration figures
    need K > 1).
    """
    v = vs[-1]
    if len(vs) == 1 and not ROLLOUT_RE.match(v.spectrum_key):
        cost = {a: getattr(v, a) for a in _COST}
        if (v.rollouts or 1) > 1:
            rs = store.rollouts(v.id) if v.id is not None else []
            if rs:
                cost = {a: sum(getattr(r, a) or 0 for r in rs) / len(rs) for a in _COST}
            conf = {"rollouts": v.rollouts, "p_yes": v.p_yes, "p_yes_token": v.p_yes_token,
                    "agreement": v.agreement, "abstained": v.abstained, "format_failures": v.format_failures,
                    "outcomes": ",".join(v.outcomes or []), "k_max": v.k_max or v.rollouts,
                    "stop_reason": v.stop_reason}
        else:
            conf = {"rollouts": 1, "p_yes": None, "p_yes_token": None, "agreement": None,
                    "abstained": v.verdict is None, "format_failures": int(v.outcome == "format_error"),
                    "outcomes": v.outcome, "k_max": v.k_max or 1, "stop_reason": v.stop_reason}
        return {"verdict": v.verdict, "outcome": v.outcome, **cost, **conf}
    c = aggregate_outcomes([r.outcome for r in vs], thresholds=thresholds)
    outcome = c.verdict or max(set(c.outcomes), key=c.outcomes.count)
    return {"verdict": c.verdict, "outcome": outcome,
            **{a: sum(getattr(r, a) or 0 for r in vs) / len(vs) for a in _COST},
            "rollouts": c.k, "p_yes": c.p_yes, "p_yes_token": c.p_yes_token, "agreement": c.agreement,
            "abstained": c.abstained, "format_failures": c.format_failures, "outcomes": ",".join(c.outcomes),
            "k_max": c.k, "stop_reason": None}


def left_out(store: VettingStore, rows: list[dict], tasks: list[str] | None = None) -> dict[str, int]:
    """What `results` leaves out of a store's evaluation, counted: spectra decided UNSURE (no label), spectra
    decided YES/NO but not scored (the model has not run on them, or ``--limit`` cut them), and spectra the model
    ran on that nobody decided (no label). Only the non-zero counts."""
    scored = {(r["key"], r["task"]) for r in rows}
    decided = {(d.spectrum_key, d.task): d.decision for d in store.decisions() if not tasks or d.task in tasks}
    runs = {(v.spectrum_key, v.task) for v in store.model_verdicts() if not tasks or v.task in tasks}
    counts = {"UNSURE_decisions": sum(d == "UNSURE" for d in decided.values()),
              "decided_but_not_scored": sum(k not in scored for k, d in decided.items() if d != "UNSURE"),
              "model_verdicts_without_a_decision": sum(k not in decided for k in runs)}
    return {k: n for k, n in counts.items() if n}


def results(store: VettingStore, tasks: list[str] | None = None, model_id: str | None = None,
            thresholds: Thresholds | None = None) -> list[dict]:
    """Per-item rows: the latest decision (YES/NO; UNSURE and undecided items are left out) against the latest
    model verdict (of ``model_id`` when given), with the model's turns, zooms, time and tokens, the render
    comparison when there is one, and with K rollouts the confidence: the majority verdict (none on a tie),
    ``p_yes`` (share of YES among the answered rollouts), ``p_yes_token``, agreement, abstained, format failures
    and the K outcomes, with the rollouts' budget ``k_max`` and ``stop_reason`` (see `_fold`)."""
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
        if any(not ROLLOUT_RE.match(v.spectrum_key) for v in vs):  # a run under the item's own key is the latest
            vs = [max((v for v in vs if not ROLLOUT_RE.match(v.spectrum_key)), key=lambda v: v.id or 0)]
        truth = truths[(key, task)]
        sim = store.get_state(f"render:{key}")
        sim = sim if isinstance(sim, dict) else {}
        fold = _fold(store, vs, thresholds)
        v = vs[-1]
        rows.append({"key": key, "task": task, "truth": truth, "correct": fold["verdict"] == truth, **fold,
                     "model_id": v.model_id, "quant": v.quant, "detail": v.detail,
                     **{k: sim.get(k) for k in RESULT_FIELDS[13:20]}})
    return rows

"""K traced rollouts of one spectrum and their fold: what ``spec-o3 inspect``, ``vet`` and the app share.

`run_traced` runs `speco3.agent.rollouts.run_group` and keeps one `Trace` per rollout that ran (its sampling in the
trace's settings); `save_rollouts` writes each trace (``FOLDER`` itself when K=1, as for a single run, else
``FOLDER/r00``, ``FOLDER/r01`` …) and describes each rollout as a `RolloutRecord`; `verdict_row` folds them into
the model verdict row (`speco3.agent.confidence.aggregate`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path

from speco3.agent.adaptive import STOP_FIXED
from speco3.agent.confidence import Confidence, Thresholds, aggregate
from speco3.agent.loop import EpisodeOptions
from speco3.agent.rollouts import RolloutGroup, RolloutPlan, run_group
from speco3.agent.steps import Outcome, VerdictStep
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.agent.trace import Trace, spectrum_ref
from speco3.engine.base import Engine, Sampling
from speco3.spectra.model import Spectrum
from speco3.vetting.records import ModelVerdict, RolloutRecord

logger = logging.getLogger(__name__)


@dataclass
class RolloutRun:
    """The traces of K rollouts of one spectrum, with the sampling of each (an adaptive plan: the rollouts that ran,
    ``k_max`` the budget, ``stop_reason`` why no more ran; `speco3.agent.adaptive`)."""

    plan: RolloutPlan
    samplings: list[Sampling]
    traces: list[Trace]
    seconds: float = 0.0
    stop_reason: str = STOP_FIXED

    @property
    def k_max(self) -> int:
        return self.plan.k

    def keep(self, group: RolloutGroup) -> None:
        """Keep the traces and samplings of the rollouts ``group`` ran (an adaptive group may stop early) and
        its stop reason."""
        del self.traces[group.k_used:], self.samplings[group.k_used:]
        self.stop_reason = group.stop_reason

    @property
    def finals(self) -> list[VerdictStep | None]:
        """Each rollout's final step (None for one that never started: a cancelled run)."""
        return [t.final for t in self.traces]

    @property
    def finished(self) -> list[VerdictStep]:
        """Each rollout's final step, of a run whose rollouts all ended (what is folded and recorded)."""
        finals = [t.final for t in self.traces if t.final is not None]
        if len(finals) != len(self.traces):
            raise ValueError("a rollout without its final step cannot be folded or recorded")
        return finals

    @property
    def cancelled(self) -> bool:
        return any(f is None or f.outcome is Outcome.CANCELLED for f in self.finals)

    def confidence(self, thresholds: Thresholds | None = None) -> Confidence:
        return aggregate(self.finished, thresholds)


def engine_plan(engine: Engine) -> RolloutPlan:
    """One rollout sampled as the engine's settings say (temperature 0 by default: the paper's greedy run)."""
    s = engine.settings
    return RolloutPlan(1, s.temperature, s.top_p, s.top_k, s.seed)


def new_run(engine: Engine, spectrum: Spectrum, task: Task, plan: RolloutPlan | None = None, *,
            spectrum_extra: dict | None = None) -> RolloutRun:
    """The empty traces of ``plan``'s rollouts (None: `engine_plan`), each with its sampling in its settings."""
    plan = plan or engine_plan(engine)
    samplings = plan.samplings()
    info = engine.info
    traces = [Trace(task_id=task.id, task_text=task.text, prompt_version=task.prompt_version,
                    spectrum={**spectrum_ref(spectrum), **(spectrum_extra or {})},
                    model=asdict(info) if is_dataclass(info) else dict(vars(info)),
                    settings={**engine.recorded_settings(), "sampling": sampling.to_dict(), "rollout": i,
                              "rollouts": plan.k})
              for i, sampling in enumerate(samplings)]
    return RolloutRun(plan, samplings, traces)


def run_into(run: RolloutRun, engine: Engine, spectrum: Spectrum, task: Task, render: RenderFn,
             options: EpisodeOptions = EpisodeOptions(), *, on_step: Callable[[int, object], None] | None = None,
             thresholds: Thresholds | None = None) -> RolloutRun:
    """Run ``run``'s rollouts (`speco3.agent.rollouts.run_group`, with ``options``), adding each step to its
    rollout's trace; ``on_step(i, step)`` for each step of rollout i; an adaptive plan stops as its rule says (with
    ``thresholds``) and keeps the traces of the rollouts that ran."""

    def step_done(i: int, step) -> None:
        run.traces[i].add(step)
        if on_step is not None:
            on_step(i, step)

    t0 = time.perf_counter()
    group = run_group(engine, spectrum, task, render, run.plan, options, thresholds=thresholds, on_step=step_done)
    run.seconds = time.perf_counter() - t0
    run.keep(group)
    return run


def run_traced(
    engine: Engine,
    spectrum: Spectrum,
    task: Task,
    render: RenderFn,
    plan: RolloutPlan | None = None,
    options: EpisodeOptions = EpisodeOptions(),
    *,
    spectrum_extra: dict | None = None,
    on_step: Callable[[int, object], None] | None = None,
    thresholds: Thresholds | None = None,
) -> RolloutRun:
    """Run ``plan`` (None: `engine_plan`) on ``spectrum`` with ``options``; ``on_step(i, step)`` for each step of
    rollout i."""
    run = new_run(engine, spectrum, task, plan, spectrum_extra=spectrum_extra)
    return run_into(run, engine, spectrum, task, render, options, on_step=on_step, thresholds=thresholds)


def rollout_folder(folder: Path, i: int, k: int) -> Path:
    return folder if k == 1 else folder / f"r{i:02d}"


def save_rollouts(run: RolloutRun, folder: str | Path | None) -> list[RolloutRecord]:
    """Write each rollout's trace under ``folder`` (when given) and describe each rollout."""
    records = []
    for i, (trace, sampling) in enumerate(zip(run.traces, run.samplings, strict=True)):
        where = rollout_folder(Path(folder), i, run.plan.k) if folder is not None else None
        if where is not None:
            trace.save(where)
        f = run.finished[i]
        windows = [[*(step.wavelength_range or (None, None)), step.label] for step in trace.tool_steps()]
        records.append(RolloutRecord(
            idx=i, outcome=f.outcome.value, verdict=f.verdict, p_yes_token=f.p_yes_token, seed=sampling.seed,
            temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k, turns=f.turns,
            tokens=f.tokens_generated, zooms=f.zooms, seconds=f.seconds, detail=f.detail, answer=f.answer,
            trace_dir=str(where) if where is not None else None, windows=windows))
    return records


def log_fold(spectrum: str, task: str, conf: Confidence) -> None:
    """One log line per spectrum screened with K > 1 rollouts: the verdict, the vote and why it abstained."""
    p = "none" if conf.p_yes is None else f"{conf.p_yes:.2f}"
    logger.info("%s (%s): %s from %d rollouts (outcomes %s): p_yes %s, agreement %s%s", spectrum, task,
                conf.verdict or "no verdict", conf.k, ", ".join(conf.outcomes), p,
                "none" if conf.agreement is None else f"{conf.agreement:.2f}",
                f" — {conf.headline}" if conf.abstained else "")


def verdict_row(run: RolloutRun, records: list[RolloutRecord], conf: Confidence, **base) -> ModelVerdict:
    """The model verdict row of a run: the majority verdict (None on a tie), what the run came to
    (`Confidence.outcome`: the verdict, ``tie``, ``no_answer``, ``abstained`` …), the fold, and the turns, zooms,
    answer and trace of the first rollout that gave the majority verdict (rollout 0 without one); tokens summed."""
    rep = next((i for i, r in enumerate(records) if conf.verdict and r.verdict == conf.verdict), 0)
    final = run.finished[rep]
    v = ModelVerdict(verdict=conf.verdict, outcome=conf.outcome, turns=final.turns,
                     tokens=sum(f.tokens_generated for f in run.finished), zooms=final.zooms, detail=final.detail,
                     answer=final.answer, trace_dir=records[rep].trace_dir, **base)
    if run.plan.k > 1:
        v.engine_settings = {**v.engine_settings, "rollout_plan": asdict(run.plan)}
        log_fold(v.spectrum_key, v.task, conf)
    v.set_confidence(conf)
    v.k_max, v.stop_reason = run.k_max, run.stop_reason
    return v

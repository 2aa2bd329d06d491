"""``spec-o3 inspect FILE[#N] --task cv``: the model on one spectrum, its reasoning streamed as it is generated.

- One episode (the default): streams the reasoning to stdout, saves each image the model saw beside a JSON trace
  (``--out DIR``), prints the verdict. Exit status 0 with a verdict, 3 without one, 130 when interrupted.
- ``--rollouts K [--temperature T --seed S] [--json]`` runs K sampled episodes (rollout i with seed ``S+i``) and
  reports ``p_yes`` (share of YES among the rollouts that answered), ``p_yes_token`` (mean probability the model put
  on YES at its verdict token, when the engine records log-probabilities), the K outcomes, the agreement, format
  failures and whether it abstains (``--min-agreement``, ``--min-answered``). Each rollout's trace goes to
  ``OUT/r00``, ``OUT/r01`` …, the fold to ``OUT/confidence.json``. K=1 without ``--temperature`` is the paper's
  greedy evaluation, unchanged.
- ``--rollouts auto [--max-rollouts N]`` runs them in rounds (`speco3.agent.adaptive`): 2 first, more only while
  the decision is not settled, up to N (default 8); ``k_used``, ``k_max`` and ``stop_reason`` say how it ended.

Models: ``--model NAME`` (installed in the model store; default: the store's default model) or explicit
``--text GGUF --mmproj GGUF``; without a model, ``--demo`` runs the scripted demo session on a spectrum of the demo
archive (`speco3.demo`; refused for any other spectrum). The hidden ``--scripted FILE`` replays a JSON script instead of a model
(`speco3.engine.scripted.load_script`), for tests and the robustness suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from speco3.agent import (
    MAX_TURNS,
    AssistantStep,
    EpisodeOptions,
    Outcome,
    PromptStep,
    ToolStep,
    Trace,
    VerdictStep,
    run_episode,
)
from speco3.agent.confidence import Confidence
from speco3.agent.eta import Rates, TimeToVerdict, format_eta
from speco3.agent.settings import RunSettings
from speco3.agent.tasks import Task, get_task
from speco3.agent.tool import RenderFn
from speco3.agent.trace import spectrum_ref
from speco3.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_NO_VERDICT,
    model_options,
    open_cli_engine,
    renderer,
    rollout_options,
    run_settings,
    sigint_cancels,
)
from speco3.engine.base import Engine, ModelInfo
from speco3.errors import Speco3Error
from speco3.fileio import write_text_atomic
from speco3.spectra import read_spectrum
from speco3.spectra.model import Spectrum
from speco3.vetting.records import RolloutRecord
from speco3.vetting.rollout_runs import RolloutRun, engine_plan, log_fold, run_traced, save_rollouts


def register(sub) -> None:
    p = sub.add_parser("inspect", help="run the model on one spectrum and stream its reasoning")
    p.add_argument("address", metavar="FILE[#N]", help="spectrum file, or FILE#N for the N-th spectrum in it")
    p.add_argument("--task", required=True, help="task id (cv, carbon, ss, gm, wd, or a user task)")
    p.add_argument("--out", metavar="DIR", help="trace folder (default: ./spec-o3-<name>-<task>)")
    p.add_argument("--quiet", action="store_true", help="do not stream the reasoning")
    p.add_argument("--json", action="store_true", help="print the verdict and its confidence as JSON on stdout")
    model_options(p, demo=True)
    rollout_options(p)
    p.set_defaults(func=cmd_inspect)


def _info_dict(info: ModelInfo) -> dict:
    return asdict(info)


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def cmd_inspect(args: argparse.Namespace) -> int:
    task = get_task(args.task)
    settings = run_settings(args, task)
    plan = settings.plan()
    spectrum = read_spectrum(args.address)
    render = renderer(args)
    engine = open_cli_engine(args, settings, spectrum=spectrum, task=task)
    out = Path(args.out) if args.out else Path.cwd() / f"spec-o3-{_safe_name(spectrum.name)}-{task.id}"
    if plan is not None or args.json:
        return cmd_inspect_rollouts(args, settings, task, spectrum, engine, render, out)
    trace = Trace(task_id=task.id, task_text=task.text, prompt_version=task.prompt_version,
                  spectrum=spectrum_ref(spectrum), model=_info_dict(engine.info), settings=engine.settings.to_dict())
    stream = None if args.quiet else _to_stdout
    cancel = threading.Event()
    final = None
    max_turns = MAX_TURNS if args.max_turns is None else args.max_turns
    print(f"{spectrum.name} · task {task.id} ({task.target_class}) · model {engine.info.model_id}", flush=True)
    eta = TimeToVerdict(rates=Rates.from_stats(engine.stats()), max_turns=max_turns)
    try:
        with sigint_cancels(cancel):
            for step in trace.follow(run_episode(engine, spectrum, task, render,
                                                 EpisodeOptions(cancel=cancel, on_token=stream, max_turns=max_turns))):
                eta.observe(step, engine.stats() if isinstance(step, AssistantStep) else None)
                if isinstance(step, PromptStep) and step.image is not None:
                    print(f"[full view {step.image.width}×{step.image.height} px, {step.image.n_tokens} image tokens]")
                elif isinstance(step, AssistantStep) and not args.quiet:
                    print(f"\n[turn {step.turn}: {step.n_tokens} tokens, {step.tokens_per_s:.1f} tok/s · "
                          f"{format_eta(eta.remaining())}]", flush=True)
                elif isinstance(step, ToolStep):
                    rng = step.wavelength_range
                    what = f"{rng[0]:g}–{rng[1]:g} Å" if rng else "?"
                    print(f"[zoom {what}{': ' + step.label if step.label else ''}] {step.response_text}", flush=True)
                elif isinstance(step, VerdictStep):
                    final = step
    finally:
        engine.close()
    trace.save(out)
    print(f"\ntrace: {out}")
    if final is None:  # pragma: no cover - run_episode always ends with a VerdictStep
        raise Speco3Error("the episode ended without a verdict record")
    if final.outcome.has_verdict:
        print(f"Verdict: {final.verdict} ({task.target_class}) — {final.turns} turns, {final.zooms} zooms, "
              f"{final.tokens_generated} tokens, {final.seconds:.1f} s"
              + ("" if final.strict else f" [answer read by fallback: {final.method}]"))
        return 0
    print(f"No verdict: {final.outcome.value} — {final.detail}")
    return EXIT_INTERRUPTED if final.outcome is Outcome.CANCELLED else EXIT_NO_VERDICT


def _window(w) -> str:
    lo, hi, label = (list(w) + [None] * 3)[:3]
    rng = f"{lo:g}–{hi:g} Å" if lo is not None and hi is not None else "?"
    return rng + (f" {label}" if label else "")


def confidence_report(conf: Confidence, records: list[RolloutRecord], run: RolloutRun) -> dict:
    """The ``--json`` fields: the fold (with the rollouts used, the budget and why no more ran) plus one entry per
    rollout."""
    return {**conf.to_dict(), "k_used": conf.k, "k_max": run.k_max, "stop_reason": run.stop_reason,
            "uncertainty": conf.uncertainty, "abstain_reason": conf.abstain_reason or None, "outcome": conf.outcome,
            "rollout_details": [{k: v for k, v in r.to_dict().items() if k != "verdict_id"} for r in records]}


def _to_stdout(piece: str) -> None:
    """The reasoning streamed as it is generated."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def cmd_inspect_rollouts(args: argparse.Namespace, settings: RunSettings, task: Task, spectrum: Spectrum,
                         engine: Engine, render: RenderFn, out: Path) -> int:
    """``inspect`` with ``--rollouts K`` or ``--json`` (see module doc); the engine is closed here."""
    thresholds = settings.thresholds()
    plan = settings.plan() or engine_plan(engine)
    say = sys.stderr if args.json else sys.stdout
    stream = _to_stdout if plan.k == 1 and not (args.quiet or args.json) else None
    samplings = plan.samplings()

    def on_step(i: int, step) -> None:
        if isinstance(step, VerdictStep):
            print(f"rollout {i + 1}/{plan.k} (seed {samplings[i].seed}, T={samplings[i].temperature:g}): "
                  f"{step.verdict or step.outcome.value} — {step.turns} turns, {step.zooms} zooms"
                  + (f", P(YES) {step.p_yes_token:.2f}" if step.p_yes_token is not None else "")
                  + (f" [{step.detail}]" if not step.outcome.has_verdict and step.detail else ""),
                  file=say, flush=True)

    cancel = threading.Event()
    print(f"{spectrum.name} · task {task.id} ({task.target_class}) · model {engine.info.model_id} · "
          + (f"up to {plan.k} rollouts (auto)" if plan.adaptive else f"{plan.k} rollout{'s' if plan.k > 1 else ''}"),
          file=say, flush=True)
    try:
        with sigint_cancels(cancel):
            options = EpisodeOptions(cancel=cancel, on_token=stream,
                                     max_turns=MAX_TURNS if args.max_turns is None else args.max_turns)
            run = run_traced(engine, spectrum, task, render, plan, options, on_step=on_step, thresholds=thresholds)
    finally:
        engine.close()
    records = save_rollouts(run, out)
    conf = run.confidence(thresholds)
    log_fold(spectrum.name, task.id, conf)
    report = {"spectrum": spectrum.name, "task": task.id, "model_id": engine.info.model_id, "trace": str(out),
              **confidence_report(conf, records, run)}
    write_text_atomic(out / "confidence.json", json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for r in records:
            print(f"  rollout {r.idx + 1}: {r.verdict or r.outcome}; windows: "
                  f"{', '.join(_window(w) for w in r.windows) or 'none'}")
        p = "—" if conf.p_yes is None else f"{conf.p_yes:.2f}"
        tok = "" if conf.p_yes_token is None else f", mean P(YES) at the answer token {conf.p_yes_token:.2f}"
        agree = "—" if conf.agreement is None else f"{conf.agreement:.2f}"
        print(f"\ntrace: {out}\nVerdict: {conf.verdict or 'none'} ({task.target_class}) — p_yes {p} "
              f"({conf.yes} YES / {conf.no} NO of {conf.k}{tok}), agreement {agree}, "
              f"{conf.format_failures} format failures"
              + (f"; {conf.k} of up to {run.k_max} rollouts ({run.stop_reason})" if plan.adaptive else "")
              + (f" — ABSTAINED ({conf.abstain_reason}); outcome {conf.headline}" if conf.abstained else ""))
    if run.cancelled:
        return EXIT_INTERRUPTED
    return 0 if conf.verdict else EXIT_NO_VERDICT



__all__ = ["cmd_inspect", "confidence_report", "register"]

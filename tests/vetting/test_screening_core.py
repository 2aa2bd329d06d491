"""The screening core (`speco3.vetting.screening`): its events, its error policy, and what the CLI and the app build
from the same options (the one settings object and rollout plan); ``queue --json``'s abstention reasons."""

from __future__ import annotations

import argparse
import json
import threading

import numpy as np
import pytest
from vetting_helpers import NO, YES, ZOOM, items, make_spectrum, pillow_render

from speco3.agent import get_task
from speco3.agent.rollouts import RolloutPlan
from speco3.cli import build_parser
from speco3.cli import main as cli_main
from speco3.cli.options import run_settings
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import EngineError
from speco3.gui.settings import AppSettings
from speco3.vetting import VettingStore
from speco3.vetting.schedulers import on_slots, on_threads, one_at_a_time, vet_batch
from speco3.vetting.screening import (
    Cancelled,
    Recorded,
    Screening,
    Skipped,
    Started,
    Stepped,
    VetItem,
    screen,
    vet,
)

NO_ANSWER = "<think>hm</think> not sure"


def test_events_of_a_run_then_a_resume(tmp_path):
    """Started, a Stepped per step, Recorded; an unreadable spectrum is Recorded as input_error without Started;
    a second run skips what is done."""
    task = get_task("cv")
    batch = items(2) + [VetItem(key="/data/bad.fits#0", load=lambda: None, error="truncated file")]
    with VettingStore(tmp_path / "s.sqlite") as store:
        scr = Screening(store, task, pillow_render, trace_root=tmp_path / "tr")
        events = list(screen(scr, batch, one_at_a_time(ScriptedEngine([ZOOM, YES])), "scripted"))
        kinds = [type(e).__name__ for e in events]
        assert kinds[0] == "Started" and kinds.count("Started") == 2 and kinds.count("Recorded") == 3
        assert kinds.index("Stepped") == 1 and not any(isinstance(e, Cancelled | Skipped) for e in events)
        steps = [e.step.kind for e in events if isinstance(e, Stepped) and e.item.key == batch[0].key]
        assert steps == ["prompt", "assistant", "tool", "assistant", "verdict"]
        bad = events[-1]
        assert isinstance(bad, Recorded) and bad.started is None and bad.failed
        assert bad.verdict.outcome == "input_error" and "truncated file" in bad.verdict.detail
        ok = [e for e in events if isinstance(e, Recorded) and not e.failed]
        assert [e.verdict.verdict for e in ok] == ["YES", "YES"]
        assert all(e.verdict.trace_dir == str(scr.folder(e.started)) for e in ok)

        again = vet(Screening(store, task, pillow_render), batch, one_at_a_time(ScriptedEngine([NO])), "scripted")
        assert again.skipped == 3 and again.done == 0  # an unreadable file is done too (until it changes)


def test_a_cancel_ends_the_run_in_flight_unrecorded(tmp_path):
    task = get_task("cv")
    with VettingStore(tmp_path / "s.sqlite") as store:
        scr = Screening(store, task, pillow_render)
        out = []
        for event in screen(scr, items(3), one_at_a_time(ScriptedEngine([ZOOM, YES])), "scripted"):
            out.append(event)
            if isinstance(event, Started) and event.item.key.endswith("spec01.fits#0"):
                scr.cancel.set()
        assert [type(e).__name__ for e in out if not isinstance(e, Stepped)] == ["Started", "Recorded", "Started",
                                                                               "Cancelled"]
        assert [v.spectrum_key for v in store.model_verdicts("cv")] == ["/data/spec00.fits#0"]


@pytest.mark.parametrize("schedule", ["one_at_a_time", "on_slots", "on_threads"])
def test_a_bug_in_the_engine_propagates_out_of_vet_and_is_not_recorded(tmp_path, schedule):
    """A TypeError is a bug, not an engine error: it fails the run that meets it (here: the test) instead of
    landing in the store as an ``engine_error`` verdict that a resumed run would retry silently."""
    task = get_task("cv")

    def engine():
        return ScriptedEngine([ZOOM, TypeError("a bug in the engine")])

    scheduler = {"one_at_a_time": lambda: one_at_a_time(engine()), "on_slots": lambda: on_slots(engine(), 2),
                 "on_threads": lambda: on_threads([engine(), engine()])}[schedule]()
    with VettingStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(TypeError, match="a bug in the engine"):
            vet(Screening(store, task, pillow_render), items(3), scheduler, "scripted")
        assert store.model_verdicts("cv", latest=False) == []


def test_engine_errors_are_outcomes_recorded_and_retried(tmp_path):
    task = get_task("cv")
    with VettingStore(tmp_path / "s.sqlite") as store:
        first = vet_batch(items(2), store, ScriptedEngine([ZOOM, EngineError("device lost")]), task, pillow_render)
        assert first.outcomes == {"engine_error": 2} and first.failed == 2
        second = vet_batch(items(2), store, ScriptedEngine([YES]), task, pillow_render)
        assert second.done == 2 and second.skipped == 0 and second.outcomes == {"YES": 2}


def test_a_bug_in_vet_propagates_from_the_command_line(tmp_path):
    """The same through ``spec-o3 vet``: a renderer with a bug (a TypeError) is not an input error of the
    spectrum; the command fails and nothing is stored as a verdict."""
    folder = tmp_path / "arch"
    folder.mkdir()
    wl = np.linspace(3700, 9100, 600)
    np.savetxt(folder / "s.csv", np.c_[wl, 10 + np.sin(wl)], delimiter=",", header="wavelength,flux", comments="")
    script = tmp_path / "s.json"
    script.write_text(json.dumps([YES]), encoding="utf-8")

    def buggy(view):
        raise TypeError("renderer bug")

    db = tmp_path / "r.sqlite"
    with pytest.raises(TypeError, match="renderer bug"):
        cli_main(["vet", str(folder), "--task", "cv", "--out", str(db), "--scripted", str(script)], render=buggy)
    with VettingStore(db, readonly=True) as store:
        assert store.model_verdicts("cv", latest=False) == []


# -- one settings object, one rollout plan ------------------------------------------------------------------------
def _args(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def test_rollouts_4_sample_the_same_in_vet_inspect_evaluate_and_the_app():
    vet_args = _args(["vet", "ARCH", "--task", "cv", "--out", "r.sqlite", "--rollouts", "4"])
    inspect_args = _args(["inspect", "F.fits", "--task", "cv", "--rollouts", "4"])
    eval_args = _args(["evaluate", "B.parquet", "--rollouts", "4"])
    app = AppSettings(rollouts=4).run_settings()
    plans = [run_settings(a).plan() for a in (vet_args, inspect_args, eval_args)] + [app.plan()]
    assert plans[0] == RolloutPlan(4, 1.0, 1.0, 0, 0)
    assert all(p == plans[0] for p in plans), plans
    assert len({tuple(p.samplings()) for p in plans}) == 1
    assert [s.seed for s in plans[0].samplings()] == [0, 1, 2, 3]
    assert {s.temperature for s in plans[0].samplings()} == {1.0}  # the training temperature
    # the engine records the same log-probabilities everywhere (for P(YES) at the verdict token)
    assert {run_settings(a).engine.top_logprobs for a in (vet_args, inspect_args, eval_args)} == {5}
    assert app.engine.top_logprobs == 5
    # K = 1 is the engine's own greedy run everywhere (no plan), with no alternatives recorded
    ones = [run_settings(_args(["vet", "A", "--task", "cv", "--out", "r"])), AppSettings().run_settings(),
            run_settings(_args(["evaluate", "B.parquet"]))]
    assert all(s.plan() is None and s.engine.top_logprobs == 0 for s in ones)


def test_the_rollouts_of_vet_evaluate_and_the_app_are_the_same_runs(tmp_path):
    """Not only the plans: the rollouts recorded through the core sample the same (seed, temperature, top-p,
    top-k) whichever front end built the plan."""
    from speco3.evaluate.run import EvalItem, evaluate_items

    task = get_task("cv")
    spectrum = make_spectrum(name="x.fits", seed=3)
    recorded = []
    for plan in (run_settings(_args(["vet", "A", "--task", "cv", "--out", "r", "--rollouts", "4"])).plan(),
                 AppSettings(rollouts=4).run_settings().plan()):
        with VettingStore(tmp_path / f"{len(recorded)}.sqlite") as store:
            vet_batch([VetItem("/d/x.fits#0", lambda: spectrum)], store,
                      ScriptedEngine(scripts=[[YES], [NO]], select="seed"), task, pillow_render, plan=plan)
            v = store.model_verdicts("cv")[0]
            recorded.append([(r.seed, r.temperature, r.top_p, r.top_k, r.outcome) for r in store.rollouts(v.id)])
    with VettingStore(tmp_path / "eval.sqlite") as store:
        plan = run_settings(_args(["evaluate", "B.parquet", "--rollouts", "4"])).plan()
        evaluate_items([EvalItem("/d/x.fits#0", "cv", "YES", lambda: spectrum)], store,
                       ScriptedEngine(scripts=[[YES], [NO]], select="seed"), pillow_render, plan=plan)
        v = store.model_verdicts("cv")[0]
        recorded.append([(r.seed, r.temperature, r.top_p, r.top_k, r.outcome) for r in store.rollouts(v.id)])
    assert recorded[0] == recorded[1] == recorded[2]
    assert recorded[0] == [(0, 1.0, 1.0, 0, "YES"), (1, 1.0, 1.0, 0, "NO"), (2, 1.0, 1.0, 0, "YES"),
                           (3, 1.0, 1.0, 0, "NO")]


# -- queue --json: why the model abstained ----------------------------------------------------------------------
def test_queue_json_abstain_reasons_count_the_rollouts(tmp_path, capsys):
    """``spec-o3 queue --json`` counts the rollouts of each row (it once took the length of the comma-joined
    outcomes: "no rollout of 51 answered" at K=4)."""
    task = get_task("cv")
    masked = make_spectrum(name="masked.fits", seed=9)
    masked.mask[:] = True
    db = tmp_path / "q.sqlite"
    with VettingStore(db) as store:
        vet_batch(items(1, prefix="k1_"), store, ScriptedEngine([NO_ANSWER]), task, pillow_render)
        vet_batch(items(1, prefix="k4none_"), store, ScriptedEngine([NO_ANSWER]), task, pillow_render,
                  plan=RolloutPlan(4, 1.0))
        vet_batch(items(1, prefix="k4tie_"), store, ScriptedEngine(scripts=[[YES], [NO]], select="seed"), task,
                  pillow_render, plan=RolloutPlan(4, 1.0))
        vet_batch([VetItem("/data/masked.fits#0", lambda: masked, name="masked.fits")], store,
                  ScriptedEngine([YES]), task, pillow_render, plan=RolloutPlan(4, 1.0))
        vet_batch([VetItem("/data/bad.fits#0", lambda: None, error="truncated file")], store,
                  ScriptedEngine([YES]), task, pillow_render, plan=RolloutPlan(4, 1.0))
    assert cli_main(["queue", str(db), "--json", "--order", "queue"]) == 0
    rows = {r["spectrum_key"].rsplit("/", 1)[-1]: r for r in json.loads(capsys.readouterr().out)}
    # one run (K=1) is named by how it ended, not as an abstention; a group by what its vote came to
    assert rows["k1_00.fits#0"]["abstain_reason"] is None
    assert rows["k1_00.fits#0"]["model_outcome"] == "format_error"
    assert rows["k4none_00.fits#0"]["abstain_reason"] == "no rollout of 4 answered (4 format_error)"
    assert rows["k4none_00.fits#0"]["model_outcome"] == "no_answer"
    assert rows["k4tie_00.fits#0"]["abstain_reason"] == "a tie, 2 YES / 2 NO"
    assert rows["k4tie_00.fits#0"]["model_outcome"] == "tie"
    assert rows["masked.fits#0"]["rollout_outcomes"] == "input_error,input_error,input_error,input_error"
    assert rows["masked.fits#0"]["abstain_reason"] == "no rollout of 4 answered (4 input_error)"  # 4 rollouts
    assert rows["masked.fits#0"]["model_outcome"] == "input_error"
    assert all(r["k_max"] == r["k_used"] == r["rollouts"] and r["stop_reason"] == "fixed" for r in rows.values()
               if r["model_verdict"] is not None)
    assert rows["bad.fits#0"]["model_verdict"] is None and rows["bad.fits#0"]["abstain_reason"] is None


def test_screening_runs_on_threads_in_completion_order_and_counts_once(tmp_path):
    task = get_task("cv")
    cancel = threading.Event()
    with VettingStore(tmp_path / "s.sqlite") as store:
        engines = [ScriptedEngine([ZOOM, YES], delay_s=0.001), ScriptedEngine([NO])]
        res = vet(Screening(store, task, pillow_render, cancel=cancel), items(6), on_threads(engines), "scripted")
        assert res.done == 6 and not res.cancelled and sum(res.outcomes.values()) == 6
        keys = [v.spectrum_key for v in store.model_verdicts("cv", latest=False)]
        assert len(keys) == len(set(keys)) == 6


# -- the time left of a K = 4 batch (issue 26: "about 77 s left" for ~4 min) -------------------------------------
def test_time_left_of_a_k4_batch_is_calibrated_on_the_measured_time_per_spectrum(tmp_path):
    """The queue estimate the app shows, fed from the core's events as the app feeds it, against the real time the
    rest of a K = 4 batch took: rollout 0 (the one the live estimate follows) answers at once while the three others
    zoom twice, so the old estimate (rollout 0's own seconds per spectrum) was about a quarter of the truth."""
    import time

    from speco3.agent.eta import QueueEstimate, Rates

    task = get_task("cv")
    engine = ScriptedEngine(scripts=[[YES], [ZOOM, ZOOM, NO], [ZOOM, ZOOM, YES], [ZOOM, ZOOM, NO]], select="seed",
                            delay_s=0.0015)
    queue = QueueEstimate(rollouts=4)
    old = QueueEstimate()  # what the app did: rollout 0's seconds
    n = 6
    checks = []
    with VettingStore(tmp_path / "s.sqlite") as store:
        scr = Screening(store, task, pillow_render, plan=RolloutPlan(4, 1.0))
        t_done, recorded = [], []
        eta = None
        for event in screen(scr, items(n), one_at_a_time(engine), "scripted"):
            if isinstance(event, Started):
                eta = queue.new_episode(Rates())
            elif isinstance(event, Stepped) and event.rollout == 0:
                eta.observe(event.step)
            elif isinstance(event, Recorded):
                final = event.started.run.finals[0]
                queue.finished(final, event.verdict.seconds)
                old.finished(final)
                recorded.append(event.verdict)
                t_done.append(time.perf_counter())
                left = n - len(t_done)
                if 2 <= len(t_done) < n:
                    checks.append((len(t_done), queue.remaining(None, left), old.remaining(None, left)))
    seconds = [v.seconds for v in recorded]
    for done, estimate, before in checks:
        actual = sum(seconds[done:])  # what the spectra left then took (each measured by the core)
        assert 0.6 * actual < estimate < 1.6 * actual, (done, estimate, actual)
        assert before < 0.5 * actual  # the old estimate: far too low
    # the spectrum under way has at least the measured mean left, less what it has run
    cur = queue.new_episode(Rates())
    per = sum(queue.episode_seconds) / len(queue.episode_seconds)
    assert per - 1.0 < queue.remaining(cur, 0) <= per

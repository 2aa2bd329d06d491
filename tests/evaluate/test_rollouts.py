"""K rollouts per item: every rollout stored with its seed and temperature, the fold on the item's row, calibration
against scikit-learn, the abstention operating point by hand, resume by item, and stores of the earlier layout."""

from __future__ import annotations

import csv
import itertools
import json
import threading

import pytest
from benchkit import LABELS, pillow_render
from sklearn.metrics import brier_score_loss

from speco3.agent.confidence import Thresholds
from speco3.agent.settings import RolloutSettings
from speco3.cli import main as cli_main
from speco3.engine.base import EngineSettings
from speco3.engine.scripted import ScriptedEngine
from speco3.evaluate.bench import BenchFile
from speco3.evaluate.metrics import selective, summarize
from speco3.evaluate.run import bench_items, evaluate_items, results
from speco3.vetting import Decision, ModelVerdict, VettingStore

K = 3


def _engine():
    answers = itertools.cycle(["YES", "YES", "NO", "NO", "YES", "??", "NO"])  # p_yes differs across items
    return ScriptedEngine(outputs=lambda conv: f"<answer>\\boxed{{{next(answers)}}}</answer>")


def test_rollouts_fold_into_p_yes_and_calibration(bench_path, tmp_path, render):
    items = bench_items(BenchFile(bench_path).items())
    engine = _engine()
    with VettingStore(tmp_path / "r.sqlite") as store:
        res = evaluate_items(items, store, engine, render, plan=RolloutSettings(K, 0.8).plan(), trace_root=tmp_path / "tr")
        rows = results(store)
        runs = store.model_verdicts()
        rollouts = {v.spectrum_key: store.rollouts(v.id) for v in runs}
    assert res.done == len(LABELS) and len(runs) == len(LABELS) and {v.rollouts for v in runs} == {K}
    assert sum(res.outcomes.values()) == K * len(LABELS)
    assert engine.settings.seed == 0 and engine.settings.temperature == 0.0  # the engine's settings untouched
    assert {(r.seed, r.temperature) for rs in rollouts.values() for r in rs} == {(0, 0.8), (1, 0.8), (2, 0.8)}
    assert all(r.trace_dir and r.trace_dir.endswith(f"r{r.idx:02d}") for rs in rollouts.values() for r in rs)
    assert len(rows) == len(LABELS) and all(r["rollouts"] == K for r in rows)
    for r in rows:
        mine = [x.verdict for x in rollouts[r["key"]]]
        answered = [x for x in mine if x]
        assert r["p_yes"] == pytest.approx(answered.count("YES") / len(answered))
        assert r["verdict"] == ("YES" if mine.count("YES") > mine.count("NO") else
                                "NO" if mine.count("NO") > mine.count("YES") else None)
        assert r["outcomes"] == ",".join(x.outcome for x in rollouts[r["key"]])
        assert r["format_failures"] == r["outcomes"].count("format_error")
    assert len({r["p_yes"] for r in rows}) > 1
    s = summarize(rows)
    y = [r["truth"] == "YES" for r in rows]
    assert s["brier"] == pytest.approx(brier_score_loss(y, [r["p_yes"] for r in rows]))
    assert 0 <= s["ece"] <= 1 and s["risk_coverage"][0]["coverage"] == 1.0
    assert sum(b["n"] for b in s["reliability"]) == len(rows)
    kept = [r for r in rows if not r["abstained"]]
    assert s["abstention"]["abstained"] == pytest.approx(1 - len(kept) / len(rows))
    assert s["abstention"]["accuracy_answered"] == pytest.approx(
        sum(r["verdict"] == r["truth"] for r in kept) / len(kept) if kept else 0.0)


def test_abstention_operating_point_by_hand():
    rows = [{"truth": "YES", "verdict": "YES", "abstained": False}, {"truth": "NO", "verdict": "YES", "abstained": False},
            {"truth": "YES", "verdict": "NO", "abstained": True}, {"truth": "NO", "verdict": None, "abstained": True},
            {"truth": "NO", "verdict": "NO", "abstained": False}]
    s = selective(rows)
    assert s == {"n": 5, "abstained": 0.4, "coverage": 0.6, "accuracy_answered": pytest.approx(2 / 3),
                 "accuracy": 0.4}
    none = selective([{**r, "abstained": True} for r in rows])  # nothing answered: undefined, and said why
    assert none["accuracy_answered"] == 0.0 and none["coverage"] == 0.0
    assert none["undefined"] == {"accuracy_answered": "nothing answered: the model abstained on every item"}


def test_rollouts_resume_by_item(bench_path, tmp_path, render):
    items = bench_items(BenchFile(bench_path).items())
    cancel = threading.Event()
    calls = [0]
    answers = itertools.cycle(["YES", "NO"])

    def output(conv):
        calls[0] += 1
        if calls[0] == 5:  # in the 2nd rollout of the 2nd item
            cancel.set()
        return f"<answer>\\boxed{{{next(answers)}}}</answer>"

    with VettingStore(tmp_path / "r.sqlite") as store:
        first = evaluate_items(items, store, ScriptedEngine(outputs=output), render, plan=RolloutSettings(K).plan(), cancel=cancel)
        assert first.cancelled and first.done == 1
        assert len(store.model_verdicts()) == 1  # the interrupted item left nothing half-done
        second = evaluate_items(items, store, _engine(), render, plan=RolloutSettings(K).plan())
        assert second.skipped == 1 and second.done == len(LABELS) - 1
        runs = store.model_verdicts(latest=False)
        keys = [v.spectrum_key for v in runs]
        assert len(keys) == len(set(keys)) == len(LABELS)  # no item ran twice
        assert all(len(store.rollouts(v.id)) == K for v in runs)
        # another K is another run: everything again
        third = evaluate_items(items[:2], store, _engine(), render, plan=RolloutSettings(2).plan())
        assert third.done == 2 and third.skipped == 0


def test_stores_of_the_per_rollout_layout_still_score(tmp_path):
    """Earlier versions stored each rollout as its own row under ``KEY~rK``; they fold the same way."""
    with VettingStore(tmp_path / "old.sqlite") as store:
        for key, truth, outs in (("a#0", "YES", ["YES", "YES", "NO"]), ("b#0", "NO", ["NO", "format_error", "NO"]),
                                 ("c#0", "NO", ["YES", "NO", "engine_error"])):
            store.record_decision(Decision(key, "cv", truth, vetter="benchmark"))
            for k, o in enumerate(outs):
                store.record_model_verdict(ModelVerdict(f"{key}~r{k}", "cv", o if o in ("YES", "NO") else None, o,
                                                        model_id="m", prompt_version="p", turns=k + 1))
        rows = {r["key"]: r for r in results(store, thresholds=Thresholds(min_agreement=0.6))}
    a, b, c = rows["a#0"], rows["b#0"], rows["c#0"]
    assert (a["verdict"], a["p_yes"], a["abstained"], a["turns"]) == ("YES", pytest.approx(2 / 3), False, 2)
    assert (b["verdict"], b["p_yes"], b["agreement"], b["format_failures"]) == ("NO", 0.0, 1.0, 1)
    assert (c["verdict"], c["p_yes"], c["abstained"], c["correct"]) == (None, 0.5, True, False)


SURE = {"YES": [["YES", 0.97], ["NO", 0.03]], "NO": [["NO", 0.97], ["YES", 0.03]]}
YES_OUT, NO_OUT = "<answer>\\boxed{YES}</answer>", "<answer>\\boxed{NO}</answer>"


def _auto_script(tmp_path, scripts, select, name):
    path = tmp_path / name
    path.write_text(json.dumps({"scripts": scripts, "select": select, "alternatives": SURE}), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("scripts, k_used, reason", [([[YES_OUT]], 2, "agreed"),  # clear: two sure rollouts
                                                     ([[YES_OUT], [NO_OUT]], 6, "certain")])  # 3:3 of 6 stays a tie
def test_evaluate_auto_reports_the_rollouts_used_and_resumes(bench_path, tmp_path, capsys, scripts, k_used, reason):
    out = tmp_path / "run"
    argv = ["evaluate", str(bench_path), "--scripted", _auto_script(tmp_path, scripts, "seed", "s.json"),
            "--out", str(out), "--rollouts", "auto", "--json"]
    assert cli_main(argv, render=pillow_render) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rollouts_used"] == {"mean_k_used": k_used, "k_max": 8, "cost_share": k_used / 8,
                                        "stop_reasons": {reason: len(LABELS)}}
    for s in summary["tasks"].values():
        assert s["rollouts_used"]["stop_reasons"] == {reason: s["n"]}
    items = list(csv.DictReader((out / "items.csv").open(encoding="utf-8")))
    assert {(r["rollouts"], r["k_max"], r["stop_reason"]) for r in items} == {(str(k_used), "8", reason)}
    with VettingStore(out / "run.sqlite", readonly=True) as store:
        assert all(len(store.rollouts(v.id)) == k_used for v in store.model_verdicts())
    html = (out / "report.html").read_text(encoding="utf-8")
    assert f"<b>{k_used:.2f}</b>\nper item on average of a budget of 8" in html and f"{reason} {len(LABELS)}" in html
    # the same command again: every item is done with this budget, whatever number of rollouts it used
    assert cli_main([a for a in argv if a != "--json"], render=pillow_render) == 0
    text = capsys.readouterr().out
    assert f"{k_used:.2f} of up to 8 rollouts per item ({reason} {len(LABELS)})" in text
    assert json.loads((out / "summary.json").read_text())["run"]["skipped"] == len(LABELS)


def test_evaluate_auto_follows_each_item(bench_path, tmp_path, render):
    """Scripts picked per spectrum: a clear item stops at two sure rollouts, one whose rollouts never answer runs
    as the rule asks; each item's row carries its own k_used and reason, and the summary's mean is theirs."""
    items = bench_items(BenchFile(bench_path).items())
    engine = ScriptedEngine(scripts=[[YES_OUT], ["??"]], alternatives=SURE, settings=EngineSettings(top_logprobs=4))
    with VettingStore(tmp_path / "r.sqlite") as store:
        res = evaluate_items(items, store, engine, render, plan=RolloutSettings(8, auto=True).plan())
        rows = results(store)
        stored = {v.spectrum_key: len(store.rollouts(v.id)) for v in store.model_verdicts()}
    assert res.done == len(LABELS)
    by = {(r["rollouts"], r["stop_reason"]) for r in rows}
    assert (2, "agreed") in by and len(by) == 2  # both kinds of spectrum are in the bench
    (other,) = by - {(2, "agreed")}
    assert other[0] > 2 and other[1] in ("certain", "settled", "budget")
    assert all(stored[r["key"]] == r["rollouts"] for r in rows)
    use = summarize(rows)["rollouts_used"]
    assert use["mean_k_used"] == pytest.approx(sum(r["rollouts"] for r in rows) / len(rows))
    assert sum(use["stop_reasons"].values()) == len(rows) and use["k_max"] == 8


def test_greedy_runs_report_no_rollout_use():
    rows = [{"task": "cv", "truth": "YES", "verdict": "YES", "outcome": "YES", "rollouts": 1, "k_max": 1}]
    assert "rollouts_used" not in summarize(rows)
    fixed = [{**rows[0], "rollouts": 4, "k_max": 4, "stop_reason": "fixed"}, {**rows[0], "rollouts": 4}]
    assert summarize(fixed)["rollouts_used"] == {"mean_k_used": 4, "k_max": 4, "cost_share": 1.0,
                                                 "stop_reasons": {"fixed": 1, "unknown": 1}}

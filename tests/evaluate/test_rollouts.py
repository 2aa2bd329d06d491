"""K rollouts per item: seeds and temperature recorded per rollout, folded into p_yes; calibration vs scikit-learn."""

from __future__ import annotations

import itertools
import threading

import pytest
from benchkit import LABELS
from sklearn.metrics import brier_score_loss

from speco3.engine.scripted import ScriptedEngine
from speco3.evaluate.bench import BenchFile
from speco3.evaluate.metrics import summarize
from speco3.evaluate.run import bench_items, evaluate_items, results
from speco3.vetting import VettingStore

K = 3


def _engine():
    answers = itertools.cycle(["YES", "YES", "NO", "NO", "YES", "??", "NO"])  # p_yes differs across items
    return ScriptedEngine(outputs=lambda conv: f"<answer>\\boxed{{{next(answers)}}}</answer>")


def test_rollouts_fold_into_p_yes_and_calibration(bench_path, tmp_path, render):
    items = bench_items(BenchFile(bench_path).items())
    engine = _engine()
    with VettingStore(tmp_path / "r.sqlite") as store:
        res = evaluate_items(items, store, engine, render, rollouts=K, temperature=0.8)
        rows = results(store)
        runs = store.model_verdicts()
    assert res.done == len(LABELS) and len(runs) == K * len(LABELS)
    assert engine.settings.seed == 0 and engine.settings.temperature == 0.0  # restored afterwards
    assert {(v.engine_settings["seed"], v.engine_settings["temperature"]) for v in runs} == {(0, 0.8), (1, 0.8),
                                                                                          (2, 0.8)}
    assert len(rows) == len(LABELS) and all(r["rollouts"] == K for r in rows)
    for r in rows:
        mine = [v.verdict for v in runs if v.spectrum_key.startswith(r["key"] + "~r")]
        assert r["p_yes"] == pytest.approx(mine.count("YES") / K)
        assert r["verdict"] == ("YES" if mine.count("YES") > mine.count("NO") else
                                "NO" if mine.count("NO") > mine.count("YES") else None)
    assert len({r["p_yes"] for r in rows}) > 1
    s = summarize(rows)
    y = [r["truth"] == "YES" for r in rows]
    assert s["brier"] == pytest.approx(brier_score_loss(y, [r["p_yes"] for r in rows]))
    assert 0 <= s["ece"] <= 1 and s["risk_coverage"][0]["coverage"] == 1.0
    assert sum(b["n"] for b in s["reliability"]) == len(rows)


def test_rollouts_resume_where_they_stopped(bench_path, tmp_path, render):
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
        first = evaluate_items(items, store, ScriptedEngine(outputs=output), render, rollouts=K, cancel=cancel)
        assert first.cancelled and first.done == 1
        n_first = len(store.model_verdicts())
        assert K < n_first < 2 * K
        second = evaluate_items(items, store, _engine(), render, rollouts=K)
        assert second.skipped == 1 and second.done == len(LABELS) - 1
        keys = [v.spectrum_key for v in store.model_verdicts(latest=False)]
    assert len(keys) == len(set(keys)) == K * len(LABELS)  # no rollout ran twice

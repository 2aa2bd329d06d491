"""Every metric against scikit-learn on the same per-item results."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import (
    accuracy_score,
    brier_score_loss,
    confusion_matrix,
    f1_score,
    precision_score,
    recall_score,
)

from speco3.evaluate import metrics

OUTCOMES = ["YES", "NO", "format_error", "budget_exhausted", "engine_error"]


def random_rows(seed: int, n: int = 200) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        outcome = str(rng.choice(OUTCOMES, p=[0.4, 0.4, 0.1, 0.05, 0.05]))
        rows.append({"task": str(rng.choice(["cv", "wd", "carbon"])), "truth": str(rng.choice(["YES", "NO"])),
                     "outcome": outcome, "verdict": outcome if outcome in ("YES", "NO") else None,
                     "turns": int(rng.integers(1, 9)), "zooms": int(rng.integers(0, 8)),
                     "seconds": float(rng.random()), "tokens": int(rng.integers(10, 900)),
                     "p_yes": float(rng.integers(0, 5)) / 4})
    return rows


def sk(rows):
    y = [r["truth"] for r in rows]
    p = [r["verdict"] or "NO" for r in rows]  # no answer: did not find the object
    acc_p = [r["verdict"] or "NONE" for r in rows]  # no answer: wrong
    tn, fp, fn, tp = confusion_matrix(y, p, labels=["NO", "YES"]).ravel()
    kw = dict(pos_label="YES", zero_division=0)
    return {"accuracy": accuracy_score(y, acc_p), "precision": precision_score(y, p, **kw),
            "recall": recall_score(y, p, **kw), "f1": f1_score(y, p, **kw),
            "confusion": {"tp": tp, "fp": fp, "fn": fn, "tn": tn}}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_task_metrics_match_sklearn(seed):
    rows = random_rows(seed)
    summary = metrics.summarize(rows)
    f1s = []
    for task, s in summary["tasks"].items():
        sub = [r for r in rows if r["task"] == task]
        ref = sk(sub)
        for key in ("accuracy", "precision", "recall", "f1"):
            assert s[key] == pytest.approx(ref[key], abs=1e-12), (task, key)
        assert s["confusion"] == {k: int(v) for k, v in ref["confusion"].items()}
        assert s["n"] == len(sub)
        assert s["format_failure_rate"] == pytest.approx(np.mean([r["outcome"] == "format_error" for r in sub]))
        assert s["no_answer_rate"] == pytest.approx(np.mean([r["verdict"] is None for r in sub]))
        assert s["mean_zooms"] == pytest.approx(np.mean([r["zooms"] for r in sub]))
        assert s["brier"] == pytest.approx(brier_score_loss([r["truth"] == "YES" for r in sub],
                                                            [r["p_yes"] for r in sub]))
        f1s.append(ref["f1"])
    assert summary["macro_f1"] == pytest.approx(np.mean(f1s))
    assert summary["mean_tokens"] == pytest.approx(np.mean([r["tokens"] for r in rows]))


def test_undefined_scores_are_zero_like_sklearn_and_named_with_the_reason():
    rows = [{"task": "wd", "truth": "NO", "outcome": "NO", "verdict": "NO"}] * 3
    summary = metrics.summarize(rows)
    s = summary["tasks"]["wd"]
    assert (s["precision"], s["recall"], s["f1"], s["accuracy"]) == (0.0, 0.0, 0.0, 1.0)
    assert s["undefined"] == {"precision": "no YES predictions", "recall": "no YES labels", "f1": "no YES labels"}
    assert summary["undefined"] == {"wd: precision": "no YES predictions", "wd: recall": "no YES labels",
                                    "wd: f1": "no YES labels"}
    found = [{"task": "cv", "truth": "YES", "outcome": "YES", "verdict": "YES"},
             {"task": "cv", "truth": "NO", "outcome": "NO", "verdict": "NO"}]
    assert metrics.summarize(found)["tasks"]["cv"]["undefined"] == {} and "undefined" not in metrics.summarize(found)


def test_calibration_figures():
    y = [1, 0, 1, 1, 0, 0, 1, 0]
    p = [0.9, 0.1, 0.8, 0.4, 0.6, 0.0, 1.0, 0.2]
    bins = metrics.reliability(y, p, bins=5)
    assert sum(b["n"] for b in bins) == len(y)
    # ECE by hand: bins [0,.2) {0.1,0.0} y {0,0}; [.2,.4) {0.2} y 0; [.4,.6) {0.4} y 1; [.6,.8) {0.6} y 0;
    # [.8,1] {0.9,0.8,1.0} y {1,1,1}
    expected = (2 * 0.05 + 0.2 + 0.6 + 0.6 + 3 * abs(1 - 0.9)) / 8
    assert metrics.expected_calibration_error(y, p, bins=5) == pytest.approx(expected)
    curve = metrics.risk_coverage(y, p)
    assert curve[0]["coverage"] == 1.0 and curve[0]["accuracy"] == pytest.approx(6 / 8)
    assert curve[-1]["coverage"] == pytest.approx(1 / 8) and curve[-1]["accuracy"] == 1.0

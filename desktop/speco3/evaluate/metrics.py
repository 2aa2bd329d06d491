"""Evaluation metrics as pure functions of per-item results (checked against scikit-learn in the tests).

A result row is a dict with at least ``task``, ``truth`` (YES/NO) and ``outcome`` (an `speco3.agent.Outcome`
value); ``verdict`` is YES/NO or None. The positive class is YES (the rare object). An item without a verdict
(format error, budget exhausted, engine error, …) counts as a wrong answer for accuracy and as a predicted NO for
precision/recall/F1 (it did not find the object), as the benchmark's reward does; its rate is reported beside.
Optional per row: ``turns``, ``zooms``, ``seconds``, ``tokens``, and with K rollouts ``p_yes`` (share of YES among
the answered rollouts) for the calibration figures and ``abstained`` for the operating point of the abstention
thresholds (`selective`); ``rollouts`` (that ran), ``k_max`` and ``stop_reason`` for the rollouts' use
(`rollout_use`).

Undefined metrics keep scikit-learn's ``zero_division=0`` value in the numbers (so macro averages compare with the
published ones) and are named in ``undefined`` with the reason (`undefined`): recall and F1 without any YES label,
precision without any YES prediction, the accuracy of the answered when nothing was answered. Reports show them as
"n/a" with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

POSITIVE = "YES"


def confusion(truth: Sequence[str], pred: Sequence[str | None]) -> dict[str, int]:
    """``tp``, ``fp``, ``fn``, ``tn`` with YES as positive; a missing prediction counts as NO."""
    c = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for t, p in zip(truth, pred, strict=True):
        pos_t, pos_p = t == POSITIVE, p == POSITIVE
        c["tp" if pos_t and pos_p else "fn" if pos_t else "fp" if pos_p else "tn"] += 1
    return c


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def scores(truth: Sequence[str], pred: Sequence[str | None]) -> dict[str, float]:
    """Accuracy (no answer = wrong), precision, recall and F1 of the YES class (0 where undefined)."""
    c = confusion(truth, pred)
    n = len(truth)
    correct = sum(1 for t, p in zip(truth, pred, strict=True) if p is not None and t == p)
    precision = _ratio(c["tp"], c["tp"] + c["fp"])
    recall = _ratio(c["tp"], c["tp"] + c["fn"])
    f1 = _ratio(2 * precision * recall, precision + recall)
    return {"accuracy": _ratio(correct, n), "precision": precision, "recall": recall, "f1": f1}


def undefined(c: dict[str, int]) -> dict[str, str]:
    """The scores of a confusion count that are undefined, each with the reason (see module doc)."""
    out = {}
    if c["tp"] + c["fp"] == 0:
        out["precision"] = "no YES predictions"
    if c["tp"] + c["fn"] == 0:
        out["recall"] = out["f1"] = "no YES labels"
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def task_summary(rows: Sequence[dict]) -> dict:
    """All metrics of one task's rows."""
    truth = [r["truth"] for r in rows]
    pred = [r.get("verdict") for r in rows]
    n = len(rows)
    out: dict = {"n": n, **scores(truth, pred), "confusion": confusion(truth, pred)}
    out["undefined"] = undefined(out["confusion"])
    out["format_failure_rate"] = _ratio(sum(r["outcome"] == "format_error" for r in rows), n)
    out["no_answer_rate"] = _ratio(sum(r.get("verdict") is None for r in rows), n)
    for key in ("turns", "zooms", "seconds", "tokens"):
        out[f"mean_{key}"] = _mean(r.get(key) for r in rows)
    out.update(calibration(rows, figures=False))
    out.update(rollout_use(rows))
    return out


def summarize(rows: Sequence[dict]) -> dict:
    """Per-task summaries plus the macro averages over the tasks present (``macro_f1`` …) and the overall counts."""
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r)
    tasks = {t: task_summary(by_task[t]) for t in sorted(by_task)}
    out: dict = {"n": len(rows), "tasks": tasks}
    for key in ("accuracy", "precision", "recall", "f1", "format_failure_rate", "no_answer_rate"):
        out[f"macro_{key}"] = float(np.mean([s[key] for s in tasks.values()])) if tasks else 0.0
    for key in ("mean_turns", "mean_zooms", "mean_seconds", "mean_tokens"):
        out[key] = _mean(r.get(key.removeprefix("mean_")) for r in rows)
    out.update(calibration(rows))
    out.update(rollout_use(rows))
    bad = {f"{t}: {k}": why for t, s in tasks.items() for k, why in s["undefined"].items()}
    if bad:
        out["undefined"] = bad
    return out


def rollout_use(rows: Sequence[dict]) -> dict:
    """With rollouts (K > 1 or ``--rollouts auto``): ``rollouts_used`` — ``mean_k_used`` (rollouts that ran per item),
    ``k_max`` (the largest budget), ``cost_share`` (``mean_k_used / k_max``: 1 for a fixed K) and ``stop_reasons``
    (items per `speco3.agent.adaptive` stop reason; ``fixed`` for a fixed K, ``unknown`` for rows stored before
    the reason was). Empty when every item ran one rollout of a budget of one."""
    used = [int(r.get("rollouts") or 1) for r in rows]
    budgets = [int(r.get("k_max") or k) for r, k in zip(rows, used, strict=True)]
    if not rows or max(budgets) <= 1:
        return {}
    reasons: dict[str, int] = {}
    for r in rows:
        reason = r.get("stop_reason") or "unknown"
        reasons[reason] = reasons.get(reason, 0) + 1
    mean = float(np.mean(used))
    return {"rollouts_used": {"mean_k_used": mean, "k_max": max(budgets), "cost_share": mean / max(budgets),
                              "stop_reasons": dict(sorted(reasons.items()))}}


def calibration(rows: Sequence[dict], figures: bool = True) -> dict:
    """With K > 1 rollouts: ``brier`` and ``ece`` over the items that have a ``p_yes`` (some rollout answered;
    ``calibrated_n`` of them), the ``abstention`` operating point over all items, and (``figures``) the
    ``reliability`` bins and the ``risk_coverage`` curve, on which the items without any answer are the first
    abstained on. Empty without any ``p_yes`` or rollouts (a greedy verdict has no probability)."""
    if not any((r.get("rollouts") or 1) > 1 or r.get("p_yes") is not None for r in rows):
        return {}
    out: dict = {"abstention": selective(rows)}
    scored = [r for r in rows if r.get("p_yes") is not None]
    out["calibrated_n"] = len(scored)
    if scored:
        y = [int(r["truth"] == POSITIVE) for r in scored]
        probs = [float(r["p_yes"]) for r in scored]
        out.update(brier=brier(y, probs), ece=expected_calibration_error(y, probs))
        if figures:
            out["reliability"] = reliability(y, probs)
    if figures:
        out["risk_coverage"] = risk_coverage(
            [int(r["truth"] == POSITIVE) for r in rows], [r.get("p_yes") for r in rows],
            correct=[r.get("verdict") is not None and r["verdict"] == r["truth"] for r in rows])
    return out


def selective(rows: Sequence[dict]) -> dict:
    """The operating point of the abstention thresholds: ``abstained`` share of the items the model abstained on,
    ``coverage`` = 1 - abstained, ``accuracy_answered`` = accuracy on the others (0 when none is left, and
    ``undefined`` then says so), and the ``accuracy`` over all items for comparison (an abstention counts as a wrong
    answer there)."""
    n = len(rows)
    kept = [r for r in rows if not r.get("abstained")]
    correct = sum(1 for r in kept if r.get("verdict") is not None and r["verdict"] == r["truth"])
    return {"n": n, "abstained": _ratio(n - len(kept), n), "coverage": _ratio(len(kept), n),
            **({} if kept else {"undefined": {"accuracy_answered": "nothing answered: the model abstained on "
                                              "every item"}}),
            "accuracy_answered": _ratio(correct, len(kept)),
            "accuracy": _ratio(sum(1 for r in rows if r.get("verdict") is not None and r["verdict"] == r["truth"]), n)}


# -- calibration (rows with a YES probability, e.g. the share of YES among K rollouts) -----------------------
def brier(y: Sequence[int], p: Sequence[float]) -> float:
    """Mean squared difference between the YES probability and the 0/1 truth."""
    y_arr, p_arr = np.asarray(y, float), np.asarray(p, float)
    return float(np.mean((p_arr - y_arr) ** 2)) if y_arr.size else 0.0


def reliability(y: Sequence[int], p: Sequence[float], bins: int = 10) -> list[dict]:
    """Equal-width bins of the YES probability: ``lo``, ``hi``, ``n``, mean ``confidence``, observed ``frequency``."""
    y_arr, p_arr = np.asarray(y, float), np.asarray(p, float)
    idx = np.clip(np.floor(p_arr * bins).astype(int), 0, bins - 1) if p_arr.size else np.zeros(0, int)
    out = []
    for b in range(bins):
        sel = idx == b
        n = int(sel.sum())
        out.append({"lo": b / bins, "hi": (b + 1) / bins, "n": n,
                    "confidence": float(p_arr[sel].mean()) if n else None,
                    "frequency": float(y_arr[sel].mean()) if n else None})
    return out


def expected_calibration_error(y: Sequence[int], p: Sequence[float], bins: int = 10) -> float:
    """Σ over bins of (share of items) × |observed YES frequency − mean YES probability|."""
    total = len(y)
    if not total:
        return 0.0
    return float(sum(b["n"] / total * abs(b["frequency"] - b["confidence"]) for b in reliability(y, p, bins)
                     if b["n"]))


def risk_coverage(y: Sequence[int], p: Sequence[float | None], correct: Sequence[bool] | None = None) -> list[dict]:
    """Accuracy of the majority verdict when abstaining on the least confident items first.

    Confidence is ``max(p, 1-p)`` (an item without ``p`` — no rollout answered — is the least confident); each
    point gives ``coverage`` (share answered), ``abstained`` and ``accuracy`` on the answered items. ``correct``:
    whether each item's verdict is right (default: ``p >= 0.5`` read as YES).
    """
    y_arr = np.asarray(y, int)
    p_arr = np.asarray([np.nan if v is None else v for v in p], float)
    conf = np.where(np.isnan(p_arr), -1.0, np.maximum(p_arr, 1 - p_arr))
    right = np.asarray(correct, bool) if correct is not None else ((p_arr >= 0.5).astype(int) == y_arr)
    order = np.argsort(-conf, kind="stable")
    n = len(order)
    points = []
    for k in range(n, 0, -1):
        kept = order[:k]
        points.append({"coverage": k / n, "abstained": 1 - k / n, "accuracy": float(right[kept].mean())})
    return points

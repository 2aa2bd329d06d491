"""The evaluation loop end to end with the scripted engine: per-run store, resume, cancel, bad rows."""

from __future__ import annotations

import threading

import numpy as np
from benchkit import LABELS, row, write_bench
from scripts import scripted_engine
from sklearn.metrics import f1_score

from speco3.evaluate.bench import BenchFile
from speco3.evaluate.metrics import summarize
from speco3.evaluate.run import bench_items, evaluate_items, results
from speco3.vetting import VettingStore

STABLE = ("key", "task", "truth", "verdict", "outcome", "turns", "zooms", "tokens", "render_similarity")


def _run(bench_path, store_path, render, **kw):
    items = bench_items(BenchFile(bench_path).items())
    with VettingStore(store_path) as store:
        res = evaluate_items(items, store, scripted_engine(), render, **kw)
        return res, results(store)


def test_end_to_end_scores_every_item(bench_path, tmp_path, render):
    res, rows = _run(bench_path, tmp_path / "run.sqlite", render)
    assert (res.done, res.skipped, res.cancelled) == (len(LABELS), 0, False)
    assert [(r["task"], r["truth"]) for r in sorted(rows, key=lambda r: int(r["key"].split("#")[1].split(":")[0]))] \
        == LABELS
    outcomes = {r["outcome"] for r in rows}
    assert {"YES", "NO"} <= outcomes  # the scripts vary the verdicts across items
    assert all(r["render_width"] == 792 and r["same_size_class"] for r in rows)
    assert all(-1 <= r["render_similarity"] <= 1 for r in rows)
    assert any(r["zooms"] == 1 and r["turns"] == 2 for r in rows)
    summary = summarize(rows)
    for task, s in summary["tasks"].items():
        sub = [r for r in rows if r["task"] == task]
        ref = f1_score([r["truth"] for r in sub], [r["verdict"] or "NO" for r in sub], pos_label="YES",
                       zero_division=0)
        assert s["f1"] == ref


def test_resumed_run_equals_an_uninterrupted_one(bench_path, tmp_path, render):
    _, full = _run(bench_path, tmp_path / "full.sqlite", render)
    cancel = threading.Event()

    def stop_after_five(i, total, item, verdict):
        if i == 5:
            cancel.set()

    first, partial = _run(bench_path, tmp_path / "resumed.sqlite", render, cancel=cancel, progress=stop_after_five)
    assert first.cancelled and first.done == 5 and len(partial) == 5
    second, resumed = _run(bench_path, tmp_path / "resumed.sqlite", render)
    assert (second.skipped, second.done) == (5, len(LABELS) - 5)
    assert [[r[k] for k in STABLE] for r in resumed] == [[r[k] for k in STABLE] for r in full]


def test_cancel_mid_episode_records_nothing_for_that_item(bench_path, tmp_path, render):
    from speco3.engine.scripted import ScriptedEngine
    from speco3.evaluate.run import EvalItem

    cancel = threading.Event()
    engine = ScriptedEngine(outputs=lambda conv: (cancel.set(), "<think>x</think>")[1])
    items = bench_items(BenchFile(bench_path).items())
    with VettingStore(tmp_path / "c.sqlite") as store:
        res = evaluate_items(items, store, engine, render, cancel=cancel)
        assert res.cancelled and res.done == 0 and store.model_verdicts() == []
    assert isinstance(items[0], EvalItem)


def test_malformed_rows_are_per_item_failures(tmp_path, render):
    wl = np.linspace(4000, 8000, 200)
    rows = [row("cv", "YES", "empty", [], []), row("cv", "NO", "nan", wl, np.full(200, np.nan)),
            row("cv", "NO", "short", wl, wl[:10]), row("xx", "NO", "task", wl, wl),
            row("cv", "YES", "good", wl, 1 + np.exp(-((wl - 6563) / 5) ** 2), image=b"not an image")]
    path = write_bench(tmp_path / "bad.parquet", rows)
    res, out = _run(path, tmp_path / "bad.sqlite", render)
    assert res.invalid == 1 and res.done == 4
    by_name = {r["key"].split(":", 1)[1]: r for r in out}
    for name in ("empty", "nan", "short"):
        assert by_name[name]["outcome"] == "input_error" and by_name[name]["verdict"] is None
        assert by_name[name]["detail"]
    assert by_name["good"]["outcome"] != "input_error"
    assert summarize(out)["tasks"]["cv"]["no_answer_rate"] >= 0.75

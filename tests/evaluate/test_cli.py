"""``spec-o3 evaluate`` end to end with the scripted engine: outputs, resume, vetting-store mode, compare, errors."""

from __future__ import annotations

import csv
import json
import os
import signal

import pytest
from benchkit import LABELS, SCHEMA, row, write_bench
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from speco3.cli import main as cli_main
from speco3.vetting import Decision, ModelVerdict, VettingStore
from speco3_testkit.spectra import pillow_render as _pillow_render

YES = "<think>a</think><answer>\\boxed{YES}</answer>"
NO = "<think>b</think><answer>\\boxed{NO}</answer>"
ZOOM = ('<think>z</think>\n<tool_call>\n{"name": "spectral_visualization_tool", "arguments": '
        '{"label": "Hα", "wavelength_range": [6500, 6600]}}\n</tool_call>')


def main(argv: list[str], render=_pillow_render) -> int:
    """The CLI with the small Pillow renderer, passed in as `speco3.cli.main` takes it."""
    return cli_main(argv, render=render)



def _script(tmp_path, scripts, name="script.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"scripts": scripts, "select": "image"}), encoding="utf-8")
    return str(path)


def _csv_rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_json_summary_matches_sklearn_on_the_item_csv(bench_path, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["evaluate", str(bench_path), "--scripted", _script(tmp_path, [[YES], [NO], [ZOOM, YES], ["??"]]),
            "--out", str(out), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == len(LABELS) and summary["run"]["done"] == len(LABELS)
    items = _csv_rows(out / "items.csv")
    assert len(items) == len(LABELS) and (out / "report.html").stat().st_size > 1000
    assert "published spec-o3-7b: 76.5" in (out / "report.html").read_text(encoding="utf-8")  # a benchmark run
    assert json.loads((out / "summary.json").read_text())["macro_f1"] == summary["macro_f1"]
    f1s = []
    for task, s in summary["tasks"].items():
        sub = [r for r in items if r["task"] == task]
        y = [r["truth"] for r in sub]
        p = [r["verdict"] or "NO" for r in sub]
        assert s["n"] == len(sub)
        assert s["accuracy"] == pytest.approx(accuracy_score(y, [r["verdict"] or "none" for r in sub]))
        assert s["precision"] == pytest.approx(precision_score(y, p, pos_label="YES", zero_division=0))
        assert s["recall"] == pytest.approx(recall_score(y, p, pos_label="YES", zero_division=0))
        assert s["f1"] == pytest.approx(f1_score(y, p, pos_label="YES", zero_division=0))
        f1s.append(s["f1"])
    assert summary["macro_f1"] == pytest.approx(sum(f1s) / len(f1s))
    # the same command again resumes: nothing left to run, the same figures
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["run"]["skipped"] == len(LABELS) and again["tasks"] == summary["tasks"]


def test_ctrl_c_stops_cleanly_and_the_next_run_continues(bench_path, tmp_path, capsys, monkeypatch):
    from benchkit import pillow_render

    calls = [0]

    def interrupting():
        def render(view):
            calls[0] += 1
            if calls[0] == 6:
                os.kill(os.getpid(), signal.SIGINT)
            return pillow_render(view)
        return render

    out = tmp_path / "run"
    argv = ["evaluate", str(bench_path), "--scripted", _script(tmp_path, [[YES], [NO]]), "--out", str(out), "--json"]
    assert main(argv, render=interrupting()) == 130
    first = json.loads(capsys.readouterr().out)["run"]
    assert first["cancelled"] and 1 <= first["done"] < len(LABELS)
    assert main(argv) == 0
    second = json.loads(capsys.readouterr().out)["run"]
    assert second["skipped"] == first["done"] and second["done"] == len(LABELS) - first["done"]


def test_tasks_and_limit(bench_path, tmp_path, capsys):
    argv = ["evaluate", str(bench_path), "--scripted", _script(tmp_path, [[YES]]), "--out", str(tmp_path / "o"),
            "--tasks", "cv,wd", "--limit", "2", "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {t: s["n"] for t, s in summary["tasks"].items()} == {"cv": 2, "wd": 2}


def test_vetting_store_mode_scores_model_verdicts_against_decisions(tmp_path, capsys):
    db = tmp_path / "results.sqlite"
    # (key, model verdict, human decision): UNSURE and undecided spectra are left out
    data = [("a", "YES", "YES"), ("b", "YES", "NO"), ("c", "NO", "NO"), ("d", None, "YES"), ("e", "NO", "UNSURE"),
            ("f", "YES", None), ("g", "NO", "YES")]
    with VettingStore(db) as s:
        for key, verdict, decision in data:
            s.record_model_verdict(ModelVerdict(key, "cv", verdict, verdict or "format_error", model_id="m"))
            if decision:
                s.record_decision(Decision(key, "cv", decision))
    assert main(["evaluate", str(db), "--json", "--out", str(tmp_path / "o")]) == 0
    cv = json.loads(capsys.readouterr().out)["tasks"]["cv"]
    y = ["YES", "NO", "NO", "YES", "YES"]
    p = ["YES", "YES", "NO", "NO", "NO"]
    assert cv["n"] == 5 and cv["no_answer_rate"] == pytest.approx(0.2)
    assert cv["accuracy"] == pytest.approx(2 / 5)
    assert cv["f1"] == pytest.approx(f1_score(y, p, pos_label="YES"))
    assert cv["confusion"] == {"tp": 1, "fp": 1, "fn": 2, "tn": 1}
    # your own labels are not SpecVI-Bench: the report sets no published figure beside them, and says how an item
    # without a verdict counts
    html = (tmp_path / "o" / "report.html").read_text(encoding="utf-8")
    assert "your decisions" in html and "published" not in html
    assert "counts as wrong in the accuracy" in html
    # what was left out is said: the UNSURE decision, the spectrum nobody decided
    assert json.loads((tmp_path / "o" / "summary.json").read_text(encoding="utf-8"))["left_out"] == {
        "UNSURE_decisions": 1, "model_verdicts_without_a_decision": 1}
    assert "Left out: 1 UNSURE decisions, 1 model verdicts without a decision." in html
    # a task without a YES label: F1 is n/a with the reason, on stdout and in the report
    with VettingStore(db) as s:
        s.record_model_verdict(ModelVerdict("h", "wd", "NO", "NO", model_id="m"))
        s.record_decision(Decision("h", "wd", "NO"))
    assert main(["evaluate", str(db), "--out", str(tmp_path / "o2")]) == 0
    out = capsys.readouterr().out
    assert "wd F1 n/a (no YES labels) (n=1)" in out and "left out: 1 UNSURE decisions" in out
    assert "n/a (no YES labels)" in (tmp_path / "o2" / "report.html").read_text(encoding="utf-8")


def test_compare_reports_agreement_against_the_first_build(bench_path, tmp_path, capsys):
    a = _script(tmp_path, [[YES], [NO]], "a-F16.json")
    b = _script(tmp_path, [[YES], [YES]], "b-Q4_K_M.json")
    out = tmp_path / "cmp"
    assert main(["evaluate", str(bench_path), "--compare", b, a, "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["compare"]
    assert report["reference"] == a  # F16 is more precise than Q4_K_M, whatever the order given
    entry = report["builds"][b]
    assert entry["items"] == len(LABELS)
    with VettingStore(out / "a-F16" / "run.sqlite", readonly=True) as sa, \
            VettingStore(out / "b-Q4_K_M" / "run.sqlite", readonly=True) as sb:
        va = {v.spectrum_key: v.outcome for v in sa.model_verdicts()}
        vb = {v.spectrum_key: v.outcome for v in sb.model_verdicts()}
    agree = sum(va[k] == vb[k] for k in va) / len(va)
    assert entry["verdict_agreement"] == pytest.approx(agree) and agree < 1
    assert len(entry["changed"]) == sum(va[k] != vb[k] for k in va)
    assert set(entry["f1_delta"]) == {t for t, _ in LABELS}
    assert "first_turn" not in entry  # the scripted engine has no logits
    # summary.json holds the comparison as --json prints it; the report shows it as a table, not raw JSON
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["compare"] == report
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<h2>Builds compared</h2>" in html and "<pre>" not in html
    assert f"<td class=\"l\">{a} (reference)</td>" in html and f"<td class=\"l\">{b}</td>" in html
    assert f"{100 * entry['verdict_agreement']:.0f}% of {entry['items']}" in html


def test_bad_inputs_give_clear_errors(tmp_path, capsys):
    import pyarrow as pa

    r = row("cv", "YES", "a", [1.0, 2.0], [3.0, 4.0])
    r.pop("data_source")
    path = write_bench(tmp_path / "b.parquet", [r], pa.schema([f for f in SCHEMA if f.name != "data_source"]))
    assert main(["evaluate", str(path), "--scripted", _script(tmp_path, [[YES]])]) == 1
    assert "missing column 'data_source'" in capsys.readouterr().err
    assert main(["evaluate", str(path), "--rollouts", "0"]) == 1
    assert "--rollouts must be at least 1" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "x.txt")]) == 1
    assert ".parquet" in capsys.readouterr().err
    empty = tmp_path / "empty.sqlite"
    VettingStore(empty).close()
    assert main(["evaluate", str(empty)]) == 1
    assert "no spectrum has both" in capsys.readouterr().err


@pytest.mark.llama
def test_evaluate_against_a_model_server(bench_path, tiny_llama_server, tmp_path, capsys):
    """`evaluate --server URL` runs the bench items on a real llama-server (tiny model): every item is scored."""
    out = tmp_path / "run"
    rc = main(["evaluate", str(bench_path), "--server", tiny_llama_server, "--max-tokens-per-turn", "16",
               "--max-turns", "2", "--json", "--out", str(out)])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["run"]["done"] == summary["n"] > 0 and summary["model_id"].endswith(".gguf")
    traces = list((out / "traces").rglob("trace.json"))
    assert len(traces) == summary["n"]
    assert all(json.loads(t.read_text(encoding="utf-8"))["model"]["server"] == tiny_llama_server for t in traces)

"""``inspect --rollouts K --json``, ``vet --rollouts K`` and ``spec-o3 queue`` with scripted rollouts."""

from __future__ import annotations

import json
import logging

import pytest
from vetting_helpers import NO, YES, ZOOM

from speco3.agent import Trace
from speco3.cli import main as cli_main
from speco3.vetting import VettingStore
from speco3_testkit.spectra import pillow_render as _pillow_render
from speco3_testkit.spectra import write_csv_spectrum

ZOOM2 = ZOOM.replace("[6500, 6600]", "[4600, 4750]").replace("Hα <b>", "He II")
ALTS = {"YES": [["YES", 0.9], ["NO", 0.1]], "NO": [["NO", 0.6], ["YES", 0.4]]}


def main(argv: list[str], render=_pillow_render) -> int:
    """The CLI with the small Pillow renderer, passed in as `speco3.cli.main` takes it."""
    return cli_main(argv, render=render)




def _script(tmp_path, scripts, **extra):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"scripts": scripts, "select": "seed", **extra}), encoding="utf-8")
    return path


def test_inspect_rollouts_json(tmp_path, capsys):
    f = write_csv_spectrum(tmp_path / "a")
    script = _script(tmp_path, [[ZOOM, YES], ["<think>hm</think> not sure"], [ZOOM2, ZOOM, YES], [NO]],
                     alternatives=ALTS)
    out = tmp_path / "trace"
    rc = main(["inspect", str(f), "--task", "cv", "--scripted", str(script), "--out", str(out), "--rollouts", "4",
               "--temperature", "0.8", "--seed", "0", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert rc == 0
    assert report["outcomes"] == ["YES", "format_error", "YES", "NO"] and report["k"] == 4
    assert report["p_yes"] == pytest.approx(2 / 3) and report["agreement"] == pytest.approx(2 / 3)
    assert report["p_yes_token"] == pytest.approx((0.9 + 0.9 + 0.4) / 3)  # alternatives recorded by default, K>1
    assert report["format_failures"] == 1 and report["abstained"] is True and report["verdict"] == "YES"
    assert report["abstain_reason"] == "split evidence, 2 YES / 1 NO, 1 of 4 without an answer"
    details = report["rollout_details"]
    assert [d["seed"] for d in details] == [0, 1, 2, 3] and {d["temperature"] for d in details} == {0.8}
    assert details[2]["windows"] == [[4600, 4750, "He II"], [6500, 6600, "Hα <b>"]]
    assert "rollout 2/4 (seed 1, T=0.8): format_error" in captured.err  # progress on stderr, JSON alone on stdout
    for i, d in enumerate(details):  # every rollout's trace with its images
        assert d["trace_dir"] == str(out / f"r{i:02d}")
        assert Trace.load(d["trace_dir"]).outcome.value == d["outcome"]
    assert (out / "r02" / "02-zoom-6500-6600.png").is_file()
    assert json.loads((out / "confidence.json").read_text())["p_yes"] == report["p_yes"]


def test_inspect_rollouts_text_and_thresholds(tmp_path, capsys):
    f = write_csv_spectrum(tmp_path / "a")
    script = _script(tmp_path, [[YES], [YES], [NO]])
    rc = main(["inspect", str(f), "--task", "cv", "--scripted", str(script), "--out", str(tmp_path / "t"),
               "--rollouts", "3", "--min-agreement", "0.6"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "Variable (CV)) — p_yes 0.67 (2 YES / 1 NO of 3), agreement 0.67" in text and "ABSTAINED" not in text
    assert main(["inspect", str(f), "--task", "cv", "--scripted", str(script), "--out", str(tmp_path / "t2"),
                 "--rollouts", "2", "--seed", "1"]) == 3  # seeds 1, 2: 1 YES / 1 NO: no verdict
    assert "Verdict: none" in capsys.readouterr().out


def test_inspect_greedy_json_is_the_single_run(tmp_path, capsys):
    f = write_csv_spectrum(tmp_path / "a")
    script = tmp_path / "s.json"
    script.write_text(json.dumps([ZOOM, NO]), encoding="utf-8")
    out = tmp_path / "t"
    assert main(["inspect", str(f), "--task", "cv", "--scripted", str(script), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["k"], report["p_yes"], report["abstained"], report["p_yes_token"]) == (1, 0.0, False, None)
    assert report["rollout_details"][0]["temperature"] == 0.0 and (out / "trace.json").is_file()


@pytest.mark.parametrize("argv, message", [
    (["--rollouts", "0"], "--rollouts must be at least 1"),
    (["--rollouts", "3", "--temperature", "0"], "give a temperature above 0"),
    (["--min-agreement", "2"], "--min-agreement must be a number from 0 to 1"),
])
def test_inspect_rollout_option_errors(tmp_path, capsys, argv, message):
    f = write_csv_spectrum(tmp_path / "a")
    script = _script(tmp_path, [[YES]])
    assert main(["inspect", str(f), "--task", "cv", "--scripted", str(script), *argv]) == 1
    assert message in capsys.readouterr().err


def test_vet_rollouts_then_queue(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO, logger="speco3.vetting")
    arch = tmp_path / "arch"
    for i in range(3):
        write_csv_spectrum(arch, i)
    db = tmp_path / "r.sqlite"
    # seeds 0,1,2 -> YES, YES, NO: every spectrum gets p_yes 2/3 with K=3; a greedy run of s00 afterwards
    script = _script(tmp_path, [[YES], [YES], [NO]])
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(script),
                 "--rollouts", "3", "--limit", "2"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["rollouts"] == 3 and summary["done"] == 2
    assert summary["abstained"] == 2  # 2 YES / 1 NO: agreement 0.67 < 0.75 for both spectra
    assert err.count(": abstained: split evidence, 2 YES / 1 NO") == 2, err
    logged = [r.getMessage() for r in caplog.records if r.name == "speco3.vetting.rollout_runs"]
    assert len(logged) == 2 and all("YES from 3 rollouts (outcomes YES, YES, NO): p_yes 0.67, agreement 0.67 — "
                                    "abstained: split evidence, 2 YES / 1 NO" in m for m in logged), logged
    unanimous = _script(tmp_path, [[NO]])
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(unanimous)]) == 0
    capsys.readouterr()
    with VettingStore(db, readonly=True) as s:
        runs = s.model_verdicts("cv")
        assert sorted(v.rollouts for v in runs) == [1, 1, 1]  # the greedy run is newer for all three
        k3 = [v for v in s.model_verdicts("cv", latest=False) if v.rollouts == 3]
        assert len(k3) == 2 and all(len(s.rollouts(v.id)) == 3 for v in k3)

    db2 = tmp_path / "q.sqlite"
    mixed = _script(tmp_path, [[YES], [NO], [YES], [YES]])
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db2), "--scripted", str(mixed),
                 "--rollouts", "4", "--limit", "1"]) == 0  # seeds 0..3: 3 YES / 1 NO
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db2), "--scripted", str(mixed),
                 "--rollouts", "2", "--seed", "1"]) == 0  # seeds 1, 2: 1 NO / 1 YES (s00 again, K differs)
    capsys.readouterr()
    assert main(["queue", str(db2), "--order", "p_yes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["p_yes"] for r in rows] == [0.5, 0.5, 0.5]  # K=2 runs are the latest for all three
    assert all(r["abstained"] for r in rows)
    assert all(r["uncertainty"] == 1.0 and r["abstain_reason"] == "a tie, 1 YES / 1 NO" for r in rows), rows
    assert all(r["model_outcome"] == "tie" and r["k_max"] == 2 and r["stop_reason"] == "fixed" for r in rows), rows
    assert main(["queue", str(db2), "--abstained", "--order", "uncertainty"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["p_yes", "K", "agree"] and len(lines) == 4 and "tie: 1 YES / 1 NO" in lines[1]



def test_queue_columns_stay_aligned_when_the_model_gave_no_answer(tmp_path, capsys):
    arch = tmp_path / "arch"
    for i in range(2):
        write_csv_spectrum(arch, i)
    db = tmp_path / "a.sqlite"
    silent = _script(tmp_path, [["<think>The spectrum is hard to read.</think> I cannot tell."]])
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(silent), "--limit", "1"]) == 0
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(_script(tmp_path, [[YES]]))]) == 0
    capsys.readouterr()
    assert main(["queue", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and any("no_answer" in line or "format" in line for line in lines[1:])
    starts = {line.index("spectrum") if i == 0 else line.index(str(arch)) for i, line in enumerate(lines)}
    assert len(starts) == 1, lines  # the spectrum column starts at the same place on every row

@pytest.mark.llama
def test_inspect_rollouts_on_the_tiny_model(tiny_gguf, tmp_path, capsys):
    """``inspect --rollouts 2 --json`` through llama.cpp (the tiny random model's words are noise; the path is real):
    two seeded rollouts at temperature 1, each with its own trace; the fold is consistent with their outcomes."""
    text, mmproj = tiny_gguf("Q8_0")
    f = write_csv_spectrum(tmp_path / "a")
    out = tmp_path / "t"
    rc = main(["inspect", str(f), "--task", "cv", "--text", str(text), "--mmproj", str(mmproj), "--out", str(out),
               "--rollouts", "2", "--seed", "7", "--json", "--n-ctx", "4096", "--threads", "2", "--n-gpu-layers", "0",
               "--image-max-tokens", "120", "--max-turns", "2"])
    report = json.loads(capsys.readouterr().out)
    assert rc in (0, 3) and report["k"] == 2 and len(report["outcomes"]) == 2
    assert set(report["outcomes"]) <= {"YES", "NO", "format_error", "budget_exhausted"}, report["outcomes"]
    assert [(d["seed"], d["temperature"]) for d in report["rollout_details"]] == [(7, 1.0), (8, 1.0)]
    answered = [o for o in report["outcomes"] if o in ("YES", "NO")]
    assert report["p_yes"] == (answered.count("YES") / len(answered) if answered else None)
    assert report["abstained"] == (not answered or report["agreement"] < 0.75)
    for i, d in enumerate(report["rollout_details"]):
        t = Trace.load(out / f"r{i:02d}")
        assert t.outcome.value == d["outcome"] and t.settings["sampling"]["seed"] == d["seed"]


@pytest.mark.llama
def test_vet_rerun_with_everything_done_does_not_load_the_model(tiny_gguf, tmp_path, capsys, monkeypatch):
    """A finished job submitted again (a SLURM array index, a second `vet`) skips every spectrum by the same rule as
    the batch, without loading the model; a new spectrum in the archive needs the model again."""
    from speco3.engine.llama import LlamaMtmdEngine

    text, mmproj = tiny_gguf("Q8_0")
    arch = tmp_path / "arch"
    for i in range(2):
        write_csv_spectrum(arch, i)
    argv = ["vet", str(arch), "--task", "cv", "--out", str(tmp_path / "r.sqlite"), "--text", str(text), "--mmproj",
            str(mmproj), "--n-ctx", "4096", "--threads", "2", "--n-gpu-layers", "0", "--image-max-tokens", "120",
            "--max-turns", "1"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["done"] == 2
    with VettingStore(tmp_path / "r.sqlite", readonly=True) as store:  # what ran, with every verdict and trace
        for v in store.model_verdicts("cv"):
            ran = v.engine_settings["ran"]
            assert (ran["backend"], ran["n_threads"], ran["n_threads_batch"], ran["n_gpu_layers"]) == ("CPU", 2, 2, 0)
            assert ran["n_ctx"] >= 4096 and Trace.load(v.trace_dir).settings["ran"] == ran
    loads = []
    real_load = LlamaMtmdEngine.load
    monkeypatch.setattr(LlamaMtmdEngine, "load", lambda self: (loads.append(1), real_load(self))[1])
    assert main(argv) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["total"], summary["skipped"], summary["done"]) == (2, 2, 0) and loads == []
    assert "all 2 spectra were screened before" in err and "the model was not loaded" in err
    write_csv_spectrum(arch, 2)
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["skipped"], summary["done"]) == (2, 1) and loads  # loaded (load() is idempotent: maybe called twice)

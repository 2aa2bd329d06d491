"""``spec-o3 evaluate`` on the tiny real model through llama.cpp (its words are noise; the whole path is real)."""

from __future__ import annotations

import json

import pytest
from benchkit import LABELS

import speco3.cli.agent as cli_agent
from speco3.cli import main

pytestmark = pytest.mark.llama

SMALL = ["--n-ctx", "8192", "--threads", "2", "--n-gpu-layers", "0", "--image-max-tokens", "120",
         "--max-tokens-per-turn", "48"]
CLEAN = {"YES", "NO", "format_error", "budget_exhausted"}


@pytest.fixture(autouse=True)
def _pillow(monkeypatch):
    from benchkit import pillow_render

    monkeypatch.setattr(cli_agent, "RENDER_FACTORY", lambda: pillow_render)


def test_evaluate_runs_the_tiny_model_end_to_end(bench_path, tiny_builds, tmp_path, capsys):
    text, mmproj = tiny_builds["Q8_0"]
    out = tmp_path / "run"
    argv = ["evaluate", str(bench_path), "--text", text, "--mmproj", mmproj, "--tasks", "cv,wd", "--limit", "1",
            "--out", str(out), "--json", *SMALL]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 2 and set(summary["tasks"]) == {"cv", "wd"}
    assert summary["model_id"] == "tiny-Q8_0" and summary["run"]["done"] == 2
    assert set(summary["run"]["outcomes"]) <= CLEAN, summary["run"]["outcomes"]
    assert summary["mean_tokens"] > 0 and summary["mean_turns"] >= 1
    assert 0 <= summary["macro_f1"] <= 1


def test_compare_builds_with_the_first_turn_check(bench_path, tiny_builds, tmp_path, capsys):
    builds = [",".join(tiny_builds["Q8_0"]), ",".join(tiny_builds["F16"])]
    argv = ["evaluate", str(bench_path), "--compare", *builds, "--tasks", "cv", "--limit", "1", "--probe-items", "1",
            "--probe-positions", "6", "--out", str(tmp_path / "cmp"), "--json", *SMALL]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)["compare"]
    assert report["reference"] == builds[1]  # F16 before Q8_0
    entry = report["builds"][builds[0]]
    ft = entry["first_turn"]
    assert 1 <= ft["positions"] <= 6 and 0 <= ft["top1_agreement"] <= 1 and ft["mean_kl"] >= 0
    assert entry["items"] == 1 and entry["verdict_agreement"] in (0.0, 1.0)
    assert sum(t == "cv" for t, _ in LABELS) >= 1


def test_first_turn_divergence_is_zero_against_itself_and_positive_across_builds(tiny_builds, real_spectra):
    from benchkit import pillow_render

    from speco3.agent import get_task
    from speco3.engine.base import EngineSettings
    from speco3.engine.llama import LlamaMtmdEngine
    from speco3.evaluate.compare import divergence, probe_first_turn

    settings = EngineSettings(n_ctx=4096, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False, image_max_tokens=120,
                              flash_attn=False, kv_type="f32")
    task = get_task("cv")
    probes = {}
    for quant in ("F16", "Q8_0"):
        engine = LlamaMtmdEngine(*tiny_builds[quant], settings, warmup=False)
        engine.load()
        try:
            ref = probes.get("F16")
            probes[quant] = probe_first_turn(engine, "k", real_spectra[0], task, pillow_render, 8, forced=ref)
            if quant == "F16":
                again = probe_first_turn(engine, "k", real_spectra[0], task, pillow_render, 8, forced=probes[quant])
        finally:
            engine.close()
    same = divergence([probes["F16"]], [again])
    assert same["positions"] == len(probes["F16"].tokens) and same["mean_kl"] == pytest.approx(0, abs=1e-6)
    assert same["top1_agreement"] == 1.0
    across = divergence([probes["F16"]], [probes["Q8_0"]])
    assert probes["Q8_0"].tokens == probes["F16"].tokens  # teacher-forced on the reference's tokens
    assert across["positions"] == same["positions"] and across["mean_kl"] > 0


def test_rollouts_on_the_tiny_model(bench_path, tiny_builds, tmp_path, capsys):
    from speco3.vetting import VettingStore

    text, mmproj = tiny_builds["Q8_0"]
    out = tmp_path / "run"
    argv = ["evaluate", str(bench_path), "--text", text, "--mmproj", mmproj, "--tasks", "cv", "--limit", "2",
            "--rollouts", "2", "--temperature", "0.9", "--out", str(out), "--json", *SMALL]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 2 and 0 <= summary["brier"] <= 1 and 0 <= summary["ece"] <= 1
    with VettingStore(out / "run.sqlite", readonly=True) as store:
        runs = store.model_verdicts()
    assert sorted((v.engine_settings["seed"], v.engine_settings["temperature"]) for v in runs) == \
        [(0, 0.9), (0, 0.9), (1, 0.9), (1, 0.9)]
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("<img") == 4  # F1, render similarity, reliability diagram, risk-coverage curve

"""``spec-o3 evaluate`` on the tiny real model through llama.cpp (its words are noise; the whole path is real)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchkit import LABELS

from speco3.cli import main as cli_main
from speco3_testkit.spectra import pillow_render as _pillow_render

pytestmark = pytest.mark.llama

SMALL = ["--n-ctx", "8192", "--threads", "2", "--n-gpu-layers", "0", "--image-max-tokens", "120",
         "--max-tokens-per-turn", "48"]
CLEAN = {"YES", "NO", "format_error", "budget_exhausted"}


def main(argv: list[str], render=_pillow_render) -> int:
    """The CLI with the small Pillow renderer, passed in as `speco3.cli.main` takes it."""
    return cli_main(argv, render=render)


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


def test_evaluate_rollouts_on_the_tiny_model(bench_path, tiny_builds, tmp_path, capsys):
    """K=2 sampled rollouts through llama.cpp on two items: each rollout stored with its seed, the fold in the
    JSON, the CSV and the report; Brier checked against scikit-learn on the per-item CSV when every item answered."""
    import csv

    from sklearn.metrics import brier_score_loss

    from speco3.vetting import VettingStore

    text, mmproj = tiny_builds["Q8_0"]
    out = tmp_path / "run"
    argv = ["evaluate", str(bench_path), "--text", text, "--mmproj", mmproj, "--tasks", "cv", "--limit", "2",
            "--rollouts", "2", "--temperature", "1.0", "--out", str(out), "--json", *SMALL]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 2 and summary["run"]["done"] == 2
    assert sum(summary["run"]["outcomes"].values()) == 4 and set(summary["run"]["outcomes"]) <= CLEAN
    assert 0 <= summary["abstention"]["abstained"] <= 1
    with VettingStore(out / "run.sqlite", readonly=True) as store:
        runs = store.model_verdicts()
        assert len(runs) == 2 and {v.rollouts for v in runs} == {2}
        for v in runs:
            rs = store.rollouts(v.id)
            assert [(r.seed, r.temperature) for r in rs] == [(0, 1.0), (1, 1.0)]
            assert all(Path(r.trace_dir, "trace.json").is_file() for r in rs)
            assert v.outcomes == [r.outcome for r in rs]
    with open(out / "items.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["rollouts"] for r in rows] == ["2", "2"] and all(r["outcomes"].count(",") == 1 for r in rows)
    if all(r["p_yes"] for r in rows):
        assert summary["brier"] == pytest.approx(brier_score_loss([r["truth"] == "YES" for r in rows],
                                                                  [float(r["p_yes"]) for r in rows]))
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Confidence (K rollouts per item)" in html and "risk coverage" in html  # the curve, answers or not
    assert ("reliability" in html) == any(r["p_yes"] for r in rows)


def test_compare_base_with_base_plus_lora(bench_path, tiny_builds, tmp_path, capsys):
    """``--compare BASE BASE+ADAPTER.gguf``: the base is the reference, the adapted build is run and probed apart."""
    from speco3_base.fileio import sha256_file
    from speco3_converters.lora import convert_lora
    from speco3_testkit.tinylora import make_random_lora

    text, mmproj = tiny_builds["F16"]
    adapter = convert_lora(make_random_lora(tmp_path / "peft"), text, tmp_path / "cv-lora.gguf",
                           base_sha256=sha256_file(text)).path
    base = f"{text},{mmproj}"
    builds = [base, f"{base}+{adapter}", f"{base}+{adapter}:0"]
    argv = ["evaluate", str(bench_path), "--compare", *builds, "--tasks", "cv", "--limit", "1", "--probe-items", "1",
            "--probe-positions", "6", "--out", str(tmp_path / "cmp"), "--json", *SMALL]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)["compare"]
    assert report["reference"] == base
    adapted, off = report["builds"][builds[1]], report["builds"][builds[2]]
    assert adapted["model_id"] == "tiny-F16+lora:cv-lora" and off["model_id"] == "tiny-F16+lora:cv-lorax0"
    assert adapted["first_turn"]["mean_kl"] > 1e-3, "a random adapter changes the next-token distributions"
    assert off["first_turn"]["mean_kl"] == pytest.approx(0, abs=1e-6) and off["first_turn"]["top1_agreement"] == 1.0
    assert {p.name for p in (tmp_path / "cmp").iterdir() if p.is_dir()} == {"tiny-F16", "tiny-F16+lora-cv-lora",
                                                                            "tiny-F16+lora-cv-lora_0"}

"""``spec-o3 evaluate`` and the task files' ``lora`` field: one engine runs a whole evaluation, so its tasks share
their adapter (recorded with every verdict) or the run is refused naming them; ``--lora none`` runs the base."""

from __future__ import annotations

import json

from speco3.agent.tasks import builtin_tasks, task_to_dict, user_task_dir
from speco3.cli import main
from speco3.vetting import VettingStore
from speco3_testkit.spectra import pillow_render

YES = "<think>a</think><answer>\\boxed{YES}</answer>"


def _script(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"scripts": [[YES]], "select": "image"}), encoding="utf-8")
    return str(path)


def test_evaluate_runs_the_tasks_adapter_and_refuses_tasks_with_different_ones(bench_path, tmp_path, capsys):
    folder = user_task_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cv-lora.gguf").write_bytes(b"GGUF")
    cv = dict(task_to_dict(builtin_tasks()["cv"]), lora="cv-lora.gguf:0.5")
    (folder / "cv.json").write_text(json.dumps(cv), encoding="utf-8")
    base = ["evaluate", str(bench_path), "--scripted", _script(tmp_path), "--json"]
    assert main([*base, "--tasks", "cv,wd", "--out", str(tmp_path / "a")], render=pillow_render) == 1
    err = capsys.readouterr().err
    assert "different LoRA adapters: cv (cv-lora.gguf), wd (no adapter)" in err and "--tasks" in err
    assert main([*base, "--tasks", "cv", "--out", str(tmp_path / "b")], render=pillow_render) == 0
    capsys.readouterr()
    with VettingStore(tmp_path / "b" / "run.sqlite", readonly=True) as store:
        verdicts = store.model_verdicts("cv")
    assert verdicts and all(v.engine_settings["lora"] == [{"path": str(folder / "cv-lora.gguf"), "scale": 0.5}]
                            for v in verdicts)
    assert main([*base, "--tasks", "cv,wd", "--lora", "none", "--out", str(tmp_path / "c")],
                render=pillow_render) == 0
    capsys.readouterr()
    with VettingStore(tmp_path / "c" / "run.sqlite", readonly=True) as store:
        assert all(v.engine_settings["lora"] == [] for v in store.model_verdicts())

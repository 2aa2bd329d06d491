"""``spec-o3 tasks list|validate|new``, the trained phrasing of new tasks, and the task file's ``lora`` field: its
path resolved against the file's folder, bad values naming the field, ``inspect`` running the task's adapter on the
tiny model it was made for and refusing it on another base (``--lora none``: the base)."""

from __future__ import annotations

import json

import pytest

from speco3.agent.tasks import (
    DEFAULT_OUTPUT_FORMAT,
    builtin_tasks,
    load_task_file,
    load_tasks,
    new_task_dict,
    question_for,
    save_task_file,
    user_task_dir,
)
from speco3.cli import build_parser, main
from speco3.cli.options import engine_settings
from speco3.engine.base import LoraAdapter
from speco3.errors import Speco3Error, TaskError
from speco3_base.fileio import sha256_file
from speco3_converters.lora import convert_lora
from speco3_testkit.spectra import pillow_render, write_csv_archive
from speco3_testkit.tinylora import make_random_lora

GOOD = {"id": "be", "target_class": "Be Star", "question": question_for("Be Star"),
        "primary_indicators": ["Hα emission"], "lines": [{"name": "Hα", "wavelength": 6564.61, "kind": "emission"}]}


def _write(folder, name, data):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_the_trained_question_is_the_one_every_builtin_task_asks():
    tasks = builtin_tasks()
    assert len(tasks) == 5
    for t in tasks.values():
        assert question_for(t.target_class) == t.question, t.id
        assert t.output_format == DEFAULT_OUTPUT_FORMAT


def test_new_task_dict_and_save_refuse_an_overwrite(tmp_path):
    cv = builtin_tasks()["cv"]
    data = new_task_dict("be", " Be Star ", cv)
    assert data["question"] == "Analyze the provided spectrum to determine if it is a **Be Star**."
    assert data["primary_indicators"] == [] and data["lines"][0]["name"] == cv.lines[0].name
    path, task = save_task_file(data, tmp_path)
    assert path == tmp_path / "be.json" and load_task_file(path) == task
    before = path.read_text(encoding="utf-8")
    with pytest.raises(TaskError, match="exists .*--force"):
        save_task_file(dict(data, target_class="Other"), tmp_path)
    assert path.read_text(encoding="utf-8") == before
    save_task_file(dict(data, target_class="Other"), tmp_path, force=True)
    assert load_task_file(path).target_class == "Other"
    with pytest.raises(TaskError, match="field 'lines\\[0\\].wavelength'"):
        save_task_file(dict(data, id="bad", lines=[{"name": "x", "wavelength": "6563"}]), tmp_path)
    assert not (tmp_path / "bad.json").exists()


def test_lora_field_is_relative_to_the_task_file_and_bad_values_name_it(tmp_path):
    (tmp_path / "adapters").mkdir()
    (tmp_path / "adapters" / "be.gguf").write_bytes(b"GGUF")
    t = load_task_file(_write(tmp_path, "be.json", dict(GOOD, lora="adapters/be.gguf:0.5")))
    assert t.lora == LoraAdapter(str(tmp_path / "adapters" / "be.gguf"), 0.5)
    assert load_task_file(_write(tmp_path, "b2.json", dict(GOOD, id="b2", lora="adapters/be.gguf"))).lora.scale == 1
    for value, message in ((3, "field 'lora' must be a non-empty string"), ("nowhere.gguf", "field 'lora': no adapter"),
                           ("be.txt", "field 'lora' must name a LoRA adapter .gguf"),
                           ("adapters/be.gguf:nan", "field 'lora' must be FILE or FILE:SCALE")):
        with pytest.raises(TaskError, match=message):
            load_task_file(_write(tmp_path, "bad.json", dict(GOOD, id="bad", lora=value)))


def test_tasks_list_shows_sources_adapters_and_bad_files(capsys):
    folder = user_task_dir()
    (folder / "a.gguf").parent.mkdir(parents=True, exist_ok=True)
    (folder / "a.gguf").write_bytes(b"GGUF")
    _write(folder, "be.json", dict(GOOD, lora="a.gguf"))
    _write(folder, "broken.json", dict(GOOD, id="broken", primary_indicators="x"))
    assert main(["tasks", "list"]) == 0
    out, err = capsys.readouterr()
    assert "be           Be Star" in out and f"user {folder / 'be.json'}  adapter {folder / 'a.gguf'}" in out
    assert "cv           Cataclysmic Variable (CV)         14 lines  builtin" in out
    assert "BAD" in out and "field 'primary_indicators'" in out and "1 user task file(s) could not be read" in err
    assert main(["tasks", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in data["tasks"]}
    assert rows["be"]["source"] == "user" and rows["be"]["adapter"] == str(folder / "a.gguf")
    assert rows["cv"]["source"] == "builtin" and rows["cv"]["lines"] == 14 and len(data["errors"]) == 1


def test_tasks_validate_says_ok_or_names_the_field(tmp_path, capsys):
    good = _write(tmp_path, "be.json", GOOD)
    bad = _write(tmp_path, "bad.json", dict(GOOD, id="bad", lines=[{"name": "Hα", "wavelength": 6563, "kind": "x"}]))
    not_adapter = _write(tmp_path, "fake.gguf", "not a gguf")
    fake = _write(tmp_path, "fake.json", dict(GOOD, id="fake", lora=not_adapter.name))
    assert main(["tasks", "validate", str(good)]) == 0
    assert f"OK   {good}: task be (Be Star), 1 lines" in capsys.readouterr().out
    assert main(["tasks", "validate", str(good), str(bad), str(fake), str(tmp_path / "none.json")]) == 1
    out, err = capsys.readouterr()
    assert f"BAD  {bad}: field 'lines[0].kind' must be one of" in out
    assert f"BAD  {fake}: field 'lora':" in out and "cannot read" in out and "3 of 4 task file(s) are bad" in err


def test_tasks_new_writes_the_trained_phrasing_refuses_to_overwrite_and_copies_lines(tmp_path, capsys):
    assert main(["tasks", "new", "be", "--class", "Be Star"]) == 0
    path = user_task_dir() / "be.json"
    out = capsys.readouterr().out
    assert out.splitlines()[0] == str(path) and "fill primary_indicators" in out
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["question"] == question_for("Be Star") and data["lines"] == []
    assert load_tasks()["be"].target_class == "Be Star"
    assert main(["tasks", "new", "be", "--class", "Other"]) == 1
    assert "exists" in capsys.readouterr().err and json.loads(path.read_text(encoding="utf-8")) == data
    assert main(["tasks", "new", "be", "--class", "Other", "--from", "wd", "--force"]) == 0
    assert load_tasks()["be"].lines == builtin_tasks()["wd"].lines
    assert main(["tasks", "new", "x", "--class", "X", "--dir", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "x.json").is_file()
    assert main(["tasks", "new", "Bad Id", "--class", "X"]) == 1
    assert "field 'id'" in capsys.readouterr().err
    assert main(["tasks", "new", "y", "--class", "X", "--from", "nope"]) == 1
    assert "unknown task 'nope'" in capsys.readouterr().err


def test_the_task_adapter_is_the_default_and_lora_none_runs_the_base(tmp_path):
    (tmp_path / "t.gguf").write_bytes(b"GGUF")
    task = load_task_file(_write(tmp_path, "be.json", dict(GOOD, lora="t.gguf:0.5")))
    parse = build_parser().parse_args
    assert engine_settings(parse(["inspect", "x.fits", "--task", "be"]), task).lora == (task.lora,)
    assert engine_settings(parse(["inspect", "x.fits", "--task", "be", "--lora", "none"]), task).lora == ()
    assert engine_settings(parse(["vet", "d", "--out", "r", "--task", "be", "--lora", "o.gguf"]), task).lora == (
        LoraAdapter("o.gguf"),)
    with pytest.raises(Speco3Error, match="--lora none runs the base model"):
        engine_settings(parse(["inspect", "x.fits", "--task", "be", "--lora", "none", "--lora", "o.gguf"]), task)
    with pytest.raises(Speco3Error, match="task be's adapter .*--lora none"):
        engine_settings(parse(["inspect", "x.fits", "--task", "be", "--server", "http://127.0.0.1:1"]), task)


@pytest.mark.llama
def test_inspect_runs_the_task_adapter_on_its_base_and_refuses_another(tiny_gguf, tmp_path, capsys):
    text, mmproj = tiny_gguf("F32")
    other_text, other_mmproj = tiny_gguf("F16")
    assert main(["models", "import", str(text), str(mmproj), "--name", "tiny-f32", "--link"]) == 0
    assert main(["models", "import", str(other_text), str(other_mmproj), "--name", "tiny-f16", "--link"]) == 0
    folder = user_task_dir()
    folder.mkdir(parents=True, exist_ok=True)
    convert_lora(make_random_lora(tmp_path / "peft"), text, folder / "be-lora.gguf", base_sha256=sha256_file(text),
                 base_name="tiny-f32")
    _write(folder, "be.json", dict(GOOD, lora="be-lora.gguf"))
    spectrum = next(write_csv_archive(tmp_path / "arch", 1).glob("*.csv"))
    capsys.readouterr()
    common = ["inspect", str(spectrum), "--task", "be", "--quiet", "--max-turns", "1", "--max-tokens-per-turn", "8",
              "--n-ctx", "4096", "--image-max-tokens", "64", "--threads", "2", "--n-gpu-layers", "0"]
    assert main([*common, "--model", "tiny-f16", "--out", str(tmp_path / "t1")], render=pillow_render) == 1
    err = capsys.readouterr().err
    assert "be-lora.gguf was made for the base model 'tiny-f32'" in err and "not for 'tiny-f16'" in err
    rc = main([*common, "--model", "tiny-f32", "--out", str(tmp_path / "t2")], render=pillow_render)
    out = capsys.readouterr().out
    assert rc in (0, 3) and "model tiny-f32+lora:be-lora" in out, out
    trace = json.loads(next((tmp_path / "t2").glob("*.json")).read_text(encoding="utf-8"))
    assert trace["settings"]["lora"] == [{"path": str(folder / "be-lora.gguf"), "scale": 1.0}]
    assert main([*common, "--model", "tiny-f16", "--lora", "none", "--out", str(tmp_path / "t3")],
                render=pillow_render) in (0, 3)
    assert "· model tiny-f16\n" in capsys.readouterr().out

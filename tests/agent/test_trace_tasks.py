"""Trace round trip, the task library and its validation errors, script loading."""

from __future__ import annotations

import json

import pytest

from speco3.agent import Outcome, Trace, TraceError, get_task, load_task_file, load_tasks, run_episode
from speco3.agent.steps import ToolStep
from speco3.agent.trace import spectrum_ref
from speco3.engine.scripted import ScriptedEngine, load_script, split_pieces
from speco3.errors import EngineError, TaskError

ZOOM = ('<think>Check Hα.</think>\n<tool_call>\n{"name": "spectral_visualization_tool", "arguments": '
        '{"label": "Hα", "wavelength_range": [6500, 6600]}}\n</tool_call>')
BAD = '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [1, 2]}}\n</tool_call>'
YES = "<think>Emission.</think><answer>\\boxed{YES}</answer>"


def test_trace_round_trip(tmp_path, spectrum, render):
    engine = ScriptedEngine([ZOOM, BAD, YES])
    trace = Trace(task_id="cv", prompt_version="abc", spectrum=spectrum_ref(spectrum),
                  model={"model_id": "scripted"}, settings=engine.settings.to_dict())
    steps = list(trace.follow(run_episode(engine, spectrum, get_task("cv"), render)))
    assert steps == trace.steps and trace.outcome is Outcome.YES
    trace.save(tmp_path / "t")
    names = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert names == ["00-full.png", "01-zoom-6500-6600.png", "prompt.txt", "trace.json"]
    back = Trace.load(tmp_path / "t")
    assert back.to_dict() == json.loads((tmp_path / "t" / "trace.json").read_text(encoding="utf-8"))
    assert [s.kind for s in back.steps] == [s.kind for s in trace.steps]
    assert back.verdict == "YES" and back.outcome is Outcome.YES and back.task_id == "cv"
    assert back.spectrum["address"] == "/data/synthetic.fits#0" and back.settings["n_ctx"] == 16384
    tools = back.tool_steps()
    assert tools[0].wavelength_range == (6500, 6600) and tools[0].image.png == trace.tool_steps()[0].image.png
    assert tools[0].view_spec.wavelength_range == (6500.0, 6600.0) and tools[1].error == "invalid_range"
    assert tools[0].image.sha256 == trace.tool_steps()[0].image.sha256 and tools[0].image.grid == trace.tool_steps()[0].image.grid
    assert back.prompt_text == trace.prompt_text and back.prompt_text.count("<|vision_start|>") == 2
    assert back.steps[1].reasoning == "Check Hα." and back.steps[-1].strict


def test_trace_load_errors(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        Trace.load(tmp_path / "missing")
    (tmp_path / "trace.json").write_text('{"format": 99}')
    with pytest.raises(TraceError, match="not a Spec-o3 trace"):
        Trace.load(tmp_path)
    (tmp_path / "trace.json").write_text('{"format": 1, "steps": [{"kind": "tool", "image": {"file": "x.png", '
                                         '"width": 28, "height": 28}}]}')
    with pytest.raises(TraceError, match="x.png missing"):
        Trace.load(tmp_path)


def test_builtin_tasks_are_astrophysically_specific():
    tasks = load_tasks()
    assert set(tasks) >= {"cv", "carbon", "ss", "gm", "wd"}
    need = {
        "cv": ["He II 4686", "Balmer", "He I"],
        "carbon": ["Swan", "4737", "5165", "5636", "CN", "7872", "8067"],
        "ss": ["ZrO", "4620", "5551", "6345", "6474"],
        "gm": ["TiO", "4761", "4954", "5167", "5448", "6159", "7054", "Na I", "giant"],
        "wd": ["pressure-broadened Balmer", "DA", "DB", "He I", "DC", "featureless"],
    }
    for tid, words in need.items():
        t = tasks[tid]
        assert t.text.startswith(f"Analyze the provided spectrum to determine if it is a **{t.target_class}**.")
        for w in words:
            assert w in t.text, (tid, w)
        assert "<answer>\\boxed{YES}</answer>" in t.text and "<think>" in t.text
        assert t.lines and all(3000 < ln.wavelength < 10000 for ln in t.lines)
        assert len(t.prompt_version) == 12
    assert len({t.prompt_version for t in tasks.values()}) == len(tasks)
    halpha = [ln for ln in tasks["cv"].lines if ln.name == "Hα"][0]
    assert halpha.wavelength == pytest.approx(6564.61, abs=0.02)  # vacuum, not air 6562.8
    heii = [ln for ln in tasks["cv"].lines if ln.name == "He II 4686"][0]
    assert heii.wavelength == pytest.approx(4687.02, abs=0.05)


def _write(folder, name, data):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


GOOD = {"id": "be", "target_class": "Be Star", "question": "Analyze the provided spectrum to determine if it is a **Be Star**.",
        "primary_indicators": ["Hα emission"], "lines": [{"name": "Hα", "wavelength": 6564.61, "kind": "emission"}]}


def test_user_task_added_from_config_dir():
    from speco3.config import config_dir

    _write(config_dir() / "tasks", "be.json", GOOD)
    override = dict(GOOD, id="cv", target_class="My CV", question="Is it a **My CV**?")
    _write(config_dir() / "tasks", "cv.json", override)
    tasks = load_tasks()
    assert tasks["be"].target_class == "Be Star" and tasks["be"].source.endswith("be.json")
    assert tasks["cv"].target_class == "My CV" and get_task("be").lines[0].name == "Hα"
    assert tasks["be"].prompt_version != get_task("cv").prompt_version


@pytest.mark.parametrize(
    "data, field",
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "must hold a JSON object"),
        ({k: v for k, v in GOOD.items() if k != "target_class"}, "missing field 'target_class'"),
        (dict(GOOD, id="Bad Id!"), "field 'id'"),
        (dict(GOOD, question=""), "field 'question'"),
        (dict(GOOD, primary_indicators="x"), "field 'primary_indicators'"),
        (dict(GOOD, lines=[{"name": "Hα", "wavelength": "6563"}]), "field 'lines[0].wavelength'"),
        (dict(GOOD, lines=[{"name": "Hα", "wavelength": 6563, "kind": "weird"}]), "field 'lines[0].kind'"),
        (dict(GOOD, lines=[{"wavelength": 6563}]), "field 'lines[0].name'"),
        (dict(GOOD, output_format="Say yes or no."), "field 'output_format'"),
    ],
)
def test_bad_task_files_name_file_and_field(tmp_path, data, field):
    path = _write(tmp_path, "bad.json", data)
    with pytest.raises(TaskError) as info:
        load_task_file(path)
    assert str(path) in str(info.value) and field in str(info.value)
    errors: list = []
    tasks = load_tasks(tmp_path, errors=errors)
    assert "cv" in tasks and len(errors) == 1
    with pytest.raises(TaskError):
        load_tasks(tmp_path)


def test_verbatim_text_task(tmp_path):
    path = _write(tmp_path, "v.json", {"id": "v", "target_class": "X", "text": "Exact benchmark text\nline 2"})
    t = load_task_file(path)
    assert t.text == "Exact benchmark text\nline 2" and t.question == "Exact benchmark text"


def test_unknown_task():
    with pytest.raises(TaskError, match="known tasks: .*cv"):
        get_task("nope")


def test_split_pieces():
    text = "<think>Hα at 6563 Å</think>\n<tool_call>{\"a\": [1, 2]}</tool_call>"
    pieces = split_pieces(text)
    assert "".join(pieces) == text and "<think>" in pieces and "<tool_call>" in pieces
    assert "".join(split_pieces(text, 3)) == text and all(len(p) <= 3 for p in split_pieces(text, 3))


def test_load_script_forms(tmp_path):
    eng = load_script(_write(tmp_path, "a.json", [YES]))
    assert eng.outputs == [YES]
    eng = load_script(_write(tmp_path, "b.json", {"outputs": [YES], "delay_s": 0.001, "chunk": 2}))
    assert eng.delay_s == 0.001 and eng.chunk == 2
    eng = load_script(_write(tmp_path, "c.json", {"scripts": [[YES], ["<answer>\\boxed{NO}</answer>"]]}))
    assert len(eng.scripts) == 2
    for bad, msg in [("[", "cannot read"), ("[]", "non-empty list"), ('{"x": 1}', "'outputs' or 'scripts'"),
                     ('{"outputs": [1]}', "list of strings"), ('{"outputs": ["a"], "delay_s": -1}', "non-negative")]:
        with pytest.raises(EngineError, match=msg):
            load_script(_write(tmp_path, "bad.json", bad))


def test_script_selection_is_deterministic_and_varies(spectrum, render):
    from speco3_testkit.spectra import make_spectrum

    eng = ScriptedEngine(scripts=[[YES], ["<think>n</think><answer>\\boxed{NO}</answer>"]])
    verdicts = []
    for seed in range(8):
        spec = make_spectrum(seed=seed)
        final = list(run_episode(eng, spec, "t", render))[-1]
        again = list(run_episode(eng, spec, "t", render))[-1]
        assert final.verdict == again.verdict
        verdicts.append(final.verdict)
    assert set(verdicts) == {"YES", "NO"}


def test_scripted_stats_count_distinct_images(spectrum, render):
    eng = ScriptedEngine([ZOOM, ZOOM, YES])
    steps = list(run_episode(eng, spectrum, "t", render))
    st = eng.stats()
    assert st.images_encoded == 2 and st.tokens_generated == sum(getattr(s, "n_tokens", 0) for s in steps)
    assert sum(isinstance(s, ToolStep) for s in steps) == 2 and st.backend == "scripted"


def test_record_adds_a_collected_list(spectrum, render):
    steps = list(run_episode(ScriptedEngine([YES]), spectrum, "t", render))
    trace = Trace().record(steps)
    assert trace.steps == steps and trace.verdict == "YES" and trace.task_id == "custom"


def test_a_bad_task_file_does_not_stop_the_other_tasks(tmp_path, caplog):
    _write(tmp_path, "bad1.json", {"id": "bad1", "target_class": "X", "question": "Q?", "primary_indicators": "no"})
    _write(tmp_path, "be.json", {"id": "be", "target_class": "Be Star", "question": "Is it a **Be Star**?"})
    assert get_task("cv", tmp_path).id == "cv" and get_task("be", tmp_path).target_class == "Be Star"
    assert "bad1.json" in caplog.text  # skipped with a warning
    with pytest.raises(TaskError, match=r"bad1\.json: field 'primary_indicators'"):  # its own error, when asked for
        get_task("bad1", tmp_path)
    with pytest.raises(TaskError, match=r"unknown task 'nope'.*1 task file\(s\) could not be read, first: .*bad1"):
        get_task("nope", tmp_path)
    _write(tmp_path, "cv.json", {"id": "cv", "target_class": 3})  # a broken override never falls back to the built-in
    with pytest.raises(TaskError, match=r"cv\.json: field 'target_class'"):
        get_task("cv", tmp_path)

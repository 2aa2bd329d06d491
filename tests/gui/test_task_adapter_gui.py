"""A task file's own LoRA adapter in the app: run as ``spec-o3 vet`` runs it (`speco3.agent.tasks.run_adapters`).

Real task files in the test's user task folder, the real model store with the tiny F32 and F16 pairs, a real
adapter converted for the F32 base (``convert_lora``), and the real vetting store; the engine is the tests'
scripted one, which records the settings it was opened with. What is checked: which adapters the engine settings
get (the task's by default, none with "base only", the model box's own when one is chosen), that the verdict row
records them, that the choice survives a restart and a task switch, that an adapter made for another base is
refused before anything runs with the command line's message, and that a bad task file is shown in the task box.
"""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from speco3.agent.tasks import NO_LORA, load_task_file, user_task_dir
from speco3.engine.base import LoraAdapter
from speco3.engine.choice import InstalledModel
from speco3.gui.agent_panel import LORA_ROLE
from speco3.gui.settings import AppSettings

pytestmark = pytest.mark.gui

BE = {"id": "be", "target_class": "Be Star", "question": "Analyze the provided spectrum to determine if it is a "
      "**Be Star**.", "primary_indicators": ["Hα emission"], "lines": [{"name": "Hα", "wavelength": 6564.61}]}


@pytest.fixture
def task_with_adapter(store_with_adapter, tiny_gguf, tmp_path):
    """Task ``be`` in the user task folder with its own adapter ``be-lora.gguf`` (beside it), made for tiny-f32;
    returns (task, the store's adapter for tiny-f32)."""
    from speco3_base.fileio import sha256_file
    from speco3_converters.lora import convert_lora
    from speco3_testkit.tinylora import make_random_lora

    _store, installed = store_with_adapter
    text, _mmproj = tiny_gguf("F32")
    folder = user_task_dir()
    folder.mkdir(parents=True, exist_ok=True)
    convert_lora(make_random_lora(tmp_path / "peft-be", seed=7), text, folder / "be-lora.gguf",
                 base_sha256=sha256_file(text), base_name="tiny-f32")
    (folder / "be.json").write_text(json.dumps(dict(BE, lora="be-lora.gguf")), encoding="utf-8")
    return load_task_file(folder / "be.json"), installed


def _select(panel, model_id: str, lora: str) -> str:
    """Choose the model box entry of ``model_id`` with adapter choice ``lora``, as a user would; its text."""
    box = panel.model_box
    i = next(i for i, choice in enumerate(panel.choices())
             if choice == InstalledModel(model_id) and (box.itemData(i, LORA_ROLE) or "") == lora)
    box.setCurrentIndex(i)
    return box.itemText(i)


def _run(qtbot, w) -> None:
    assert w.agent.run_current(w.agent_panel.task_id(), w.agent_panel.choice()) is not None
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=30000)


def test_the_task_adapter_runs_by_default_base_only_runs_without_and_the_choice_is_kept(
        qtbot, make_window, demo_archive, open_and_wait, engine_factory, task_with_adapter):
    task, installed = task_with_adapter
    w = make_window(settings=AppSettings(vetter="t", model_id="tiny-f32", task="be"))
    panel = w.agent_panel
    assert panel.task_id() == "be" and panel.choice() == InstalledModel("tiny-f32") and panel.lora() == ""
    texts = [panel.model_box.itemText(i) for i in range(panel.model_box.count())]
    assert panel.model_box.currentText() == "tiny-f32 (F32) + be-lora (from the task)", texts
    assert panel.model_box.toolTip().startswith("tiny-f32 (F32) + be-lora (from the task)\nruns with the task's own")
    assert "tiny-f32 (F32), base only (without the task's adapter)" in texts
    assert "tiny-f32 (F32) + cv-lora (scale 1.0)" in texts  # the store's adapter: still offered, explicitly
    assert panel.adapter_note.isVisibleTo(panel) and "be-lora.gguf from task be's file" in panel.adapter_note.text()
    open_and_wait(w, demo_archive)
    _run(qtbot, w)
    assert engine_factory.engines[-1].settings.lora == (task.lora,) == (LoraAdapter(str(user_task_dir() / "be-lora.gguf")),)
    mv = w.vetting.model_suggestion()  # the verdict row records the adapter, as `spec-o3 vet`'s does
    assert mv is not None and mv.task == "be"
    assert mv.engine_settings["lora"] == [{"path": task.lora.path, "scale": 1.0}]

    _select(panel, "tiny-f32", NO_LORA)  # the base alone, explicitly (--lora none)
    assert w.settings.lora == NO_LORA and "adapter be-lora.gguf is off" in panel.adapter_note.text()
    _run(qtbot, w)
    assert engine_factory.engines[-1].settings.lora == ()
    assert w.vetting.model_suggestion().engine_settings["lora"] == []

    # a task without an adapter offers no "base only" (the plain model is the same run); the choice is kept
    panel.task_box.setCurrentIndex(panel.task_box.findData("cv"))
    assert panel.model_box.currentText() == "tiny-f32 (F32)" and not panel.offers_base_only()
    assert w.settings.lora == NO_LORA and panel.adapter_note.isHidden()
    panel.task_box.setCurrentIndex(panel.task_box.findData("be"))
    assert panel.lora() == NO_LORA and panel.model_box.currentText().endswith("base only (without the task's adapter)")
    w.close()
    assert AppSettings.load().lora == NO_LORA
    w2 = make_window()
    assert w2.agent_panel.task_id() == "be" and w2.agent_panel.lora() == NO_LORA

    # another adapter chosen in the model box runs instead of the task's (--lora FILE)
    _select(w2.agent_panel, "tiny-f32", str(installed.path))
    assert "task be's own be-lora.gguf is not used" in w2.agent_panel.adapter_note.text()
    assert w2.settings.run_settings(w2.tasks["be"]).engine.lora == (LoraAdapter(str(installed.path)),)
    _select(w2.agent_panel, "tiny-f32", "")  # back to following the task
    assert w2.settings.lora == "" and w2.settings.run_settings(w2.tasks["be"]).engine.lora == (task.lora,)


def test_a_task_adapter_made_for_another_base_is_refused_on_screen_before_anything_runs(
        qtbot, make_window, demo_archive, open_and_wait, engine_factory, task_with_adapter):
    w = make_window(settings=AppSettings(vetter="t", model_id="tiny-f16", task="be"))
    panel = w.agent_panel
    assert panel.model_box.currentText() == "tiny-f16 (F16) + be-lora (from the task)"
    note = panel.adapter_note.text()
    # the engine's own refusal (`check_adapters`), word for word what `spec-o3 vet --model tiny-f16` says
    assert "⚠ not run: be-lora.gguf was made for the base model 'tiny-f32'" in note and "not for 'tiny-f16'" in note
    assert "convert-lora" in note and panel.adapter_note.isVisibleTo(panel)
    open_and_wait(w, demo_archive)
    messages: list[str] = []
    w.agent.message.connect(messages.append)
    assert w.agent.run_current("be", InstalledModel("tiny-f16")) is None
    assert w.agent.start_batch([w.vetting.entry], "be", InstalledModel("tiny-f16")) == 0
    assert engine_factory.opened == [] and w.vetting.model_suggestion() is None  # nothing ran, nothing stored
    assert len(messages) == 2 and all("task be not run: be-lora.gguf was made for the base model 'tiny-f32'" in m
                                      for m in messages)
    assert "made for the base model" in w.statusBar().currentMessage()
    _select(panel, "tiny-f16", NO_LORA)  # the base alone runs
    assert panel.adapter_note.styleSheet().find("b32d2d") < 0
    _run(qtbot, w)
    assert engine_factory.opened == ["tiny-f16"] and engine_factory.engines[-1].settings.lora == ()


def test_the_settings_resolve_the_adapter_as_the_command_line(task_with_adapter):
    task, _installed = task_with_adapter
    assert AppSettings().run_settings(task).engine.lora == (task.lora,)
    assert AppSettings(lora="none").run_settings(task).engine.lora == ()
    assert AppSettings(lora="o.gguf:0.5").run_settings(task).engine.lora == (LoraAdapter("o.gguf", 0.5),)
    with pytest.raises(Exception, match="task be's adapter .*base only"):
        AppSettings().run_settings(task, server=True)
    assert AppSettings(lora="none").run_settings(task, server=True).engine.lora == ()


def test_a_bad_user_task_file_is_shown_in_the_task_box(qtbot, make_window):
    folder = user_task_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "be.json").write_text(json.dumps(dict(BE, lora="missing.gguf")), encoding="utf-8")
    (folder / "wd2.json").write_text("{not json", encoding="utf-8")
    w = make_window()
    panel, box = w.agent_panel, w.agent_panel.task_box
    assert box.findData("be") < 0 and box.findData("cv") >= 0
    bad = [i for i in range(box.count()) if box.itemText(i).startswith("⚠")]
    assert [box.itemText(i) for i in bad] == ["⚠ be.json: not read (hover for why)",
                                             "⚠ wd2.json: not read (hover for why)"]
    assert "field 'lora': no adapter file" in box.itemData(bad[0], Qt.ItemDataRole.ToolTipRole)
    assert "not valid JSON" in box.itemData(bad[1], Qt.ItemDataRole.ToolTipRole)
    assert not box.model().item(bad[0]).isEnabled()  # cannot be picked as a task
    assert panel.task_warning.isVisibleTo(panel) and panel.task_warning.text() == "⚠ 2 task files not read"
    assert "missing.gguf" in panel.task_warning.toolTip() and "not valid JSON" in panel.task_warning.toolTip()
    assert panel.task_id() in w.tasks
    # fixed and saved through the editor: the warning goes
    (folder / "wd2.json").unlink()
    (folder / "be.json").write_text(json.dumps(BE), encoding="utf-8")
    w._task_saved(load_task_file(folder / "be.json"))
    assert box.findData("be") >= 0 and panel.task_warning.isHidden()
    assert not any(box.itemText(i).startswith("⚠") for i in range(box.count()))


@pytest.mark.llama
def test_the_real_engine_runs_the_task_adapter_and_the_verdict_names_it(qtbot, make_window, demo_archive,
                                                                       open_and_wait, task_with_adapter):
    """llama.cpp on the tiny F32 model: the verdict's model is ``tiny-f32+lora:be-lora``, as `spec-o3 inspect`
    names it for the same task file (tests/agent/test_task_library_cli.py)."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    task, _installed = task_with_adapter
    settings = AppSettings(vetter="t", model_id="tiny-f32", task="be", n_ctx=4096, image_max_tokens=64, n_threads=2,
                           n_gpu_layers=0)
    w = make_window(settings=settings, opener=None)
    w.agent.engine_opener = w.agent._open_engine  # the real `open_engine`, not the test factory
    open_and_wait(w, demo_archive)
    _run(qtbot, w)
    mv = w.vetting.model_suggestion()
    assert mv is not None and mv.model_id == "tiny-f32+lora:be-lora", (mv and mv.model_id, w.statusBar().currentMessage())
    assert mv.engine_settings["lora"] == [{"path": task.lora.path, "scale": 1.0}]

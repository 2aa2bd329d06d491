"""Tasks → New/Edit task… (`speco3.gui.task_editor`) and the model box's LoRA adapters.

The editor writes a real task file to the user task folder, validated by `task_from_dict`; the task box gets it
without a restart. The model box lists the model store's adapters beside the model they were made for (a real
store, the tiny model pair and an adapter converted for one of them); choosing one runs with it."""

from __future__ import annotations

import json
import shutil

import pytest
from PySide6.QtWidgets import QApplication

from speco3.agent.tasks import (
    DEFAULT_OUTPUT_FORMAT,
    load_task_file,
    load_tasks,
    question_for,
    task_from_dict,
    task_to_dict,
    user_task_dir,
)
from speco3.cli import main
from speco3.engine.base import LoraAdapter
from speco3.engine.choice import InstalledModel
from speco3.gui.lines import GENERIC, known_lines
from speco3.gui.settings import AppSettings

pytestmark = pytest.mark.gui


def _editor(qtbot, make_window, task_id=None):
    w = make_window()
    if task_id is not None:
        w.agent_panel.task_box.setCurrentIndex(w.agent_panel.task_box.findData(task_id))
        dlg = w.open_task_editor(w.tasks[task_id])
    else:
        dlg = w.open_task_editor(None)
    qtbot.waitUntil(dlg.isVisible)
    return w, dlg


def test_known_lines_hold_the_generic_and_every_task_line_once(make_window):
    w = make_window()
    lines = known_lines(w.tasks)
    names = [ln.name for ln in lines]
    assert len(names) == len(set(names)) and {ln.name for ln in GENERIC} <= set(names)
    assert "He II 4686" in names and "C₂ 5165" in names
    assert [ln.wavelength for ln in lines] == sorted(ln.wavelength for ln in lines)


def test_new_task_in_the_trained_phrasing_is_saved_and_joins_the_task_box(qtbot, make_window):
    w, dlg = _editor(qtbot, make_window)
    assert dlg.width() <= 1366 and dlg.height() <= 768 and dlg.minimumSizeHint().height() <= 700
    qtbot.keyClicks(dlg.id_edit, "be")
    qtbot.keyClicks(dlg.class_edit, "Be Star")
    assert dlg.question.toPlainText() == question_for("Be Star")  # follows the class name
    dlg.primary.setPlainText("Hα emission, often double-peaked\n\nHβ emission")
    dlg.secondary.setPlainText("A hot B-type continuum")
    halpha = next(i for i in range(dlg.known_box.count()) if dlg.known_box.itemData(i).name == "Hα")
    dlg.known_box.setCurrentIndex(halpha)
    dlg.add_known.click()
    kind = dlg.known_box.itemData(halpha).kind
    assert dlg.lines.item(0, 0).text() == "Hα" and dlg.lines.cellWidget(0, 2).currentText() == kind
    expected = task_from_dict(dlg.data(), "x")
    assert dlg.preview.toPlainText() == expected.text and "- Hβ emission" in expected.text
    assert dlg.error.text() == ""

    dlg.lines.item(0, 1).setText("656x")  # a bad wavelength: named, nothing written
    assert dlg.error_field() == "lines" and "lines[0].wavelength" in dlg.error.text()
    assert dlg.lines.styleSheet() != ""
    dlg.buttons.button(dlg.buttons.StandardButton.Save).click()
    assert dlg.isVisible() and not (user_task_dir() / "be.json").exists()
    dlg.lines.item(0, 1).setText("6564.61")
    assert dlg.error.text() == "" and dlg.lines.styleSheet() == ""
    dlg.buttons.button(dlg.buttons.StandardButton.Save).click()
    qtbot.waitUntil(lambda: not dlg.isVisible())
    saved = load_task_file(user_task_dir() / "be.json")
    assert saved.text == expected.text and saved.lines[0].wavelength == 6564.61
    assert saved.primary_indicators == ("Hα emission, often double-peaked", "Hβ emission")
    assert w.agent_panel.task_id() == "be" and "be" in w.tasks and w.agent.tasks["be"].target_class == "Be Star"
    assert w.settings.task == "be"


def test_edit_keeps_an_edited_question_names_bad_fields_and_overwrites_its_own_file(qtbot, make_window, tmp_path):
    folder = user_task_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "be.json").write_text(json.dumps({"id": "be", "target_class": "Be Star",
                                                "question": "Is it a **Be Star**?", "primary_indicators": ["Hα"],
                                                "lines": [{"name": "Hα", "wavelength": 6564.61}]}), encoding="utf-8")
    w, dlg = _editor(qtbot, make_window, "be")
    assert dlg.windowTitle() == "Edit task" and dlg.id_edit.text() == "be" and dlg.lines.rowCount() == 1
    qtbot.keyClicks(dlg.class_edit, " (classical)")
    assert dlg.question.toPlainText() == "Is it a **Be Star**?"  # the user's own question is kept
    dlg.reset_question.click()
    assert dlg.question.toPlainText() == question_for("Be Star (classical)")
    not_adapter = tmp_path / "x.gguf"
    not_adapter.write_bytes(b"not a gguf")
    dlg.adapter.setText(str(not_adapter))
    assert dlg.error_field() == "lora" and dlg.adapter.styleSheet() != ""
    dlg.adapter.setText("")
    dlg.id_edit.setText("Bad Id")
    assert dlg.error_field() == "id"
    dlg.id_edit.setText("be")
    dlg.save()
    assert not dlg.isVisible()
    assert load_task_file(folder / "be.json").target_class == "Be Star (classical)"
    # a new task may not take an existing file's name
    dlg2 = w.open_task_editor(None)
    dlg2.id_edit.setText("be")
    dlg2.class_edit.setText("Other")
    dlg2.save()
    assert dlg2.isVisible() and "exists" in dlg2.error.text()
    assert load_task_file(folder / "be.json").target_class == "Be Star (classical)"
    dlg2.reject()


def _outlined(dlg) -> set[str]:
    return {name for name, widget in dlg._fields.items() if widget.styleSheet()}


def test_a_new_task_shows_no_error_until_a_field_is_edited_or_save_is_pressed(qtbot, make_window):
    _w, dlg = _editor(qtbot, make_window)
    assert dlg.error.text() == "" and _outlined(dlg) == set()  # nothing typed yet: nothing is wrong
    qtbot.keyClicks(dlg.id_edit, "Be")  # upper case: the id is bad, and edited
    assert dlg.error_field() == "id" and _outlined(dlg) == {"id"}  # the class name, still empty, is not marked
    dlg.id_edit.clear()
    qtbot.keyClicks(dlg.id_edit, "be")
    assert dlg.error.text() == "" and _outlined(dlg) == set()
    qtbot.keyClicks(dlg.class_edit, "X")
    dlg.class_edit.clear()  # edited, then emptied: marked
    assert dlg.error_field() == "target_class" and _outlined(dlg) == {"target_class"}
    dlg.reject()

    dlg = make_window().open_task_editor(None)  # Save on the empty form: every bad field marked, nothing written
    qtbot.waitUntil(dlg.isVisible)
    dlg.lines.setRowCount(0)
    dlg.add_line(None)  # an empty row (as New row adds): a third bad field
    assert dlg.error.text() == "" and _outlined(dlg) == set()
    dlg.buttons.button(dlg.buttons.StandardButton.Save).click()
    assert dlg.isVisible() and not list(user_task_dir().glob("*.json"))
    assert _outlined(dlg) == {"id", "target_class", "question", "lines"}  # the question follows the empty class
    assert dlg.error_field() == "id" and len(dlg.error.text().splitlines()) == 4
    assert "'target_class'" in dlg.error.text() and "'lines[0].name'" in dlg.error.text()
    qtbot.keyClicks(dlg.id_edit, "be")  # fixed one by one: its mark goes, the others stay
    assert _outlined(dlg) == {"target_class", "question", "lines"}
    qtbot.keyClicks(dlg.class_edit, "Be Star")
    assert _outlined(dlg) == {"lines"} and dlg.error_field() == "lines"
    dlg.lines.setCurrentCell(0, 0)
    dlg.remove_line.click()
    assert dlg.error.text() == "" and _outlined(dlg) == set()
    dlg.save()
    assert not dlg.isVisible() and load_task_file(user_task_dir() / "be.json").target_class == "Be Star"


def test_a_verbatim_text_task_is_edited_as_its_text_and_saved_so(qtbot, make_window, store_with_adapter):
    _store, adapter = store_with_adapter
    folder = user_task_dir()
    folder.mkdir(parents=True, exist_ok=True)
    text = ("Is this spectrum a **symbiotic star**?\n\nLook for a cool giant's TiO bands with He II 4686 and "
            "Raman O VI 6825 emission.\n\nAnswer <answer>\\boxed{YES}</answer> or <answer>\\boxed{NO}</answer>.")
    original = {"id": "symb", "target_class": "Symbiotic star", "question": "Symbiotic?", "text": text,
                "lines": [{"name": "He II 4686", "wavelength": 4687.02, "kind": "emission"}],
                "lora": f"{adapter.path}:0.5", "reviewed_by": "lsm"}
    (folder / "symb.json").write_text(json.dumps(original), encoding="utf-8")
    w, dlg = _editor(qtbot, make_window, "symb")
    dlg.save()  # saved unchanged: the same file, in the text form
    assert not dlg.isVisible() and json.loads((folder / "symb.json").read_text(encoding="utf-8")) == original
    assert load_task_file(folder / "symb.json").text == text
    dlg = w.open_task_editor(w.tasks["symb"])
    assert dlg.verbatim and dlg.text_edit.isVisible() and dlg.text_edit.toPlainText() == text
    assert not dlg.question.isVisible() and not dlg.primary.isVisible()  # its text stands in for these
    assert dlg.preview.toPlainText() == text and dlg.error.text() == ""
    dlg.text_edit.setPlainText("  \n")
    assert dlg.error_field() == "text" and _outlined(dlg) == {"text"}
    dlg.save()
    assert dlg.isVisible() and json.loads((folder / "symb.json").read_text(encoding="utf-8")) == original
    edited = text.replace("emission.", "emission, and Hα.\n")  # the user's text, trailing newline included
    dlg.text_edit.setPlainText(edited)
    dlg.save()
    assert not dlg.isVisible()
    raw = json.loads((folder / "symb.json").read_text(encoding="utf-8"))
    assert raw == {**original, "text": edited}  # the text form, and every other field as the file had it
    assert load_task_file(folder / "symb.json").text == edited
    assert load_tasks()["symb"].text == edited == w.tasks["symb"].text
    assert main(["tasks", "validate", str(folder / "symb.json")]) == 0


def test_model_box_lists_adapters_of_their_base_and_runs_the_chosen_one(qtbot, make_window, demo_archive,
                                                                        open_and_wait, engine_factory,
                                                                        store_with_adapter):
    _store, adapter = store_with_adapter
    w = make_window(settings=AppSettings(vetter="t"))
    box = w.agent_panel.model_box
    entries = [(box.itemText(i), box.itemData(i), w.agent_panel.lora() if i == box.currentIndex() else None)
               for i in range(box.count())]
    texts = [t for t, _d, _l in entries]
    assert texts[:3] == ["tiny-f16 (F16)", "tiny-f32 (F32)", "tiny-f32 (F32) + cv-lora (scale 1.0)"], texts
    assert not any("tiny-f16 (F16) +" in t for t in texts)  # made for the other base: not offered there
    box.setCurrentIndex(2)
    assert w.agent_panel.choice() == InstalledModel("tiny-f32") and w.agent_panel.lora() == str(adapter.path)
    assert w.settings.run_settings().engine.lora == (LoraAdapter(str(adapter.path)),)
    open_and_wait(w, demo_archive)
    w.run_agent()
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=30000)
    assert engine_factory.opened[-1] == "tiny-f32"
    assert engine_factory.engines[-1].settings.lora == (LoraAdapter(str(adapter.path)),)
    w.close()
    assert AppSettings.load().lora == str(adapter.path)  # saved, and chosen again at the next start
    w2 = make_window()
    assert w2.agent_panel.model_box.currentIndex() == 2 and w2.agent_panel.lora() == str(adapter.path)
    w2.agent_panel.model_box.setCurrentIndex(1)
    assert w2.settings.lora == "" and w2.settings.run_settings().engine.lora == ()
    QApplication.processEvents()


def test_saving_keeps_a_relative_adapter_path_as_the_file_wrote_it(qtbot, make_window, store_with_adapter):
    """``"lora": "be-lora.gguf:1.0"`` (relative to the task's folder) survives an unchanged save as written: the
    task folder can move or be shared and still find its adapter."""
    _store, adapter = store_with_adapter
    folder = user_task_dir()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(adapter.path, folder / "be-lora.gguf")
    original = {"id": "be", "target_class": "Be star", "question": "Is this spectrum a **Be star**?",
                "primary_indicators": ["Hα emission"], "secondary_indicators": [],
                "output_format": DEFAULT_OUTPUT_FORMAT, "lines": [], "lora": "be-lora.gguf:1.0"}
    (folder / "be.json").write_text(json.dumps(original), encoding="utf-8")
    w, dlg = _editor(qtbot, make_window, "be")
    assert dlg.adapter.text() == "be-lora.gguf:1.0"
    dlg.save()
    assert not dlg.isVisible() and json.loads((folder / "be.json").read_text(encoding="utf-8")) == original
    assert load_task_file(folder / "be.json").lora.path == str(folder / "be-lora.gguf")
    # copied to another folder (tasks new --from, a built-in's copy), the resolved path goes with it
    other = task_to_dict(load_task_file(folder / "be.json"), folder / "elsewhere")
    assert other["lora"] == str(folder / "be-lora.gguf")

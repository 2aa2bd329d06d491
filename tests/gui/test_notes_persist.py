"""Flags and comment are stored as they are edited, without a decision, and come back after a restart."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from speco3.gui.settings import AppSettings
from speco3.vetting import VettingStore
from speco3.vetting.export import export_rows

pytestmark = pytest.mark.gui


def test_flag_and_comment_without_decision_survive_next_and_restart(qtbot, make_window, demo_archive,
                                                                   open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    first = w.vetting.entry.key
    key(w, Qt.Key.Key_2)  # flag: wrong redshift (no decision)
    qtbot.mouseClick(w.decision.comment, Qt.MouseButton.LeftButton)
    qtbot.keyClicks(w.decision.comment, "check Hbeta wing")  # typed, no Enter
    w.archive.table.setFocus()
    key(w, Qt.Key.Key_Right)  # move on before the typing pause ends
    assert w.vetting.entry.key != first
    assert w.decision.flags() == [] and w.decision.comment.text() == ""  # the next spectrum has no notes
    store_path = w.vetting.store.path
    w.close()

    with VettingStore(store_path, readonly=True) as store:
        (note,) = store.annotations("cv")
        assert note.flags == ["bad_redshift"] and note.comment == "check Hbeta wing" and note.vetter == "tester"
        assert store.decisions("cv") == []
        (row,) = export_rows(store, "cv")  # exports carry notes of undecided spectra
        assert row["decision"] is None and row["flags"] == "bad_redshift" and row["comment"] == "check Hbeta wing"

    w2 = make_window(settings=AppSettings.load())
    open_and_wait(w2, w2.settings.last_archive)
    key(w2, Qt.Key.Key_Left)  # back to the annotated spectrum
    assert w2.vetting.entry.key == first
    assert w2.decision.flags() == ["bad_redshift"] and w2.decision.comment.text() == "check Hbeta wing"


def test_comment_saved_after_typing_pause_and_kept_with_a_later_decision(qtbot, make_window, demo_archive,
                                                                        open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    store, task, k = w.vetting.store, w.vetting.task_id, w.vetting._current_key()
    qtbot.keyClicks(w.decision.comment, "weak He II")
    qtbot.waitUntil(lambda: store.annotation(k, task) is not None, timeout=3000)  # saved without Enter
    assert store.annotation(k, task).comment == "weak He II"
    w.archive.table.setFocus()
    key(w, Qt.Key.Key_Y)  # decide: the decision carries the notes
    dec = store.decision(k, task)
    assert dec.decision == "YES" and dec.comment == "weak He II"
    key(w, Qt.Key.Key_Left)
    w.decision.comment.clear()
    qtbot.keyClicks(w.decision.comment, "He II clear after all")
    key(w, Qt.Key.Key_Right)  # leaving flushes the edit; notes newer than the decision win when shown
    key(w, Qt.Key.Key_Left)
    assert w.decision.comment.text() == "He II clear after all"
    assert store.notes(k, task) == ([], "He II clear after all", [])

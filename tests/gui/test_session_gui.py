"""A decision always lands on the spectrum shown, in the store of the archive shown (issue 41).

Driven with the keys a vetter presses, as the new-user trial met the faults: after an archive, an empty folder kept
the old spectrum on screen and Y stored a YES for it in the empty folder's store (and A ran the model there); Y on
a text file named ``.fits`` stored a YES; a task switch left the "decided" counter wrong; a restart or a kill lost
the task and the candidate-list queue; a second instance wrote to the same store without a word.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from speco3.gui.settings import AppSettings
from speco3.gui.vetting import store_path_for
from speco3.vetting import VettingStore
from speco3.vetting.session import SESSION_STATE

pytestmark = pytest.mark.gui


def _all_decisions(store: VettingStore) -> list:
    return [d for task in ("carbon", "cv", "gm", "ss", "wd") for d in store.decisions(task)]


def _open_empty(qtbot, w, folder) -> None:
    folder.mkdir()
    w.open_archive(folder)
    qtbot.waitUntil(lambda: w.archive_root == str(folder.resolve()) and w.index is not None, timeout=30000)


def test_an_empty_folder_after_an_archive_shows_nothing_and_takes_no_decision(qtbot, make_window, demo_archive,
                                                                              open_and_wait, key, tmp_path):
    w = make_window()
    open_and_wait(w, demo_archive)
    old_store, old_key = w.vetting.store.path, w.vetting._current_key()
    _open_empty(qtbot, w, tmp_path / "empty")
    assert w.vetting.store.path != old_store
    assert w.vetting.entry is None and w.vetting.spectrum is None  # the old spectrum is gone from the screen
    assert w.viewer.pages.currentWidget() is w.viewer.notice
    assert w.decision.position.text().startswith("Queue is empty · 0 decided")  # the shot showed "0 of 20"
    assert not any(b.isEnabled() for b in w.decision.buttons.values()) and not w.decision.mark_button.isEnabled()
    key(w, Qt.Key.Key_Y)
    assert "nothing decided" in w.statusBar().currentMessage()
    key(w, Qt.Key.Key_A)  # the agent key: no run on a spectrum of another archive
    assert w.agent.interactive_job is None
    assert _all_decisions(w.vetting.store) == [] and w.vetting.store.model_verdicts("cv") == []
    with VettingStore(old_store, readonly=True) as store:
        assert store.decision(old_key, "cv") is None  # nor in the old archive's store
    w.close()


def test_y_on_a_text_file_named_fits_stores_nothing(qtbot, make_window, demo_archive, open_and_wait, key):
    (demo_archive / "aaa-notes.fits").write_text("observing notes, not a FITS file\n")
    w = make_window()
    open_and_wait(w, demo_archive)
    w.table_model.fetch_all()
    row = next(r for r in range(w.table_model.loaded_rows()) if w.table_model.entry(r).file_name == "aaa-notes.fits")
    w.vetting.go_to(row)
    assert w.vetting.entry.file_name == "aaa-notes.fits" and w.vetting.spectrum is None
    for k in (Qt.Key.Key_Y, Qt.Key.Key_N, Qt.Key.Key_Return, Qt.Key.Key_A):
        key(w, k)
    assert "not readable" in w.statusBar().currentMessage()
    assert _all_decisions(w.vetting.store) == [] and w.agent.interactive_job is None
    assert w.vetting.row == row  # refused decisions do not advance
    assert not w.decision.buttons["YES"].isEnabled() and not w.decision.comment.isEnabled()
    key(w, Qt.Key.Key_Right)  # the vetter moves on and decides the next one
    assert w.decision.buttons["YES"].isEnabled() and w.decision.comment.isEnabled()
    key(w, Qt.Key.Key_Y)
    assert len(_all_decisions(w.vetting.store)) == 1


def test_a_task_switch_keeps_the_decided_counter(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    for k in (Qt.Key.Key_Y, Qt.Key.Key_N, Qt.Key.Key_U):
        key(w, k)
    assert "· 3 decided" in w.decision.position.text()
    box = w.agent_panel.task_box
    box.setCurrentIndex(box.findData("wd"))
    assert w.vetting.task_id == "wd"
    assert "· 0 decided" in w.decision.position.text()  # the trial saw "3 decided" until the next move
    key(w, Qt.Key.Key_Y)
    assert "· 1 decided" in w.decision.position.text()
    box.setCurrentIndex(box.findData("cv"))
    assert "· 3 decided" in w.decision.position.text()


def _arrange(qtbot, w, demo_archive) -> str:
    """Task wd, the p(YES) order, the undecided filter, the demo candidate list, the third spectrum of it."""
    box = w.agent_panel.task_box
    box.setCurrentIndex(box.findData("wd"))
    w.archive.state.setCurrentText("undecided")
    w.archive.triage.setCurrentIndex(w.archive.triage.findData("uncertainty"))
    assert w.load_candidates(demo_archive / "candidates.vot") == 14
    w.vetting.go_to(2)
    return w.vetting.entry.key


def _assert_arranged(w, demo_archive, shown: str) -> None:
    assert w.agent_panel.task_id() == "wd" and w.vetting.task_id == "wd"
    assert w.archive.state.currentText() == "undecided" and w.table_model.filters.state == "undecided"
    assert w.archive.triage.currentData() == "uncertainty" and w.table_model.triage_order == "uncertainty"
    assert w.table_model.is_candidate_list and w.table_model.loaded_rows() == 14
    assert w.vetting.entry.key == shown and w.vetting.row == 2


def test_a_restart_brings_back_the_task_order_filter_and_candidate_list(qtbot, make_window, demo_archive,
                                                                       open_and_wait):
    w = make_window()
    open_and_wait(w, demo_archive)
    shown = _arrange(qtbot, w, demo_archive)
    w.close()
    w2 = make_window(settings=AppSettings.load())
    open_and_wait(w2, w2.settings.last_archive)
    _assert_arranged(w2, demo_archive, shown)


def test_what_a_kill_leaves_on_disk_brings_the_session_back(qtbot, make_window, demo_archive, open_and_wait):
    """Read while the window still runs (a kill -9 now would leave exactly this): the task in the settings file,
    the order, filter, candidate list and position in the store."""
    w = make_window()
    open_and_wait(w, demo_archive)
    shown = _arrange(qtbot, w, demo_archive)
    qtbot.wait(700)  # the position is written once the vetter pauses
    assert AppSettings.load().task == "wd"
    with VettingStore(w.vetting.store.path, readonly=True) as store:
        saved = store.get_state(SESSION_STATE)
        assert store.get_state("current_key") == shown
    assert saved["order"] == "uncertainty" and saved["filters"]["state"] == "undecided"
    assert saved["candidates"] == str((demo_archive / "candidates.vot").resolve())


def _hold_writer_lock(store_path) -> subprocess.Popen:
    """Another Spec-o3 process holding the store's writer lock (as a second app instance does)."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom speco3.vetting.writer_lock import WriterLock\n"
            "lock = WriterLock(Path(sys.argv[1]))\nassert lock.acquire() is None\nprint('held', flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(store_path)], stdout=subprocess.PIPE, text=True,
                            env=os.environ.copy())
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_instance_is_told_and_browses_read_only(qtbot, make_window, demo_archive, open_and_wait, key):
    store_path = store_path_for(demo_archive, AppSettings.load().resolved_data_folder())
    VettingStore(store_path).close()  # the other instance made the store
    other = _hold_writer_lock(store_path)
    try:
        w = make_window()
        open_and_wait(w, demo_archive)
        assert w.vetting.store.readonly
        assert "read-only" in w.windowTitle()
        told = w.vetting.session.refusal()
        assert told is not None and f"process {other.pid}" in told
        shown = w.vetting._current_key()
        key(w, Qt.Key.Key_Y)
        key(w, Qt.Key.Key_A)
        assert "read-only" in w.statusBar().currentMessage()
        key(w, Qt.Key.Key_Right)  # browsing works
        assert w.vetting.row == 1 and w.vetting.spectrum is not None
        assert _all_decisions(w.vetting.store) == [] and w.agent.interactive_job is None
        other.send_signal(signal.SIGKILL)  # the other instance is killed: its lock goes with it
        other.wait(10)
        w.open_archive(demo_archive)  # opened again: this window now writes
        qtbot.waitUntil(lambda: w.vetting.store is not None and not w.vetting.store.readonly
                        and w.vetting.entry is not None, timeout=30000)
        assert not w.vetting.store.readonly and "read-only" not in w.windowTitle()
        w.vetting.go_to(0)
        key(w, Qt.Key.Key_Y)
        assert w.vetting.store.decision(shown, "cv").decision == "YES"
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(10)


def _writing_controls(w) -> dict[str, bool]:
    """Whether each control that writes for the spectrum shown (or runs the model on it) is enabled."""
    d = w.decision
    controls = {b.objectName(): b for b in (*d.buttons.values(), *d.flag_boxes.values(), d.comment, d.mark_button,
                                            d.fit_z, d.fit_z_from_markers, d.fit_conf, d.fit_class, d.fit_subclass)}
    controls |= {"acceptButton": d.accept_button, "modelWindows": d.model_windows_button,
                 "runButton": w.agent_panel.run_button}
    out = {name: widget.isEnabled() for name, widget in controls.items()}
    out["markEvidenceAction"] = w.mark_action.isEnabled()
    return out


def test_nothing_shown_disables_every_decision_and_agent_control(qtbot, make_window, demo_archive, open_and_wait,
                                                                  fake_models, tmp_path):
    """Issue #41: with nothing shown (the start screen, an empty folder opened first, an unreadable file) the
    decision and agent buttons are disabled, as the session refuses them; a readable spectrum enables them."""
    w = make_window()  # the start screen: a new user saw YES/NO/UNSURE and Run agent enabled there
    assert w.stack.currentIndex() == 0 and w.vetting.entry is None
    assert not any(_writing_controls(w).values()), _writing_controls(w)
    _open_empty(qtbot, w, tmp_path / "empty")  # an empty folder as the first archive
    assert w.vetting.store is not None and w.vetting.entry is None
    assert not any(_writing_controls(w).values()), _writing_controls(w)
    (demo_archive / "aaa-notes.fits").write_text("observing notes, not a FITS file\n")
    open_and_wait(w, demo_archive)
    w.table_model.fetch_all()
    row = next(r for r in range(w.table_model.loaded_rows()) if w.table_model.entry(r).file_name == "aaa-notes.fits")
    w.vetting.go_to(row + 1)
    enabled = _writing_controls(w)
    assert enabled["decideYES"] and enabled["comment"] and enabled["vetterZ"] and enabled["runButton"], enabled
    w.vetting.go_to(row)  # an unreadable file selected
    assert w.vetting.spectrum is None
    assert not any(_writing_controls(w).values()), _writing_controls(w)


#: Menu entries that need an archive, a store, a writable store or a readable spectrum shown.
NEEDING = ("Use the app's own store", "Load candidate list (CSV, FITS, VOTable)…", "Use the filtered table as the queue",
           "Audit the rest (audit sample: may I stop?)", "Batch pre-screen the queue", "Run on this spectrum (A)")


def _moves(w) -> dict[str, bool]:
    """Whether Previous, Next, the export entries and the menu entries of `NEEDING` are enabled."""
    from PySide6.QtWidgets import QPushButton

    out = {name: w.decision.findChild(QPushButton, f"{name}Button").isEnabled() for name in ("prev", "next")}
    for menu in (a.menu() for a in w.menuBar().actions()):
        for act in menu.actions():
            if act.text() in NEEDING or menu.title() == "&Export":
                out[act.text()] = act.isEnabled()
    return out


def test_navigation_and_menu_entries_are_greyed_while_they_cannot_act(qtbot, make_window, demo_archive,
                                                                       open_and_wait, key, fake_models, tmp_path):
    """Previous / Next stayed enabled on the start screen (and Export asked for a file name, then said "open an
    archive first"): what cannot act is greyed by the mechanism that greys the decision controls, and the keys
    say why; an archive with spectra enables them, the queue's start and end grey Previous and Next."""
    w = make_window()
    assert w.stack.currentIndex() == 0 and w.vetting.entry is None
    moves = _moves(w)
    assert len(moves) >= len(NEEDING) + 3 and not any(moves.values()), moves
    key(w, Qt.Key.Key_Right)
    assert w.statusBar().currentMessage() == "open an archive first: nothing to move to"
    assert w.vetting.entry is None
    _open_empty(qtbot, w, tmp_path / "empty")  # an archive without spectra: a store, nothing to move to
    moves = _moves(w)
    assert [k for k, v in moves.items() if not v] == ["prev", "next", "Run on this spectrum (A)"], moves
    key(w, Qt.Key.Key_Right)
    assert w.statusBar().currentMessage() == "the queue is empty (see the filters)"
    open_and_wait(w, demo_archive)
    assert w.vetting.row == 0
    moves = _moves(w)
    assert not moves["prev"] and all(v for k, v in moves.items() if k != "prev"), moves
    key(w, Qt.Key.Key_Right)
    assert w.vetting.row == 1 and all(_moves(w).values()), _moves(w)
    w.vetting.go_to(w.table_model.total_hint() - 1)  # the last spectrum
    moves = _moves(w)
    assert moves["prev"] and not moves["next"], moves
    key(w, Qt.Key.Key_Right)
    assert w.statusBar().currentMessage() == "end of the queue"


#: Every viewer key (the keymap's View group and Z), as pressed: (key, modifier).
VIEW_KEYS = {"zoom_in": (Qt.Key.Key_Equal, None), "zoom_out": (Qt.Key.Key_Minus, None),
             "pan_left": (Qt.Key.Key_BracketLeft, None), "pan_right": (Qt.Key.Key_BracketRight, None),
             "reset_zoom": (Qt.Key.Key_R, None), "smooth_more": (Qt.Key.Key_D, None),
             "smooth_less": (Qt.Key.Key_S, None), "toggle_frame": (Qt.Key.Key_F, None),
             "toggle_lines": (Qt.Key.Key_L, None), "toggle_model": (Qt.Key.Key_M, None),
             "z_from_line": (Qt.Key.Key_Z, None),
             "y_zoom_in": (Qt.Key.Key_Equal, Qt.KeyboardModifier.ControlModifier),
             "y_zoom_out": (Qt.Key.Key_Minus, Qt.KeyboardModifier.ControlModifier),
             "y_up": (Qt.Key.Key_Up, Qt.KeyboardModifier.ControlModifier),
             "y_down": (Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier),
             "y_auto": (Qt.Key.Key_R, Qt.KeyboardModifier.ShiftModifier)}


def _view_state(w) -> tuple:
    v = w.viewer
    return v.frame, v.smooth_index, v.show_lines, v.show_model, v.y_manual, w.decision.fit_z.text()


def test_viewer_keys_with_nothing_to_view_say_why_and_do_nothing(qtbot, make_window, demo_archive, open_and_wait,
                                                                 key, caplog):
    """Every viewer key on the start screen and on an unreadable file: no exception (pytest-qt fails the test on one
    raised in a Qt slot or event filter), no error logged, the view unchanged, and one line in the status bar saying
    why, as the arrow keys and the decision keys do there."""
    from speco3.gui.keymap import ACTIONS

    assert set(VIEW_KEYS) == {a.name for a in ACTIONS if a.group == "View"} | {"z_from_line"}
    w = make_window()
    before = _view_state(w)
    for action, (k, mod) in VIEW_KEYS.items():  # the start screen
        w.statusBar().clearMessage()
        key(w, k, mod)
        want = "open an archive first: " + ("no line to measure" if action == "z_from_line" else "nothing to view")
        assert w.statusBar().currentMessage() == want, action
    assert _view_state(w) == before
    (demo_archive / "aaa-notes.fits").write_text("observing notes, not a FITS file\n")
    open_and_wait(w, demo_archive)
    w.table_model.fetch_all()
    row = next(r for r in range(w.table_model.loaded_rows()) if w.table_model.entry(r).file_name == "aaa-notes.fits")
    w.vetting.go_to(row)  # an unreadable file selected
    assert w.vetting.spectrum is None
    before = _view_state(w)
    for action, (k, mod) in VIEW_KEYS.items():
        w.statusBar().clearMessage()
        key(w, k, mod)
        said = w.statusBar().currentMessage()
        assert said.startswith("aaa-notes.fits: not readable (") and "\n" not in said, (action, said)
        assert said.endswith(": no line to measure" if action == "z_from_line" else ": nothing to view"), said
    assert _view_state(w) == before
    assert [r.getMessage() for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")] == []
    w.vetting.go_to(row + 1)  # a readable spectrum: the keys act
    w.statusBar().clearMessage()
    key(w, Qt.Key.Key_F)
    assert w.viewer.frame == "rest" and "nothing to view" not in w.statusBar().currentMessage()


#: The Agent menu's entries that act on a run or a batch going.
RUN_ENTRIES = ("Cancel run (Esc)", "Pause / resume batch", "Cancel batch")


def _run_entries(w) -> dict[str, bool]:
    """Whether each entry of `RUN_ENTRIES` is enabled."""
    return {act.text(): act.isEnabled() for menu in (a.menu() for a in w.menuBar().actions())
            for act in menu.actions() if act.text() in RUN_ENTRIES}


def test_cancel_and_pause_entries_are_greyed_unless_a_run_or_batch_is_going(qtbot, make_window, demo_archive,
                                                                            open_and_wait, engine_factory,
                                                                            fake_models):
    """Agent → Cancel run, Pause / resume batch and Cancel batch stayed enabled with nothing going: they follow the
    run events (an interactive run submitted until it ends or is cancelled; a batch from its start until it finishes
    or is cancelled)."""
    engine_factory.delay_s = 0.02  # runs long enough to be seen going
    w = make_window()
    assert _run_entries(w) == dict.fromkeys(RUN_ENTRIES, False)  # the start screen
    open_and_wait(w, demo_archive)
    assert _run_entries(w) == dict.fromkeys(RUN_ENTRIES, False)  # a spectrum shown, nothing going
    w.run_agent()
    assert w.agent.interactive_job is not None
    assert _run_entries(w) == {"Cancel run (Esc)": True, "Pause / resume batch": False, "Cancel batch": False}
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=30000)  # the run ends with its verdict
    assert _run_entries(w) == dict.fromkeys(RUN_ENTRIES, False)
    w.run_agent()
    qtbot.waitUntil(lambda: "continuum" in w.agent_panel.transcript.toPlainText(), timeout=20000)
    assert _run_entries(w)["Cancel run (Esc)"]
    w.agent.cancel()  # what the entry does
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=30000)
    assert _run_entries(w) == dict.fromkeys(RUN_ENTRIES, False)
    w.start_batch()
    assert w.batch.running
    assert _run_entries(w) == {"Cancel run (Esc)": False, "Pause / resume batch": True, "Cancel batch": True}
    w.toggle_batch_pause()  # paused: still a batch to resume or cancel
    assert _run_entries(w) == {"Cancel run (Esc)": False, "Pause / resume batch": True, "Cancel batch": True}
    w.toggle_batch_pause()
    w.inference.cancel_batch()  # what the entry does
    assert _run_entries(w) == dict.fromkeys(RUN_ENTRIES, False)
    qtbot.waitUntil(lambda: not w.inference.busy(), timeout=30000)  # the items in flight report back
    assert _run_entries(w) == dict.fromkeys(RUN_ENTRIES, False)
    engine_factory.delay_s = 0.0
    w.start_batch()  # what the cancelled batch left, to its end
    assert _run_entries(w)["Cancel batch"]
    qtbot.waitUntil(lambda: not w.batch.running, timeout=120000)
    assert _run_entries(w) == dict.fromkeys(RUN_ENTRIES, False)


def test_decisions_of_another_writer_reach_the_panel_and_counters(qtbot, make_window, demo_archive, open_and_wait):
    """The table followed `spectrum decide` within 2 s but the decision panel of the spectrum shown still said
    "not decided yet" and the decided counter stayed old until the vetter moved; a comment being typed is kept."""
    from speco3.vetting.records import Decision

    w = make_window()
    open_and_wait(w, demo_archive)
    shown = w.vetting._current_key()
    assert w.decision.saved.text() == "not decided yet" and "· 0 decided" in w.decision.position.text()
    with VettingStore(w.vetting.store.path) as other:  # another connection: `spec-o3 decide`, a `vet` run
        other.record_decision(Decision(spectrum_key=shown, task="cv", decision="NO", vetter="Bo"))
    qtbot.waitUntil(lambda: "· 1 decided" in w.decision.position.text(), timeout=5000)  # the 2 s poll
    assert w.decision.buttons["NO"].isChecked() and "by Bo" in w.decision.saved.text()
    # the vetter is typing a comment: the panel keeps it while another decision lands
    w.decision.comment.setFocus()
    qtbot.keyClicks(w.decision.comment, "faint")
    with VettingStore(w.vetting.store.path) as other:
        other.record_decision(Decision(spectrum_key=shown, task="cv", decision="YES", vetter="Cy"))
    w.vetting.follow_store()
    assert w.decision.comment.text() == "faint" and w.decision.buttons["NO"].isChecked()
    qtbot.keyClick(w.decision.comment, Qt.Key.Key_Escape)  # the field is left: the comment stored, the record shown
    assert w.decision.buttons["YES"].isChecked() and "by Cy" in w.decision.saved.text()
    assert w.decision.comment.text() == "faint"

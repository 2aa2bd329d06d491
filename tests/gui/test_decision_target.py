"""A decision lands on the spectrum the vetter sees: Enter in a text field, the table's arrow keys, highlights.

Driven with the keyboard exactly as the new-user trial found the faults (issue: Enter in the comment box also
accepted the model's suggestion; Down in the table moved the highlight but not the spectrum; rows stayed
highlighted after → / ←).
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from speco3.gui.archive_model import COL
from speco3.vetting.records import ModelVerdict

pytestmark = pytest.mark.gui


def _suggest(w, verdict: str = "YES") -> None:
    """Store a model verdict for the current spectrum (as a finished agent run would) and show it."""
    key = w.vetting._current_key()
    w.vetting.store.record_model_verdict(ModelVerdict(spectrum_key=key, task=w.vetting.task_id, verdict=verdict,
                                                      outcome=verdict, model_id="test-model", quant="Q4_K_M"))
    w.vetting.recordChanged.emit()
    assert w.vetting.model_suggestion().verdict == verdict


def test_enter_in_the_comment_box_saves_the_comment_and_nothing_else(qtbot, make_window, demo_archive,
                                                                     open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    store, task = w.vetting.store, w.vetting.task_id
    for _ in range(2):  # the trial saw it twice in a row
        first = w.vetting._current_key()
        _suggest(w, "YES")
        key(w, Qt.Key.Key_C)  # the comment key focuses the comment box
        assert w.decision.comment.hasFocus()
        qtbot.keyClicks(w.decision.comment, "Balmer emission, check He II")
        qtbot.keyClick(w.decision.comment, Qt.Key.Key_Return)
        assert w.vetting._current_key() == first  # still on the same spectrum
        assert store.decision(first, task) is None  # the suggestion was NOT accepted
        assert store.notes(first, task) == ([], "Balmer emission, check He II", [])
        assert not w.decision.comment.hasFocus()  # back to the keys
        key(w, Qt.Key.Key_Return)  # Enter outside the text field accepts, as the cheat sheet says
        dec = store.decision(first, task)
        assert dec.decision == "YES" and dec.comment == "Balmer emission, check He II"
        assert w.vetting._current_key() != first  # and moves on (auto-advance)


def test_enter_in_the_search_box_never_decides(qtbot, make_window, demo_archive, open_and_wait):
    w = make_window()
    open_and_wait(w, demo_archive)
    _suggest(w, "NO")
    shown = w.vetting._current_key()
    w.archive.text.setFocus()
    qtbot.keyClicks(w.archive.text, "SPECO3DEMO")
    qtbot.keyClick(w.archive.text, Qt.Key.Key_Return)
    qtbot.keyClick(w.archive.text, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)
    assert w.vetting.store.decision(shown, w.vetting.task_id) is None


def _highlighted_rows(w) -> list[int]:
    return sorted({i.row() for i in w.archive.table.selectionModel().selectedIndexes()})


def test_arrow_keys_in_the_table_load_the_row_and_decisions_go_to_it(qtbot, make_window, demo_archive,
                                                                     open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    table, model = w.archive.table, w.table_model
    w.archive.text.setText("SPECO3DEMO")  # a search, as in the trial
    w.archive.apply_filters()
    qtbot.waitUntil(lambda: w.vetting.row == 0)
    rect = table.visualRect(model.index(1, 0))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())  # click row 2
    assert w.vetting.row == 1
    key(w, Qt.Key.Key_Down)
    key(w, Qt.Key.Key_Down)
    assert table.currentIndex().row() == 3
    assert w.vetting.row == 3  # the viewer follows the highlight
    shown = model.entry(3)
    assert w.vetting.entry.key == shown.key
    assert w.viewer.spectrum is w.vetting.spectrum
    assert w.decision.position.text().startswith("Spectrum 4 of")
    key(w, Qt.Key.Key_Y)
    decisions = {d.spectrum_key: d.decision for d in w.vetting.store.decisions(w.vetting.task_id)}
    assert decisions == {f"{shown.path}#{shown.index}": "YES"}  # on the row that was shown, nothing else
    key(w, Qt.Key.Key_Up)
    assert w.vetting.row == 3 and table.currentIndex().row() == 3  # Y advanced to row 4 (index 4); Up came back
    key(w, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    assert w.vetting.row == table.currentIndex().row() == model.loaded_rows() - 1


def test_one_highlighted_row_after_next_and_previous(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    told = []  # the view repaints rows from the selection model's signals (once blocked: stale highlights)
    w.archive.table.selectionModel().selectionChanged.connect(lambda sel, desel: told.append(
        ({i.row() for i in sel.indexes()}, {i.row() for i in desel.indexes()})))
    for k, expect in ((Qt.Key.Key_Right, 1), (Qt.Key.Key_Right, 2), (Qt.Key.Key_Right, 3), (Qt.Key.Key_Left, 2)):
        key(w, k)
        assert w.vetting.row == expect
        assert _highlighted_rows(w) == [expect]
        assert w.archive.table.currentIndex().row() == expect
        assert told.pop() == ({expect}, {expect - 1 if k == Qt.Key.Key_Right else expect + 1})


def test_enter_without_a_model_verdict_decides_nothing(qtbot, make_window, demo_archive, open_and_wait, key):
    """Enter with no model verdict says so and decides nothing."""
    w = make_window()
    open_and_wait(w, demo_archive)
    shown = w.vetting._current_key()
    key(w, Qt.Key.Key_Return)
    assert w.vetting.store.decision(shown, w.vetting.task_id) is None
    assert "no model verdict" in w.statusBar().currentMessage()


class _Vetter:
    """The vetter at the "Who is vetting?" prompt: whenever it is up, types ``name`` (QTest key presses into its
    field, where the login name is offered selected) and Enter, or Escape when ``name`` is None; records what was
    shown when it came up."""

    def __init__(self, window, name: str | None):
        from PySide6.QtCore import QTimer

        self.window, self.name = window, name
        self.shown_at_prompt: list[object] = []
        self.timer = QTimer(interval=20)
        self.timer.timeout.connect(self._look)
        self.timer.start()

    def _look(self) -> None:
        from PySide6.QtTest import QTest
        from PySide6.QtWidgets import QApplication, QInputDialog, QLineEdit

        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QInputDialog) or dialog.windowTitle() != "Who is vetting?" or not dialog.isVisible():
            return
        self.shown_at_prompt.append(self.window.vetting.entry)
        field = dialog.findChild(QLineEdit)
        if self.name is None:
            QTest.keyClick(field, Qt.Key.Key_Escape)
        else:
            QTest.keyClicks(field, self.name)
            QTest.keyClick(field, Qt.Key.Key_Return)


@pytest.fixture
def with_dialogs(qapp):
    """Modal dialogs on for this test (the window factory turns them off)."""
    yield lambda: qapp.setProperty("speco3_no_dialogs", False)
    qapp.setProperty("speco3_no_dialogs", True)


@pytest.mark.parametrize("typed", ["Ann Lee", None])
def test_the_vetter_name_is_asked_on_opening_and_no_decision_key_reaches_it(qtbot, make_window, demo_archive,
                                                                           open_and_wait, key, with_dialogs, typed):
    """The name prompt came at the first decision key: Y then N typed "n" into the name field (the login name
    offered selected: the vetter became "n") and the decision waited on the dialog. It comes when the archive opens,
    before a spectrum is shown; then Y and N each store one decision on the spectrum shown, with the name typed
    (declined: the login name offered, and the setting stays unset)."""
    w = make_window()
    w.settings.vetter = ""
    offered = w.settings.vetter_name()
    with_dialogs()
    vetter = _Vetter(w, typed)
    open_and_wait(w, demo_archive)
    first, second = w.table_model.entry(0), w.table_model.entry(1)
    assert w.vetting.entry is first
    key(w, Qt.Key.Key_Y)
    assert w.vetting.entry is second
    key(w, Qt.Key.Key_N)
    vetter.timer.stop()
    assert vetter.shown_at_prompt == [None]  # asked once, with nothing shown to decide
    assert w.settings.vetter == (typed or "")
    name = typed or offered
    got = [(d.spectrum_key, d.decision, d.vetter) for d in w.vetting.store.decisions("cv")]
    assert sorted(got) == sorted([(f"{first.path}#{first.index}", "YES", name),
                                  (f"{second.path}#{second.index}", "NO", name)])


def test_an_abstention_is_shown_where_the_suggestion_is_and_enter_does_not_take_it(qtbot, make_window, demo_archive,
                                                                                   open_and_wait, key):
    """The model abstained (split evidence, 3 YES / 2 NO of 5): the decision panel says so instead of "Model suggests
    YES", the accept button is off, and Enter stores nothing; Y still decides."""
    w = make_window()
    open_and_wait(w, demo_archive)
    shown, task = w.vetting._current_key(), w.vetting.task_id
    outcomes = ["YES", "NO", "YES", "NO", "YES"]
    w.vetting.store.record_model_verdict(ModelVerdict(
        spectrum_key=shown, task=task, verdict="YES", outcome="abstained", model_id="test-model", rollouts=5,
        p_yes=0.6, agreement=0.6, abstained=True, format_failures=0, outcomes=outcomes, k_max=5, stop_reason="fixed"))
    w.vetting.recordChanged.emit()
    text = w.decision.suggestion.text()
    assert "Model abstained" in text and "split evidence, 3 YES / 2 NO" in text and "abstained: split" not in text
    assert "suggests" not in text and not w.decision.accept_button.isEnabled()
    w.table_model.invalidate_states()  # as a finished run does: the table's Model column names the abstention
    assert w.table_model.data(w.table_model.index(w.vetting.row, COL["model"])) == "abstained"
    key(w, Qt.Key.Key_Return)
    assert w.vetting.store.decision(shown, task) is None and w.vetting._current_key() == shown
    assert "the model abstained" in w.statusBar().currentMessage()
    key(w, Qt.Key.Key_Y)  # an explicit key decides
    assert w.vetting.store.decision(shown, task).decision == "YES"


def test_the_table_follows_decisions_written_by_another_process(qtbot, make_window, demo_archive, open_and_wait):
    """A decision written by another connection (`spec-o3 decide` while the app is open) reaches the table's
    Decision column within the poll, without a restart."""
    from speco3.vetting import Decision, VettingStore

    w = make_window()
    open_and_wait(w, demo_archive)
    m, task = w.table_model, w.vetting.task_id
    key = w.vetting._current_key()
    row = w.vetting.row
    assert m.data(m.index(row, COL["decision"])) in (None, "")
    with VettingStore(w.vetting.store.path) as other:
        other.record_decision(Decision(key, task, "NO", vetter="cli"))
    qtbot.waitUntil(lambda: m.data(m.index(row, COL["decision"])) == "NO", timeout=5000)

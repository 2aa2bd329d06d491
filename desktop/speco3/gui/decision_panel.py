"""The decision panel: YES / NO / UNSURE, issue flags, comment, the model's suggestion, queue position, cheat sheet.

The panel holds no state of record: it shows what the main window tells it (the stored decision of the current
spectrum, the latest model verdict) and emits what the vetter asks for. The main window writes every decision
to the store at once and answers with `show_saved`. Flags are emitted as they are ticked; a comment being typed
is emitted (`notesEdited`) after a short pause and at once by `flush_notes` (called before the spectrum changes),
so notes are stored even when the vetter moves on without deciding or pressing Enter.
"""

from __future__ import annotations

import html
import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from speco3.gui.keymap import FLAG_ACTIONS, Keymap
from speco3.vetting.records import FLAG_LABELS

log = logging.getLogger(__name__)

DECISIONS = ("YES", "NO", "UNSURE")
NOTES_PAUSE_MS = 700  # a comment being typed is saved after this pause (and on leaving the spectrum)
_STYLE = {"YES": "background:#d4edda", "NO": "background:#f8d7da", "UNSURE": "background:#fff3cd"}


class DecisionPanel(QWidget):
    """See module doc.

    Signals
    -------
    decided(decision) ; acceptModel() ; flagsChanged(list) ; commentChanged(str) ; navigate(step) ;
    notesEdited(flags, comment) -- the comment was edited (after a pause, or flushed)
    """

    decided = Signal(str)
    acceptModel = Signal()
    flagsChanged = Signal(list)
    commentChanged = Signal(str)
    navigate = Signal(int)
    notesEdited = Signal(list, str)

    def __init__(self, keymap: Keymap, parent: QWidget | None = None):
        super().__init__(parent)
        self.keymap = keymap
        self.position = QLabel("No queue", objectName="queuePosition")
        self.suggestion = QLabel("Model: —", objectName="modelSuggestion", textFormat=Qt.TextFormat.RichText,
                                 wordWrap=True)  # unwrapped, a long suggestion pushed the panel past the screen
        self.accept_button = QPushButton("Accept model (Enter)", objectName="acceptButton", enabled=False)
        self.buttons: dict[str, QPushButton] = {}
        self.group = QButtonGroup(self)
        self.group.setExclusive(False)
        row = QHBoxLayout()
        for d in DECISIONS:
            b = QPushButton(f"{d} ({self._key(f'decide_{d.lower()}')})", objectName=f"decide{d}", checkable=True)
            b.clicked.connect(lambda _c=False, d=d: self.decided.emit(d))
            self.buttons[d] = b
            row.addWidget(b)
        flags_box = QGroupBox("Issue flags")
        grid = QGridLayout(flags_box)
        self.flag_boxes: dict[str, QCheckBox] = {}
        for i, (action, flag) in enumerate(FLAG_ACTIONS.items()):
            cb = QCheckBox(f"{FLAG_LABELS[flag]} ({self._key(action)})", objectName=f"flag_{flag}")
            cb.toggled.connect(self._flags_toggled)
            self.flag_boxes[flag] = cb
            grid.addWidget(cb, i // 2, i % 2)
        self.comment = QLineEdit(objectName="comment", placeholderText=f"Comment ({self._key('comment')}), Enter saves")
        self.comment.returnPressed.connect(self._comment_done)
        self._notes_timer = QTimer(self, singleShot=True, interval=NOTES_PAUSE_MS)
        self._notes_timer.timeout.connect(self.flush_notes)
        self._notes_pending = False
        self.comment.textEdited.connect(self._comment_edited)
        self.saved = QLabel("", objectName="savedStatus", wordWrap=True)
        nav = QHBoxLayout()
        prev_b = QPushButton(f"◀ Previous ({self._key('previous')})", objectName="prevButton")
        next_b = QPushButton(f"Next ({self._key('next')}) ▶", objectName="nextButton")
        prev_b.clicked.connect(lambda: self.navigate.emit(-1))
        next_b.clicked.connect(lambda: self.navigate.emit(1))
        nav.addWidget(prev_b)
        nav.addWidget(next_b)
        self.cheat = QLabel(keymap.cheat_sheet_html(), objectName="cheatSheet", textFormat=Qt.TextFormat.RichText,
                            wordWrap=True)
        self.cheat.setVisible(False)
        self.accept_button.clicked.connect(self.acceptModel)

        layout = QVBoxLayout(self)
        layout.addWidget(self.position)
        layout.addWidget(self.suggestion)
        layout.addWidget(self.accept_button)
        layout.addLayout(row)
        layout.addWidget(flags_box)
        layout.addWidget(self.comment)
        layout.addLayout(nav)
        layout.addWidget(self.saved)
        layout.addWidget(self.cheat)
        layout.addStretch(1)
        self._updating = False

    def _key(self, action: str) -> str:
        return self.keymap.keys.get(action, "?")

    # -- state shown -------------------------------------------------------------------------------------------
    def show_record(self, decision: str | None, flags: list[str], comment: str, saved_text: str = "") -> None:
        """Show the stored decision of the current spectrum (None: undecided)."""
        self._notes_timer.stop()  # an edit still pending was flushed by the owner before the record changed
        self._notes_pending = False
        self._updating = True
        for d, b in self.buttons.items():
            b.setChecked(d == decision)
            b.setStyleSheet(_STYLE[d] if d == decision else "")
        for flag, cb in self.flag_boxes.items():
            cb.setChecked(flag in flags)
        self.comment.setText(comment or "")
        self.saved.setText(saved_text)
        self._updating = False

    def show_suggestion(self, verdict: str | None, detail: str = "") -> None:
        if verdict:
            self.suggestion.setText(f"Model suggests <b>{html.escape(verdict)}</b> {html.escape(detail)}")
        else:
            self.suggestion.setText("Model: no verdict yet" + (f" ({html.escape(detail)})" if detail else ""))
        self.accept_button.setEnabled(bool(verdict))
        self.accept_button.setText(f"Accept model: {verdict} (Enter)" if verdict else "Accept model (Enter)")

    def show_position(self, row: int, total: int, decided: int | None = None, source: str = "table") -> None:
        text = f"Spectrum {row + 1} of {total}" if total else "Queue is empty"
        if decided is not None:
            text += f" · {decided} decided"
        self.position.setText(f"{text} · queue: {source}")

    def show_saved(self, text: str) -> None:
        self.saved.setText(text)

    def flags(self) -> list[str]:
        return [f for f, cb in self.flag_boxes.items() if cb.isChecked()]

    def toggle_flag(self, flag: str) -> None:
        cb = self.flag_boxes[flag]
        cb.setChecked(not cb.isChecked())

    def toggle_cheat_sheet(self) -> None:
        self.cheat.setVisible(not self.cheat.isVisible())

    def focus_comment(self) -> None:
        self.comment.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.comment.selectAll()

    # -- internal ------------------------------------------------------------------------------------------------
    def _flags_toggled(self, _checked: bool) -> None:
        if not self._updating:
            self.flagsChanged.emit(self.flags())

    def flush_notes(self) -> None:
        """Emit `notesEdited` now when a comment edit is waiting for its pause (no-op otherwise)."""
        self._notes_timer.stop()
        if self._notes_pending:
            self._notes_pending = False
            self.notesEdited.emit(self.flags(), self.comment.text())

    def _comment_edited(self, _text: str) -> None:
        self._notes_pending = True
        self._notes_timer.start()

    def _comment_done(self) -> None:
        self._notes_timer.stop()
        self._notes_pending = False
        self.commentChanged.emit(self.comment.text())
        self.comment.clearFocus()
        win = self.window()
        if win is not None:
            win.setFocus(Qt.FocusReason.OtherFocusReason)

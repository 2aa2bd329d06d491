"""The decision panel: YES / NO / UNSURE, issue flags, comment, the model's suggestion, queue position, cheat sheet.

The panel holds no state of record: it shows what the main window tells it (the stored decision of the current
spectrum, the latest model verdict) and emits what the vetter asks for. The main window writes every decision
to the store at once and answers with `show_saved`. Flags are emitted as they are ticked; a comment being typed
is emitted (`notesEdited`) after a short pause and at once by `flush_notes` (called before the spectrum changes),
so notes are stored even when the vetter moves on without deciding or pressing Enter.

The evidence list shows the wavelength windows the vetter marked (`Evidence`, observed frame), in order: each row
zooms the viewer to its window when its range is clicked, has a label field and a remove button. Marking (key
**E** or the button) is done by the main window, which knows the viewer's range, through `add_evidence`; the new
row's label field then has the focus, and Enter (or Escape, `leave_field`) gives it back to the plot. A change of
the list is emitted at once (`evidenceChanged`), a label being typed after the same pause as the comment.
"""

from __future__ import annotations

import html
import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QDoubleValidator
from PySide6.QtWidgets import (
    QApplication,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from speco3.gui.keymap import FLAG_ACTIONS, Keymap
from speco3.vetting.records import FLAG_LABELS, Evidence

log = logging.getLogger(__name__)

DECISIONS = ("YES", "NO", "UNSURE")
NOTES_PAUSE_MS = 700  # a comment being typed is saved after this pause (and on leaving the spectrum)
_STYLE = {"YES": "background:#d4edda", "NO": "background:#f8d7da", "UNSURE": "background:#fff3cd"}
LABEL_CHARS = 80  # an evidence label is a short note ("Hα emission"), not a comment


class EvidenceRow(QWidget):
    """One marked window: its number, its range (click: zoom there), its label and a remove button."""

    def __init__(self, number: int, window: Evidence, parent: QWidget | None = None):
        super().__init__(parent)
        self.window_range = (window.lo, window.hi)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(4)
        self.number = QLabel(f"{number}.")
        self.range = QPushButton(f"{window.lo:g}–{window.hi:g} Å", objectName="evidenceRange", flat=True,
                                 toolTip="Zoom the plot to this window (observed frame)")
        self.label = QLineEdit(window.label, objectName="evidenceLabel", placeholderText="label, e.g. Hα emission",
                               maxLength=LABEL_CHARS)
        self.label.setMinimumWidth(60)
        self.remove = QToolButton(objectName="evidenceRemove", text="✕", toolTip="Remove this window")
        row.addWidget(self.number)
        row.addWidget(self.range)
        row.addWidget(self.label, 1)
        row.addWidget(self.remove)

    def evidence(self) -> Evidence:
        return Evidence(*self.window_range, self.label.text())


class DecisionPanel(QWidget):
    """See module doc.

    Signals
    -------
    decided(decision) ; acceptModel() ; flagsChanged(list) ; commentChanged(str) ; navigate(step) ;
    notesEdited(flags, comment) -- the comment was edited (after a pause, or flushed) ;
    evidenceChanged(list) -- the evidence windows changed (marked, removed, a label edited: after a pause or Enter) ;
    markRequested() ; modelWindowsRequested() -- the mark / "start from the model's windows" buttons ;
    zoomRequested(lo, hi) -- an evidence window's range was clicked (observed frame) ;
    fieldLeft() -- Enter or Escape in a label field: the focus goes back to the plot
    """

    decided = Signal(str)
    acceptModel = Signal()
    flagsChanged = Signal(list)
    commentChanged = Signal(str)
    navigate = Signal(int)
    notesEdited = Signal(list, str)
    evidenceChanged = Signal(list)
    markRequested = Signal()
    modelWindowsRequested = Signal()
    markerZRequested = Signal()  # "z of the markers": the owner answers with `set_fit_z`
    zoomRequested = Signal(float, float)
    fieldLeft = Signal()

    def __init__(self, keymap: Keymap, parent: QWidget | None = None):
        super().__init__(parent)
        self.keymap = keymap
        self.position = QLabel("No queue", objectName="queuePosition", textFormat=Qt.TextFormat.PlainText)
        # may the vetter stop? (speco3.vetting.stopping: the certified recall of the likely-first order)
        self.stopping = QLabel("", objectName="stoppingLine", wordWrap=True, visible=False)
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
        self._evidence_pending = False
        self.evidence_rows: list[EvidenceRow] = []
        self.evidence_box = QGroupBox(f"Evidence windows ({self._key('mark_evidence')})", objectName="evidenceBox")
        ev_layout = QVBoxLayout(self.evidence_box)
        ev_layout.setContentsMargins(6, 4, 6, 4)
        self.evidence_hint = QLabel(f"None marked: zoom to a feature and press {self._key('mark_evidence')}.",
                                    objectName="evidenceHint", wordWrap=True)
        self.evidence_list = QVBoxLayout()
        self.evidence_list.setSpacing(2)
        self.mark_button = QPushButton(f"Mark view as evidence ({self._key('mark_evidence')})",
                                       objectName="markEvidence")
        self.model_windows_button = QPushButton("Start from the model's windows", objectName="modelWindows",
                                                enabled=False, toolTip="Add the zoom windows of the model's latest "
                                                "run, to accept, relabel or remove")
        self.mark_button.clicked.connect(self.markRequested)
        self.model_windows_button.clicked.connect(self.modelWindowsRequested)
        ev_layout.addWidget(self.evidence_hint)
        ev_layout.addLayout(self.evidence_list)
        ev_layout.addWidget(self.mark_button)
        ev_layout.addWidget(self.model_windows_button)
        # the vetter's own redshift, its confidence (0-4) and class, stored with the next decision (issue #44)
        fit_box = QGroupBox("Your redshift and class (stored with the decision)", objectName="fitBox")
        fit = QGridLayout(fit_box)
        fit.setContentsMargins(6, 4, 6, 4)
        self.fit_z = QLineEdit(objectName="vetterZ", placeholderText="z")
        self.fit_z.setValidator(QDoubleValidator(-0.1, 15.0, 6))
        self.fit_z_from_markers = QPushButton("← markers", objectName="zFromMarkers",
                                              toolTip="Take the z the line markers are drawn at (the line bar)")
        self.fit_z_from_markers.clicked.connect(self.markerZRequested)
        self.fit_conf = QComboBox(objectName="vetterZConf", toolTip="Your confidence in the redshift, 0-4 "
                                  "(as Marz's QOP and SDSS's z_conf_person)")
        self.fit_conf.addItems(["z conf —", "0", "1", "2", "3", "4"])
        self.fit_class = QLineEdit(objectName="vetterClass", placeholderText="class (QSO, CV …)", maxLength=40)
        self.fit_subclass = QLineEdit(objectName="vetterSubclass", placeholderText="subclass", maxLength=40)
        for w in (self.fit_z, self.fit_z_from_markers, self.fit_conf, self.fit_class, self.fit_subclass):
            w.setMinimumWidth(40)  # never wider than the panel's other rows
            w.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        fit.addWidget(self.fit_z, 0, 0)
        fit.addWidget(self.fit_z_from_markers, 0, 1)
        fit.addWidget(self.fit_conf, 0, 2)
        fit.addWidget(self.fit_class, 1, 0, 1, 2)
        fit.addWidget(self.fit_subclass, 1, 2)
        self.saved = QLabel("", objectName="savedStatus", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        nav = QHBoxLayout()
        self.prev_button = QPushButton(f"◀ Previous ({self._key('previous')})", objectName="prevButton")
        self.next_button = QPushButton(f"Next ({self._key('next')}) ▶", objectName="nextButton")
        self.prev_button.clicked.connect(lambda: self.navigate.emit(-1))
        self.next_button.clicked.connect(lambda: self.navigate.emit(1))
        nav.addWidget(self.prev_button)
        nav.addWidget(self.next_button)
        self.cheat = QLabel(keymap.cheat_sheet_html(), objectName="cheatSheet", textFormat=Qt.TextFormat.RichText,
                            wordWrap=True)
        self.cheat.setVisible(False)
        self.accept_button.clicked.connect(self.acceptModel)

        layout = QVBoxLayout(self)
        layout.addWidget(self.position)
        layout.addWidget(self.stopping)
        layout.addWidget(self.suggestion)
        layout.addWidget(self.accept_button)
        layout.addLayout(row)
        layout.addWidget(flags_box)
        layout.addWidget(self.comment)
        layout.addWidget(self.evidence_box)
        layout.addWidget(fit_box)
        layout.addLayout(nav)
        layout.addWidget(self.saved)
        layout.addWidget(self.cheat)
        layout.addStretch(1)
        self._updating = False
        self._writable = True
        self._suggested = False  # the model's suggestion can be accepted (`show_suggestion`)
        self._windows = False  # the model's latest run made zoom windows (`show_model_windows`)

    def _key(self, action: str) -> str:
        return self.keymap.keys.get(action, "?")

    # -- state shown -------------------------------------------------------------------------------------------
    def show_record(self, decision: str | None, flags: list[str], comment: str, saved_text: str = "",
                    evidence: list[Evidence] | tuple = (), fit: tuple = (None, None, None, None)) -> None:
        """Show the stored decision of the current spectrum (None: undecided), its notes and the vetter's z,
        confidence, class and subclass stored with it (``fit``)."""
        z, conf, cls, sub = fit
        self.fit_z.setText("" if z is None else f"{z:g}")
        self.fit_conf.setCurrentIndex(0 if conf is None else int(conf) + 1)
        self.fit_class.setText(cls or "")
        self.fit_subclass.setText(sub or "")
        self._notes_timer.stop()  # an edit still pending was flushed by the owner before the record changed
        self._notes_pending = self._evidence_pending = False
        if list(evidence) != self.evidence():
            self._set_rows(list(evidence))
        self._updating = True
        for d, b in self.buttons.items():
            b.setChecked(d == decision)
            b.setStyleSheet(_STYLE[d] if d == decision else "")
        for flag, cb in self.flag_boxes.items():
            cb.setChecked(flag in flags)
        self.comment.setText(comment or "")
        self.saved.setText(saved_text)
        self._updating = False

    def show_suggestion(self, verdict: str | None, detail: str = "", *, abstained: bool = False) -> None:
        """The model's suggestion (``verdict``), or why there is none: ``detail`` names what the run came to
        ("tie: 1 YES / 1 NO"); ``abstained``: its rollouts abstained, shown as an abstention (nothing to accept)."""
        if verdict:
            self.suggestion.setText(f"Model suggests <b>{html.escape(verdict)}</b> {html.escape(detail)}")
        elif abstained:
            self.suggestion.setText("<span style='color:#8a6d00'><b>Model abstained</b></span> — "
                                    f"{html.escape(detail)}; decide yourself (Y / N / U)")
        else:
            self.suggestion.setText("Model: no verdict" + (f" ({html.escape(detail)})" if detail else " yet"))
        self._suggested = bool(verdict)
        self.accept_button.setEnabled(self._writable and self._suggested)
        self.accept_button.setText(f"Accept model: {verdict} (Enter)" if verdict else "Accept model (Enter)")

    def show_model_windows(self, available: bool) -> None:
        """Whether the model's latest run asked for zoom windows ("Start from the model's windows" usable)."""
        self._windows = available
        self.model_windows_button.setEnabled(self._writable and available)

    def set_writable(self, writable: bool) -> None:
        """Whether anything can be written for the spectrum shown (`VettingSession.refusal` is None): without,
        every decision, flag, note, evidence and fit control is disabled (issue #41)."""
        self._writable = writable
        for w in self.writing_widgets():
            w.setEnabled(writable)
        self.accept_button.setEnabled(writable and self._suggested)
        self.model_windows_button.setEnabled(writable and self._windows)

    def set_navigable(self, back: bool, on: bool) -> None:
        """Whether Previous (``back``) and Next (``on``) have a row to move to (`VettingSession.move_refusal`)."""
        self.prev_button.setEnabled(back)
        self.next_button.setEnabled(on)

    def writing_widgets(self) -> list[QWidget]:
        """The controls that write for the spectrum shown (the accept and model-window buttons apart: they also
        need a suggestion or windows)."""
        return [*self.buttons.values(), *self.flag_boxes.values(), self.comment, self.mark_button, self.fit_z,
                self.fit_z_from_markers, self.fit_conf, self.fit_class, self.fit_subclass, *self.evidence_rows]

    def show_position(self, row: int, total: int, decided: int | None = None, source: str = "table") -> None:
        text = f"Spectrum {row + 1} of {total}" if total else "Queue is empty"
        if decided is not None:
            text += f" · {decided} decided"
        self.position.setText(f"{text} · queue: {source}")

    def show_stopping(self, text: str) -> None:
        """The stopping line (`speco3.vetting.stopping.Certificate.line`); empty hides it."""
        self.stopping.setText(text)
        self.stopping.setVisible(bool(text))

    def show_saved(self, text: str) -> None:
        self.saved.setText(text)

    def fit(self) -> tuple[float | None, int | None, str | None, str | None]:
        """The vetter's (z, confidence 0-4, class, subclass) as entered; None where left empty. Raises ValueError
        naming a z that is not a number (never read as empty)."""
        text = self.fit_z.text().strip().replace(",", ".")
        try:
            z = float(text) if text else None
        except ValueError:
            raise ValueError(f"your z {self.fit_z.text().strip()!r} is not a number") from None
        conf = self.fit_conf.currentIndex() - 1
        return (z, conf if conf >= 0 else None, self.fit_class.text().strip() or None,
                self.fit_subclass.text().strip() or None)

    def set_fit_z(self, z: float) -> None:
        self.fit_z.setText(f"{z:.5f}")

    def flags(self) -> list[str]:
        return [f for f, cb in self.flag_boxes.items() if cb.isChecked()]

    def toggle_flag(self, flag: str) -> None:
        cb = self.flag_boxes[flag]
        cb.setChecked(not cb.isChecked())

    def evidence(self) -> list[Evidence]:
        """The marked windows, in order, with their labels as typed."""
        return [row.evidence() for row in self.evidence_rows]

    def add_evidence(self, windows: list[Evidence], focus_label: bool = True) -> None:
        """Append ``windows`` to the list and emit `evidenceChanged`; the last new row's label gets the focus."""
        if not windows:
            return
        self._set_rows(self.evidence() + list(windows))
        self._emit_evidence()
        if focus_label:
            label = self.evidence_rows[-1].label
            label.setFocus(Qt.FocusReason.ShortcutFocusReason)
            label.selectAll()

    def remove_evidence(self, index: int) -> None:
        windows = self.evidence()
        del windows[index]
        self._set_rows(windows)
        self._emit_evidence()

    def leave_field(self) -> None:
        """Leave a text field of the panel (Escape): its edit is stored, the focus goes back to the plot."""
        focus = QApplication.focusWidget()
        self.flush_notes()
        if focus is not None and self.isAncestorOf(focus):
            focus.clearFocus()
        self.fieldLeft.emit()

    def editing(self) -> bool:
        """Whether the vetter is typing in the panel (a text field has the focus, or an edit waits for its pause):
        what is shown must not be replaced then."""
        focus = QApplication.focusWidget()
        typing = isinstance(focus, QLineEdit) and self.isAncestorOf(focus)
        return typing or self._notes_pending or self._evidence_pending

    def toggle_cheat_sheet(self) -> None:
        self.cheat.setVisible(not self.cheat.isVisible())

    def focus_comment(self) -> None:
        self.comment.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.comment.selectAll()

    # -- internal ------------------------------------------------------------------------------------------------
    def _flags_toggled(self, _checked: bool) -> None:
        if not self._updating:
            self.flagsChanged.emit(self.flags())

    def _set_rows(self, windows: list[Evidence]) -> None:
        """Rebuild the rows for ``windows`` (emits nothing)."""
        for old in self.evidence_rows:
            self.evidence_list.removeWidget(old)
            old.hide()
            old.deleteLater()  # by Qt, on this thread
        self.evidence_rows = []
        for i, window in enumerate(windows):
            row = EvidenceRow(i + 1, window, self.evidence_box)
            row.range.clicked.connect(lambda _c=False, w=window: self.zoomRequested.emit(w.lo, w.hi))
            row.remove.clicked.connect(lambda _c=False, r=row: self.remove_evidence(self.evidence_rows.index(r)))
            row.label.textEdited.connect(self._label_edited)
            row.label.returnPressed.connect(self._label_done)
            self.evidence_list.addWidget(row)
            self.evidence_rows.append(row)
        self.evidence_hint.setVisible(not windows)

    def _emit_evidence(self) -> None:
        self._evidence_pending = False
        self.evidenceChanged.emit(self.evidence())

    def _label_edited(self, _text: str) -> None:
        self._evidence_pending = True
        self._notes_timer.start()

    def _label_done(self) -> None:
        self._notes_timer.stop()
        self._emit_evidence()
        focus = QApplication.focusWidget()
        if focus is not None:
            focus.clearFocus()
        self.fieldLeft.emit()

    def flush_notes(self) -> None:
        """Emit what waits for its typing pause now: `evidenceChanged` for a label being typed (it stores the
        comment too), else `notesEdited` for a comment edit (no-op when nothing waits)."""
        self._notes_timer.stop()
        if self._evidence_pending:
            self._notes_pending = False
            self._emit_evidence()
        elif self._notes_pending:
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

"""The configurable keymap of the desktop app and its cheat sheet.

Actions are named; each has one default key sequence (Qt portable text, e.g. ``"Y"``, ``"Return"``,
``"Shift+Right"``). The user's overrides live in the settings (`AppSettings.keymap`). Keys are matched by an
event filter of the main window, not by QShortcut, so they never fire while the vetter types in a text field.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QKeyCombination, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import QAbstractSpinBox, QComboBox, QLineEdit, QPlainTextEdit, QTextEdit, QWidget
from shiboken6 import getCppPointer

from speco3.gui.text import esc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Action:
    name: str
    key: str
    text: str
    group: str


ACTIONS: tuple[Action, ...] = (
    Action("decide_yes", "Y", "Decision YES (is the target class)", "Decide"),
    Action("decide_no", "N", "Decision NO", "Decide"),
    Action("decide_unsure", "U", "Decision UNSURE", "Decide"),
    Action("accept_model", "Return", "Accept the model's suggestion", "Decide"),
    Action("z_from_line", "Z", "Your z from the centroid of the line in view (the marker nearest the middle names "
           "it; or drag a marker)", "Decide"),
    Action("flag_bad_spectrum", "1", "Flag: bad spectrum (artefacts, gaps)", "Flags"),
    Action("flag_bad_redshift", "2", "Flag: catalogue redshift looks wrong", "Flags"),
    Action("flag_bad_class", "3", "Flag: pipeline class looks wrong", "Flags"),
    Action("flag_interesting", "4", "Flag: interesting / follow up", "Flags"),
    Action("comment", "C", "Write a comment", "Flags"),
    Action("mark_evidence", "E", "Mark the visible wavelength window as evidence (then type its label)", "Flags"),
    Action("next", "Right", "Next spectrum", "Navigate"),
    Action("previous", "Left", "Previous spectrum", "Navigate"),
    Action("next_undecided", "Shift+Right", "Next spectrum without a decision", "Navigate"),
    Action("smooth_more", "D", "Smooth more (boxcar)", "View"),
    Action("smooth_less", "S", "Smooth less", "View"),
    Action("toggle_frame", "F", "Rest / observed frame", "View"),
    Action("toggle_lines", "L", "Show / hide line markers", "View"),
    Action("toggle_model", "M", "Show / hide the pipeline's model spectrum (SDSS files carry one)", "View"),
    Action("zoom_in", "=", "Zoom in", "View"),
    Action("zoom_out", "-", "Zoom out", "View"),
    Action("pan_left", "[", "Pan left", "View"),
    Action("pan_right", "]", "Pan right", "View"),
    Action("reset_zoom", "R", "Reset zoom (whole spectrum, automatic y-range)", "View"),
    Action("y_zoom_in", "Ctrl+=", "Flux axis: zoom in (a y-range by hand; also Shift+drag, or drag the axis)", "View"),
    Action("y_zoom_out", "Ctrl+-", "Flux axis: zoom out", "View"),
    Action("y_up", "Ctrl+Up", "Flux axis: move up", "View"),
    Action("y_down", "Ctrl+Down", "Flux axis: move down", "View"),
    Action("y_auto", "Shift+R", "Flux axis: automatic y-range again (keeps the wavelength zoom)", "View"),
    Action("run_agent", "A", "Run the agent on this spectrum", "Agent"),
    Action("cancel_agent", "Escape", "Cancel the agent run", "Agent"),
    Action("cheat_sheet", "H", "Show / hide this cheat sheet", "Help"),
)
DEFAULT_KEYS: dict[str, str] = {a.name: a.key for a in ACTIONS}
FLAG_ACTIONS = {"flag_bad_spectrum": "bad_spectrum", "flag_bad_redshift": "bad_redshift",
                "flag_bad_class": "bad_class", "flag_interesting": "interesting"}


def normalize(key: str) -> str:
    """Canonical portable text of a key sequence ("" when Qt cannot parse it)."""
    return QKeySequence(key).toString(QKeySequence.SequenceFormat.PortableText)


class Keymap:
    """Action ↔ key sequence, defaults plus overrides."""

    def __init__(self, overrides: dict[str, str] | None = None):
        self.keys: dict[str, str] = dict(DEFAULT_KEYS)
        #: What was wrong with the overrides, one sentence each (unknown actions, unparsable or conflicting keys).
        self.problems: list[str] = []
        for name, key in (overrides or {}).items():
            if name not in DEFAULT_KEYS:
                self._problem(f"unknown action {name!r} ignored")
            elif not normalize(key):
                self._problem(f"unparsable key {key!r} for {name} ignored (default {DEFAULT_KEYS[name]})")
            else:
                self.keys[name] = key
        self._index()

    @classmethod
    def from_settings(cls, overrides: dict[str, str] | None) -> Keymap:
        """A usable keymap from saved overrides: overridden actions whose key collides go back to their defaults.

        The settings dialog refuses conflicts, but ``desktop.json`` may be edited by hand or come from another
        version. See `problems` for what was dropped (the main window shows it in the status bar).
        """
        km = cls(overrides)
        while conflicts := km.conflicts():
            for key, first, second in conflicts:
                for action in (first, second):
                    if normalize(km.keys[action]) != normalize(DEFAULT_KEYS[action]):
                        other = second if action == first else first
                        km._problem(f"key {key} of {action} also bound to {other}; {action} uses its default "
                                    f"{DEFAULT_KEYS[action]}")
                        km.keys[action] = DEFAULT_KEYS[action]
            km._index()
        return km

    def _problem(self, text: str) -> None:
        log.warning("keymap: %s", text)
        self.problems.append(text)

    def _index(self) -> None:
        self._by_key = {normalize(k): a for a, k in self.keys.items()}

    def overrides(self) -> dict[str, str]:
        return {a: k for a, k in self.keys.items() if normalize(k) != normalize(DEFAULT_KEYS[a])}

    def conflicts(self) -> list[tuple[str, str, str]]:
        """(key, action, action) pairs bound to the same key."""
        seen: dict[str, str] = {}
        out = []
        for action, key in self.keys.items():
            k = normalize(key)
            if k in seen:
                out.append((k, seen[k], action))
            seen[k] = action
        return out

    def action_for(self, event: QKeyEvent) -> str | None:
        key = event.key()
        if key in (Qt.Key.Key_Shift, Qt.Key.Key_Control, Qt.Key.Key_Alt, Qt.Key.Key_Meta, Qt.Key.Key_unknown):
            return None
        mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
        found = self._by_key.get(self._text(mods, key))
        if found is None and mods & Qt.KeyboardModifier.ShiftModifier and event.text() and not event.text().isalpha():
            # Symbols typed with Shift ("?", "+") are bound without it.
            found = self._by_key.get(self._text(mods & ~Qt.KeyboardModifier.ShiftModifier, key))
        return found

    @staticmethod
    def _text(mods, key) -> str:
        seq = QKeySequence(QKeyCombination(Qt.KeyboardModifier(mods), Qt.Key(key)))
        return seq.toString(QKeySequence.SequenceFormat.PortableText)

    def cheat_sheet_html(self) -> str:
        rows, group = [], None
        for a in ACTIONS:
            if a.group != group:
                group = a.group
                rows.append(f"<tr><td colspan=2><b>{group}</b></td></tr>")
            key = QKeySequence(self.keys[a.name]).toString(QKeySequence.SequenceFormat.NativeText)
            rows.append(f"<tr><td><code>{esc(key)}</code>&nbsp;&nbsp;</td><td>{a.text}</td></tr>")  # keys from keymap.json
        return "<table>" + "".join(rows) + "</table>"


_TEXT_WIDGETS = (QLineEdit, QTextEdit, QPlainTextEdit, QAbstractSpinBox, QComboBox)


class KeyFilter(QObject):
    """Application event filter: key presses in ``window`` → ``triggered(action)``, except while typing.

    A key press that went first to a text field belongs to that field, also when the field leaves it unaccepted:
    Qt then sends the same event on to the field's parents (QLineEdit ignores Enter after ``returnPressed``, for a
    dialog's default button), and without this rule Enter in the comment box would reach the window as "accept the
    model's suggestion" (it did: the comment and then YES saved, 17 ms apart). The event is recognised by its C++
    address until the next key event starts.
    """

    triggered = Signal(str)

    def __init__(self, window, keymap: Keymap):
        super().__init__(window)
        self.window = window
        self.keymap = keymap
        self.enabled = True
        self._typed_event = 0  # address of the key press a text field received first (0: none)

    def eventFilter(self, obj, event):  # noqa: N802 - Qt override
        kind = event.type()
        if kind == QEvent.Type.KeyRelease:
            self._typed_event = 0  # the press it ends has finished its way up the parents
            return False
        if not self.enabled or kind != QEvent.Type.KeyPress:
            return False
        if not isinstance(obj, QWidget):  # the QWindow sees the event first; act on the widget it goes to
            return False
        widget = obj
        if widget.window() is not self.window:
            return False
        address = getCppPointer(event)[0]
        typing = isinstance(widget, _TEXT_WIDGETS) and not (isinstance(widget, QComboBox) and not widget.isEditable())
        if typing:
            self._typed_event = address
            if event.key() != Qt.Key.Key_Escape:
                return False
        elif address == self._typed_event:  # a text field's key press passed on to its parents: not ours
            return False
        else:
            self._typed_event = 0
        action = self.keymap.action_for(event)
        if action is None:
            return False
        self.triggered.emit(action)
        return True

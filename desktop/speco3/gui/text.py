"""Untrusted text in Qt widgets: the one place that turns a value from a file, a store, a trace, a task file, a
model's answer or a SAMP peer into something a widget shows as its characters.

Qt guesses whether a string is rich text (``Qt.AutoText``: a `QLabel`, a `QMessageBox`, every tool tip) and
renders it as HTML when it looks like markup, so a file name ``<img width=6000>.fits`` or a header value styled
as a red banner would resize or restyle the vetting screen. Widgets that show only such values are set to
``Qt.PlainText`` (`plain`, `message`); widgets that build rich text of their own escape every value with `esc`;
tool tips go through `tooltip`; pyqtgraph's line labels treat their text as a ``str.format`` template, so a label
goes through `literal` first. See docs/threat-model.md.
"""

from __future__ import annotations

import html

from PySide6 import QtGui
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget


def esc(value: object) -> str:
    """``value`` as text for a rich-text fragment: ``<``, ``>`` and ``&`` escaped (for text, not for attribute values)."""
    return html.escape(str(value), quote=False)


def tooltip(text: object) -> str:
    """A tool tip that shows ``text`` as written (line breaks kept), whatever it contains: ``text`` itself where
    Qt would show it as plain text anyway, else escaped inside a span that keeps its white space."""
    text = str(text)
    if not QtGui.Qt.mightBeRichText(text):  # QtGui's Qt namespace holds it
        return text
    return f"<span style='white-space:pre-wrap'>{esc(text)}</span>"


def literal(text: object) -> str:
    """``text`` as a ``str.format`` template that formats to itself (pyqtgraph's ``InfLineLabel`` formats its
    label with the line's value: a ``{`` in a model's zoom label would raise there)."""
    return str(text).replace("{", "{{").replace("}", "}}")


def plain(label: QLabel) -> QLabel:
    """``label`` set to show its text as plain text (returned, for use in constructors)."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def message(parent: QWidget | None, title: str, text: str,
            icon: QMessageBox.Icon = QMessageBox.Icon.Warning) -> QMessageBox:
    """A message box whose text is shown as plain text (not yet shown: ``exec()`` or ``show()`` it)."""
    box = QMessageBox(icon, title, text, QMessageBox.StandardButton.NoButton, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    return box


def question(parent: QWidget | None, title: str, text: str) -> bool:
    """A Yes/No question with ``text`` shown as plain text; True for Yes."""
    box = message(parent, title, text, QMessageBox.Icon.Question)
    box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
    return box.exec() == QMessageBox.StandardButton.Yes

"""Tasks → New task… / Edit task…: a dialog that writes a task file (`speco3.agent.tasks`) to the user task folder.

The question starts in the phrasing the model was trained with (`question_for` the class name) and follows the
class name until the user edits it; the indicators are one per line; the lines the viewer marks are a table (name,
rest wavelength in vacuum Å, kind), filled from the known line list (`speco3.gui.lines.known_lines`); an adapter
file is optional. A task given as its whole text verbatim (a file with ``text``) is edited as that text, in place
of the question and indicators, and saved so, with its other fields. The preview shows `Task.text`, the text the
model sees.

Every change is validated through `task_from_dict` (and the adapter's header is read): each bad field is found (a
bad field is replaced by a valid stand-in and the mapping validated again, so the rules stay in one home), but a
field is outlined and its error named under the form only once the user has edited it, or after Save was pressed:
a new task's empty form shows no error. Save refuses a form with a bad field and writes nothing then. Laid out for
a 1366×768 screen.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from speco3.agent.tasks import (
    DEFAULT_OUTPUT_FORMAT,
    LINE_KINDS,
    Line,
    Task,
    check_task_adapter,
    question_for,
    save_task_file,
    task_from_dict,
    task_to_dict,
    user_task_dir,
)
from speco3.errors import TaskError

_FIELD_RE = re.compile(r"field '([a-z_]+)")
_BAD_STYLE = "border: 2px solid #c0392b"
# a valid value for each field `task_from_dict` checks: a bad field is replaced by it to find the next bad one
_STAND_IN: dict[str, Any] = {"id": "x", "target_class": "x", "question": "x", "text": "x", "primary_indicators": [],
                             "secondary_indicators": [], "output_format": DEFAULT_OUTPUT_FORMAT, "lines": [],
                             "lora": None}


class TaskEditor(QDialog):
    """See module doc. ``task``: the task to edit (None: a new one); ``folder``: where Save writes (default: the
    user task folder). Emits ``saved(task)`` after writing; ``saved_path`` is the file written."""

    saved = Signal(object)

    def __init__(self, known: tuple[Line, ...], task: Task | None = None, folder: str | Path | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("taskEditor")  # (a super().__init__ keyword is not seen by the PySide6 mypy plugin)
        self.setWindowTitle("Edit task" if task is not None else "New task")
        self.folder = Path(folder) if folder is not None else user_task_dir()
        self.known = known
        self.original_id = task.id if task is not None else None
        self.saved_path: Path | None = None
        self._extra: dict[str, Any] = dict(task.extra) if task is not None else {}
        self._output_format = task.output_format if task is not None else DEFAULT_OUTPUT_FORMAT
        self.verbatim = task is not None and task.verbatim_text is not None  # edited and saved as its ``text``
        # a text-form file's fields that its text stands in for, kept as the file had them
        self._kept: dict[str, Any] = {}
        if task is not None and task.verbatim_text is not None:
            lines = task.verbatim_text.splitlines()
            if task.question != (lines[0] if lines else ""):
                self._kept["question"] = task.question
            for key, items in (("primary_indicators", task.primary_indicators),
                               ("secondary_indicators", task.secondary_indicators)):
                if items:
                    self._kept[key] = list(items)
            if task.output_format != DEFAULT_OUTPUT_FORMAT:
                self._kept["output_format"] = task.output_format
        self._touched: set[str] = set()  # the fields the user has edited: their errors are shown
        self._show_all = False  # Save was pressed: every error is shown

        self.id_edit = QLineEdit(objectName="taskId", placeholderText="e.g. be (lower case, digits, - or _)")
        self.class_edit = QLineEdit(objectName="taskClass", placeholderText="e.g. Be Star")
        self.question = QPlainTextEdit(objectName="taskQuestion")
        self.question.setFixedHeight(46)
        self.reset_question = QPushButton("Trained phrasing", objectName="resetQuestion",
                                          toolTip="the question sentence as the model was trained to read it")
        self.primary = QPlainTextEdit(objectName="primaryIndicators",
                                      placeholderText="one indicator per line: the features that decide the class")
        self.secondary = QPlainTextEdit(objectName="secondaryIndicators",
                                        placeholderText="one indicator per line: supporting features")
        for w in (self.primary, self.secondary):
            w.setFixedHeight(78)
        self.text_edit = QPlainTextEdit(objectName="taskText",
                                        placeholderText="the whole task text the model reads, verbatim")
        self.text_edit.setMinimumHeight(210)
        self.lines = QTableWidget(0, 3, objectName="taskLines")
        self.lines.setHorizontalHeaderLabels(["Line", "Rest λ (vacuum Å)", "Kind"])
        self.lines.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.lines.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.lines.verticalHeader().setDefaultSectionSize(24)
        self.lines.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.lines.setMinimumHeight(150)
        self.known_box = QComboBox(objectName="knownLines")
        for ln in known:
            self.known_box.addItem(f"{ln.name} — {ln.wavelength:.2f} Å ({ln.kind})", ln)
        self.add_known = QPushButton("Add", objectName="addKnownLine")
        self.add_empty = QPushButton("New row", objectName="addLineRow")
        self.remove_line = QPushButton("Remove", objectName="removeLine")
        self.adapter = QLineEdit(objectName="taskAdapter", placeholderText="optional: LoRA adapter .gguf[:SCALE]")
        self.browse = QPushButton("Browse…", objectName="browseAdapter")
        self.preview = QPlainTextEdit(objectName="taskPreview", readOnly=True)
        self.preview.setMinimumWidth(420)
        self.error = QLabel("", objectName="taskError", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        self.error.setStyleSheet("color: #c0392b")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)

        form = QFormLayout()
        form.addRow("Id", self.id_edit)
        form.addRow("Class name", self.class_edit)
        qrow = QHBoxLayout()
        qrow.addWidget(self.question, 1)
        qrow.addWidget(self.reset_question, 0, Qt.AlignmentFlag.AlignTop)
        form.addRow("Question", qrow)
        form.addRow("Primary", self.primary)
        form.addRow("Secondary", self.secondary)
        form.addRow("Task text", self.text_edit)
        for row in (qrow, self.primary, self.secondary):  # a text-form task: its text in place of these
            form.setRowVisible(row, not self.verbatim)
        form.setRowVisible(self.text_edit, self.verbatim)
        lrow = QHBoxLayout()
        lrow.addWidget(self.known_box, 1)
        lrow.addWidget(self.add_known)
        lrow.addWidget(self.add_empty)
        lrow.addWidget(self.remove_line)
        lines_box = QVBoxLayout()
        lines_box.addWidget(self.lines, 1)
        lines_box.addLayout(lrow)
        form.addRow("Lines to mark", lines_box)
        arow = QHBoxLayout()
        arow.addWidget(self.adapter, 1)
        arow.addWidget(self.browse)
        form.addRow("Adapter", arow)
        left = QWidget()
        left.setLayout(form)
        right = QVBoxLayout()
        right.addWidget(QLabel("What the model reads (after the image):"))
        right.addWidget(self.preview, 1)
        body = QHBoxLayout()
        body.addWidget(left, 3)
        body.addLayout(right, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        self.resize(1180, 640)

        self._fields: dict[str, QWidget] = {"id": self.id_edit, "target_class": self.class_edit,
                                            "question": self.question, "primary_indicators": self.primary,
                                            "secondary_indicators": self.secondary, "lines": self.lines,
                                            "lora": self.adapter, "output_format": self.preview,
                                            "text": self.text_edit}
        if task is not None:
            self._fill(task)
        self._auto_question = task is None or self.question.toPlainText() == question_for(self.class_edit.text())
        self.class_edit.textChanged.connect(self._class_edited)  # first: the question follows before validation
        edits: tuple[tuple[str, QLineEdit | QPlainTextEdit], ...] = (
            ("id", self.id_edit), ("target_class", self.class_edit), ("lora", self.adapter),
            ("question", self.question), ("primary_indicators", self.primary),
            ("secondary_indicators", self.secondary), ("text", self.text_edit))
        for name, edit in edits:
            edit.textChanged.connect(lambda *_a, name=name: self._edited(name))
        self.question.textChanged.connect(self._question_edited)
        self.reset_question.clicked.connect(self._reset_question)
        self.add_known.clicked.connect(lambda: self._add_row(self.known_box.currentData()))
        self.add_empty.clicked.connect(lambda: self._add_row(None))
        self.remove_line.clicked.connect(self._remove_lines)
        self.browse.clicked.connect(self._browse)
        self.lines.itemChanged.connect(lambda *_a: self._edited("lines"))
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        self.update_preview()

    # -- content -------------------------------------------------------------------------------------------------
    def _fill(self, task: Task) -> None:
        d = task_to_dict(task, self.folder)
        self.id_edit.setText(task.id)
        self.class_edit.setText(task.target_class)
        self.question.setPlainText(task.question)
        self.primary.setPlainText("\n".join(task.primary_indicators))
        self.secondary.setPlainText("\n".join(task.secondary_indicators))
        self.text_edit.setPlainText(task.verbatim_text or "")
        for ln in task.lines:
            self.add_line(ln)
        self.adapter.setText(d.get("lora", ""))

    def _edited(self, name: str) -> None:
        """The user changed field ``name``: from now on its errors are shown."""
        self._touched.add(name)
        self.update_preview()

    def _add_row(self, line: Line | None) -> None:
        self.add_line(line)
        self._edited("lines")

    def add_line(self, line: Line | None) -> None:
        """Append a row: ``line``'s name, wavelength and kind, or an empty one to fill (not an edit of the user's:
        see `_add_row`)."""
        self.lines.blockSignals(True)
        r = self.lines.rowCount()
        self.lines.insertRow(r)
        self.lines.setItem(r, 0, QTableWidgetItem(line.name if line else ""))
        self.lines.setItem(r, 1, QTableWidgetItem(f"{line.wavelength:.2f}" if line else ""))
        kind = QComboBox()
        kind.addItems(LINE_KINDS)
        kind.setCurrentText(line.kind if line else "line")
        kind.currentIndexChanged.connect(lambda *_a: self._edited("lines"))
        self.lines.setCellWidget(r, 2, kind)
        self.lines.blockSignals(False)
        self.update_preview()

    def _remove_lines(self) -> None:
        for r in sorted({i.row() for i in self.lines.selectedIndexes()}, reverse=True):
            self.lines.removeRow(r)
        self._edited("lines")

    def _class_edited(self, text: str) -> None:
        if self._auto_question:
            self.question.blockSignals(True)
            self.question.setPlainText(question_for(text))
            self.question.blockSignals(False)

    def _question_edited(self) -> None:
        text = self.question.toPlainText()
        self._auto_question = not text.strip() or text == question_for(self.class_edit.text())

    def _reset_question(self) -> None:
        self.question.setPlainText(question_for(self.class_edit.text()))
        self._auto_question = True

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "LoRA adapter", str(self.folder), "GGUF adapters (*.gguf)")
        if path:
            self.adapter.setText(path)

    @staticmethod
    def _number(text: str) -> float | str:
        try:
            return float(text.strip().replace(",", "."))
        except ValueError:
            return text  # task_from_dict names the bad row

    def data(self) -> dict[str, Any]:
        """The task mapping the form holds (what Save validates and writes)."""
        rows = []
        for r in range(self.lines.rowCount()):
            name, wl = self.lines.item(r, 0), self.lines.item(r, 1)
            kind = self.lines.cellWidget(r, 2)
            rows.append({"name": name.text().strip() if name else "",
                         "wavelength": self._number(wl.text() if wl else ""),
                         "kind": kind.currentText() if isinstance(kind, QComboBox) else "line"})
        out: dict[str, Any] = {**self._extra, "id": self.id_edit.text().strip(),
                               "target_class": self.class_edit.text().strip()}
        if self.verbatim:  # the text as typed (verbatim), the fields the file had beside it
            out |= {**self._kept, "text": self.text_edit.toPlainText(), "lines": rows}
        else:
            out |= {"question": self.question.toPlainText().strip(),
                    "primary_indicators": [s.strip() for s in self.primary.toPlainText().splitlines() if s.strip()],
                    "secondary_indicators": [s.strip() for s in self.secondary.toPlainText().splitlines()
                                             if s.strip()],
                    "output_format": self._output_format, "lines": rows}
        if self.adapter.text().strip():
            out["lora"] = self.adapter.text().strip()
        return out

    # -- validation ----------------------------------------------------------------------------------------------
    def errors(self) -> tuple[dict[str | None, str], Task | None]:
        """Every bad field of the form with its message (in the order `task_from_dict` checks them; None: an error
        that names no field), and the task when there is none."""
        data = self.data()
        where = f"{self.folder / (data['id'] or '?')}.json"
        found: dict[str | None, str] = {}
        while True:
            try:
                task = task_from_dict(data, where, self.folder)
            except TaskError as exc:
                m = _FIELD_RE.search(str(exc))
                name = m.group(1) if m else None
                if name in found or name not in _STAND_IN:  # cannot be stood in for: the last one to find
                    found.setdefault(name, str(exc))
                    return found, None
                found[name] = str(exc)
                data = {**data, name: _STAND_IN[name]}
                continue
            break
        if "lora" not in found:
            try:
                check_task_adapter(task)
            except TaskError as exc:
                found["lora"] = str(exc)
        return found, None if found else task

    def _mark(self, errors: dict[str | None, str]) -> None:
        """Outline the widgets of the bad fields the user edited (all after Save) and name their errors."""
        shown = {name: msg for name, msg in errors.items() if self._show_all or name in self._touched}
        for name, w in self._fields.items():
            w.setStyleSheet(_BAD_STYLE if name in shown else "")
        prefix = f"{self.folder}"
        self.error.setText("\n".join(msg.split(": ", 1)[1] if msg.startswith(prefix) else msg
                                     for msg in shown.values()))

    def error_field(self) -> str | None:
        """The field the first error shown names (None when none is shown)."""
        m = _FIELD_RE.search(self.error.text())
        return m.group(1) if m else None

    def update_preview(self, *_args: object) -> None:
        errors, task = self.errors()
        self._mark(errors)
        if task is not None:
            self.preview.setPlainText(task.text)

    def save(self) -> None:
        """Validate and write ``<id>.json`` in the folder; with a bad field, mark every one and keep the dialog
        open."""
        self._show_all = True
        errors, task = self.errors()
        self._mark(errors)
        if task is None:
            return
        data = self.data()
        try:
            path, task = save_task_file(data, self.folder, force=data["id"] == self.original_id)
        except TaskError as exc:
            self._mark({None: str(exc)})
            return
        self.saved_path = path
        self.saved.emit(task)
        self.accept()


__all__ = ["TaskEditor"]

"""The agent panel: pick task and model, run, watch the reasoning stream in, click zooms, read the verdict.

The transcript shows the model's text readable (`speco3.agent.readable`: "Thinking: …", "→ asks to zoom in on …",
"Answer: YES"), as plain text; the raw text with its markup stays in the trace.

The panel is a view of what `InferenceThread` reports (the run service's events): tokens are appended to the live
transcript as they arrive; each tool call adds a thumbnail (label, range) to the zoom strip and a link in the transcript; clicking either
emits ``zoomRequested(lo, hi, label)`` so the main plot shows that rest-frame window with the region highlighted.
Without an installed model the panel explains how to get one; the demo archive offers a scripted session that is
labelled as such in the panel, the transcript and the verdict.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap, QStandardItemModel, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from speco3.agent.adaptive import STOP_FIXED, describe_use
from speco3.agent.eta import format_eta
from speco3.agent.readable import ReadableStream, readable
from speco3.agent.steps import AssistantStep, Step, ToolStep, VerdictStep
from speco3.agent.tasks import NO_LORA, Task
from speco3.agent.trace import Trace
from speco3.engine.base import LoraAdapter
from speco3.engine.choice import DEMO, SCRIPTED_LABEL, ModelChoice
from speco3.errors import TaskError
from speco3.gui.text import esc, tooltip
from speco3.vetting.runs import RunInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelEntry:
    """One entry of the model box: the typed model choice (`speco3.engine.choice`), its text, and an adapter
    that the entry always runs with (the store's adapters made for the model; None: a plain model entry)."""

    choice: ModelChoice
    text: str
    adapter: str | None = None


#: Item-data role of the model box holding an entry's adapter choice (`AppSettings.lora`): "" for a plain model
#: entry (the task's own adapter when it has one, else none), "none" for "base only", else the adapter's path.
LORA_ROLE = Qt.ItemDataRole.UserRole + 1
#: Item-data role of the model box holding an entry's tool tip as plain text (the box's own tip joins it).
TIP_ROLE = Qt.ItemDataRole.UserRole + 2
#: What a model box entry adds when the task has an adapter of its own: it runs with it, or explicitly without.
FROM_TASK = " + {name} (from the task)"
BASE_ONLY = ", base only (without the task's adapter)"
NO_MODEL_HELP = (
    "<b>No Spec-o3 model installed</b> — everything else works. Get one: <code>spec-o3 models pull spec-o3-7b</code> "
    "on a connected machine (then copy the data folder), <code>spec-o3 models import TEXT.gguf MMPROJ.gguf</code>, "
    "or <code>spec-o3 convert CHECKPOINT_DIR</code>; or <i>Models → Model manager…</i>."
)
_VERDICT_STYLE = {"YES": "color:#1d7f36", "NO": "color:#b32d2d"}


def rollout_text(trace: Trace) -> str:
    """A stored rollout as its tab shows it: what the model wrote, each tool turn's window, the outcome."""
    parts = []
    for step in trace.steps:
        if isinstance(step, AssistantStep):
            parts.append(readable(step.text))
        elif isinstance(step, ToolStep):
            rng = step.wavelength_range
            parts.append(f"▶ zoom {step.label or ''} {rng[0]:g}–{rng[1]:g} Å" if rng else f"▶ {step.response_text}")
        elif isinstance(step, VerdictStep):
            parts.append(f"= {step.verdict or step.outcome.value}")
    return "\n\n".join(parts)


def _accept_hint(verdict: str | None) -> str:
    """The line under a verdict: Enter accepts a suggestion; without one there is nothing to accept."""
    if verdict:
        return "<br><small>Suggestion only — press Enter to accept it, or decide yourself.</small>"
    return "<br><small>No suggestion to accept: decide yourself (Y / N / U).</small>"


class AgentPanel(QWidget):
    """See module doc.

    Signals
    -------
    runRequested(task_id, ModelChoice) ; cancelRequested() ; zoomRequested(lo, hi, label) ; taskChanged(task_id)
    """

    runRequested = Signal(str, object)
    cancelRequested = Signal()
    zoomRequested = Signal(float, float, str)
    taskChanged = Signal(str)
    compactChanged = Signal(bool)
    #: "Trust this folder…" under a stored trace refused because its folder is outside the store's (the folder)
    trustRequested = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.task_box = QComboBox(objectName="taskBox")
        self.model_box = QComboBox(objectName="modelBox")
        self.run_button = QPushButton("Run agent (A)", objectName="runButton")
        self.cancel_button = QPushButton("Cancel (Esc)", objectName="cancelButton", enabled=False)
        self.notice = QLabel(objectName="agentNotice", wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.notice.setStyleSheet("font-size: 9pt; color: #444")
        # wraps: unwrapped, the scripted run's long status line raised the window's least width past 1366 px
        self.status = QLabel("idle", objectName="agentStatus", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        # which adapter the next run applies and where it comes from (the task file, the model box), or why the
        # run is refused (an adapter made for another base): said before Run is pressed
        self.adapter_note = QLabel(objectName="adapterNote", wordWrap=True, visible=False,
                                   textFormat=Qt.TextFormat.PlainText)
        # user task files that could not be read: said where tasks are picked (their task is missing from the box)
        self.task_warning = QLabel(objectName="taskWarning", visible=False, textFormat=Qt.TextFormat.PlainText)
        self.task_warning.setStyleSheet("color: #a15c00; font-weight: bold")
        self.transcript = QTextBrowser(objectName="transcript", openLinks=False)
        self.zooms = QListWidget(objectName="zoomStrip")
        self.zooms.setViewMode(QListWidget.ViewMode.IconMode)
        # the zoom strip is a column beside the transcript: on a 768-pixel-high screen a row under it took the
        # height the plot needs
        self.zooms.setIconSize(QSize(140, 78))
        self.zooms.setFlow(QListWidget.Flow.TopToBottom)
        self.zooms.setWrapping(False)
        self.zooms.setFixedWidth(172)
        self.transcript.setMinimumHeight(110)
        self.zooms.setMovement(QListWidget.Movement.Static)
        self.verdict = QLabel("", objectName="verdictLabel", wordWrap=True, textFormat=Qt.TextFormat.RichText)

        row = QHBoxLayout()
        row.addWidget(QLabel("Task"))
        row.addWidget(self.task_box, 1)
        row.addWidget(self.task_warning)
        row.addWidget(QLabel("Model"))
        row.addWidget(self.model_box, 2)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.status, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.adapter_note)
        layout.addLayout(buttons)
        layout.addWidget(self.notice)
        self.zooms_label = QLabel("Zooms (click: on the plot)")
        zoom_column = QVBoxLayout()
        zoom_column.addWidget(self.zooms_label)
        zoom_column.addWidget(self.zooms, 1)
        # K rollouts: the first in the transcript (with its zooms and steps), each other one's text streaming in
        # a tab of its own, as it is written (the tab bar shows only when K > 1)
        self.rollout_tabs = QTabWidget(objectName="rolloutTabs", documentMode=True)
        self.rollout_tabs.addTab(self.transcript, "Rollout 1")
        self.rollout_tabs.tabBar().setVisible(False)
        self._rollout_views: list[QPlainTextEdit] = []
        body = QHBoxLayout()
        body.addWidget(self.rollout_tabs, 1)
        body.addLayout(zoom_column)
        layout.addLayout(body, 1)
        # the verdict's evidence and answer can run to several lines: they scroll in a bounded box rather than
        # pushing the panel past the room a laptop screen has (its text then ran over the transcript)
        self.verdict_box = QScrollArea(objectName="verdictBox", widgetResizable=True)
        self.verdict_box.setWidget(self.verdict)
        self.verdict_box.setFrameShape(QFrame.Shape.NoFrame)
        self.verdict_box.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.verdict_box.setMinimumHeight(48)
        self.verdict_box.setMaximumHeight(104)
        layout.addWidget(self.verdict_box)
        self.hint = QLabel("", objectName="agentHint", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        self.hint.setStyleSheet("color: #666")
        layout.addWidget(self.hint)
        self.hint.setVisible(False)
        self.trust_button = QPushButton("Trust this folder…", objectName="trustTraceButton", visible=False)
        self.trust_button.setToolTip("Read traces in this folder from now on, for every store (asks first)")
        layout.addWidget(self.trust_button, 0, Qt.AlignmentFlag.AlignLeft)
        self._trust_folder = ""
        self.trust_button.clicked.connect(lambda: self.trustRequested.emit(self._trust_folder))
        self.compact = False

        self.run_button.clicked.connect(self._request_run)
        self.cancel_button.clicked.connect(self.cancelRequested)
        self.zooms.itemClicked.connect(self._zoom_item_clicked)
        self.transcript.anchorClicked.connect(self._anchor_clicked)
        self.task_box.currentIndexChanged.connect(lambda _i: self.taskChanged.emit(self.task_id()))
        # the box is narrower than "MODEL (QUANT) + ADAPTER (from the task)": its whole text on hover
        self.model_box.currentIndexChanged.connect(lambda _i: self.model_box.setToolTip(
            tooltip("\n".join(t for t in (self.model_box.currentText(), self.model_box.currentData(TIP_ROLE)) if t))))
        self._job: int | None = None
        self._scripted = False  # the run shown is the scripted demo session (`begin`)
        self._runnable = True  # a readable spectrum of the archive is shown (`set_runnable`)
        self._zoom_windows: list[tuple[float, float, str]] = []
        self._t0 = 0.0
        self._done_tokens = 0
        self._live_chars = 0
        self._other_chars = 0  # text of rollouts 2…K (their steps are not shown one by one)
        self._streams: dict[int, ReadableStream] = {}  # per rollout: the raw tokens rendered readable (`readable`)
        self._live_heading = ""  # heading of the run whose figures the status line shows
        self._who = "model ?"  # whose run the panel shows: "model ID", or the scripted demo's label
        self._backend = "…"
        self._eta: tuple[float, float] | None = None  # (seconds left when estimated, perf_counter then)
        self._timer = QTimer(self, interval=250)
        self._timer.timeout.connect(self._update_status)

    # -- configuration -------------------------------------------------------------------------------------------
    def set_tasks(self, tasks: dict[str, Task], current: str | None = None,
                  errors: Sequence[TaskError] = ()) -> None:
        """The task box: the tasks, then, for each user task file that could not be read (``errors``), a disabled
        entry naming the file (its reason in the tooltip, and in the ⚠ beside the box) — its task is missing."""
        self.task_box.blockSignals(True)
        self.task_box.clear()
        for task_id, task in tasks.items():
            self.task_box.addItem(f"{task_id} — {task.target_class}", task_id)
        if errors:
            self.task_box.insertSeparator(self.task_box.count())
        model = self.task_box.model()
        for exc in errors:
            name = exc.path.name if exc.path is not None else "task file"
            self.task_box.addItem(f"⚠ {name}: not read (hover for why)")
            i = self.task_box.count() - 1
            self.task_box.setItemData(i, tooltip(exc), Qt.ItemDataRole.ToolTipRole)
            item = model.item(i) if isinstance(model, QStandardItemModel) else None  # the combo box's own model is one
            if item is not None:
                item.setEnabled(False)
        if current is not None and (i := self.task_box.findData(current)) >= 0:
            self.task_box.setCurrentIndex(i)
        self.task_box.blockSignals(False)
        files = "file" if len(errors) == 1 else "files"
        self.task_warning.setText(f"⚠ {len(errors)} task {files} not read" if errors else "")
        self.task_warning.setToolTip(tooltip("\n\n".join(
            ["These user task files could not be read; their tasks are not in the box (spec-o3 tasks validate "
             "says the same):"] + [str(exc) for exc in errors])))
        self.task_warning.setVisible(bool(errors))

    def task_id(self) -> str:
        return self.task_box.currentData() or ""

    def set_models(self, models: Sequence[ModelEntry], scripted_available: bool, current: ModelChoice | None = None,
                   current_lora: str | None = None, task_lora: LoraAdapter | None = None) -> None:
        """``models``: the box's entries (`ModelEntry`; one with an adapter is a model with one of its adapters,
        `installed_models`). With ``task_lora`` (the current task's own adapter) a plain model's entry says that it
        runs it ("+ cv-lora (from the task)") and a "base only" entry follows it (the choice ``none``). The scripted
        demo entry (`speco3.engine.choice.DEMO`) is added when ``scripted_available``. ``current``/``current_lora``:
        the entry to select (default: the one selected now; "base only" where none is offered: the plain model)."""
        previous = current if current is not None else self.choice()
        previous_lora = self.lora() if current_lora is None else current_lora
        self.model_box.blockSignals(True)
        self.model_box.clear()

        def add(choice: ModelChoice, text: str, lora: str, tip: str = "") -> None:
            self.model_box.addItem(text, choice)
            self.model_box.setItemData(self.model_box.count() - 1, lora, LORA_ROLE)
            if tip:
                self.model_box.setItemData(self.model_box.count() - 1, tooltip(tip), Qt.ItemDataRole.ToolTipRole)
                self.model_box.setItemData(self.model_box.count() - 1, tip, TIP_ROLE)

        own = Path(task_lora.path).stem if task_lora is not None else ""
        for entry in models:
            if entry.adapter:
                add(entry.choice, entry.text, entry.adapter, f"runs with the adapter {entry.adapter}, whatever the task")
            elif task_lora is not None:
                add(entry.choice, entry.text + FROM_TASK.format(name=own),
                    "", f"runs with the task's own adapter {task_lora.path} (its file's \"lora\")")
                add(entry.choice, entry.text + BASE_ONLY, NO_LORA, "runs the model alone (as --lora none)")
            else:
                add(entry.choice, entry.text, "")
        if scripted_available:
            add(DEMO, f"⚠ {SCRIPTED_LABEL}", "")
        wanted = previous_lora.strip()
        wanted = NO_LORA if wanted.lower() == NO_LORA else wanted
        same = [i for i, c in enumerate(self.choices()) if previous is not None and c == previous]
        chosen = next((i for i in same if (self.model_box.itemData(i, LORA_ROLE) or "") == wanted),
                      same[0] if same else 0)
        self.model_box.setCurrentIndex(chosen if self.model_box.count() else -1)
        self.model_box.blockSignals(False)
        self.model_box.currentIndexChanged.emit(self.model_box.currentIndex())
        has_any = self.model_box.count() > 0
        self.notice.setText("" if models else NO_MODEL_HELP + (
            f" The demo archive offers a <b>{SCRIPTED_LABEL}</b> session to show the workflow."
            if scripted_available else ""))
        self.notice.setVisible(not models and self.compact)
        self._fit_height()
        self.run_button.setEnabled(has_any and self._job is None and self._runnable)

    def choice(self) -> ModelChoice | None:
        """The model chosen in the box (None: the box is empty)."""
        data = self.model_box.currentData()
        return data if isinstance(data, ModelChoice) else None

    def choices(self) -> list[ModelChoice]:
        """The model of each entry of the box, in order."""
        return [self.model_box.itemData(i) for i in range(self.model_box.count())]

    def lora(self) -> str:
        """The adapter choice of the selected model entry (`LORA_ROLE`): "", "none" or an adapter's path."""
        return self.model_box.currentData(LORA_ROLE) or ""

    def offers_base_only(self) -> bool:
        """Whether the box has "base only" entries (the task has an adapter of its own)."""
        return any(self.model_box.itemData(i, LORA_ROLE) == NO_LORA for i in range(self.model_box.count()))

    def show_adapter(self, text: str, refused: bool = False, tip: str = "") -> None:
        """The line under the task and model boxes: which adapter the next run applies and where it comes from,
        or (``refused``, in red) why it cannot run; hidden when empty."""
        self.adapter_note.setText(text)
        self.adapter_note.setToolTip(tooltip(tip))
        self.adapter_note.setStyleSheet("color: #b32d2d; font-weight: bold" if refused else "color: #1d5a8a")
        self.adapter_note.setVisible(bool(text))
        self._fit_height()

    def set_runnable(self, runnable: bool) -> None:
        """Whether a run is possible on what is shown (a readable spectrum of the archive, a writable store): Run
        is disabled without (issue #41)."""
        self._runnable = runnable
        self.run_button.setEnabled(runnable and self.model_box.count() > 0 and self._job is None)

    @property
    def running(self) -> bool:
        return self._job is not None

    # -- run lifecycle (called by the main window) ---------------------------------------------------------------
    def _request_run(self) -> None:
        if (choice := self.choice()) is not None and not self.running:
            self.runRequested.emit(self.task_id(), choice)

    def set_compact(self, compact: bool) -> None:
        """Without a run to show, the transcript, zoom strip and verdict boxes fold away (the plot gets their
        room on a laptop screen); a run or a stored trace unfolds them. Emits `compactChanged` on a change."""
        if compact == self.compact:
            return
        self.compact = compact
        for w in (self.rollout_tabs, self.zooms_label, self.zooms, self.verdict_box):
            w.setVisible(not compact)
        self.hint.setVisible(compact)
        self.notice.setVisible(compact and bool(self.notice.text()))  # "no model installed": said while idle
        self._fit_height()
        self.compactChanged.emit(compact)

    def _fit_height(self) -> None:
        """Folded, the panel is no higher than its controls and notes need at its width (a wrapped note, such as
        an adapter's refusal, takes more lines when narrow); unfolded, as high as it is given."""
        if not self.compact:
            self.setMaximumHeight(16777215)
            return
        layout = self.layout()
        at_width = layout.totalHeightForWidth(self.width()) \
            if layout is not None and self.width() > 0 and layout.hasHeightForWidth() else -1
        self.setMaximumHeight(max(at_width, self.sizeHint().height()))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if self.compact and event.size().width() != event.oldSize().width():
            self._fit_height()

    def clear(self) -> None:
        self.transcript.clear()
        self.zooms.clear()
        self._zoom_windows = []
        self.verdict.setText("")
        self.trust_button.setVisible(False)

    def _set_rollouts(self, k: int) -> None:
        """One tab per rollout beyond the first (streamed text), none for K = 1; ``--rollouts auto`` starts with
        its first round's and adds one as each later rollout starts."""
        while self.rollout_tabs.count() > 1:
            view = self.rollout_tabs.widget(self.rollout_tabs.count() - 1)
            self.rollout_tabs.removeTab(self.rollout_tabs.count() - 1)
            if view is not None:
                view.deleteLater()
        self._rollout_views = []
        for _ in range(1, k):
            self._add_rollout_tab()
        self.rollout_tabs.setTabText(0, "Rollout 1 (steps, zooms)" if k > 1 else "Rollout 1")
        self.rollout_tabs.tabBar().setVisible(k > 1)
        self.rollout_tabs.setCurrentIndex(0)

    def _add_rollout_tab(self) -> None:
        """A tab for the next rollout (the first round's at `begin`, a later round's as its text arrives)."""
        i = len(self._rollout_views) + 1
        view = QPlainTextEdit(objectName=f"rollout{i + 1}", readOnly=True)
        self._rollout_views.append(view)
        self.rollout_tabs.addTab(view, f"Rollout {i + 1}")
        self.rollout_tabs.setTabText(0, "Rollout 1 (steps, zooms)")
        self.rollout_tabs.tabBar().setVisible(True)

    def begin(self, job_id: int, title: str, scripted: bool, rollouts: int = 1) -> None:
        self.clear()
        self._live_heading = title  # a stored replay under the same heading is this run's
        self._set_rollouts(rollouts)
        self.set_compact(False)
        self._job, self._t0, self._eta = job_id, time.perf_counter(), None
        self._scripted = scripted  # the canned demo: its text is replayed, so no throughput is shown
        self._who, self._backend = "model ?", "…"
        self._done_tokens, self._live_chars, self._other_chars = 0, 0, 0
        self._streams = {}
        banner = (f"<p style='background:#fff3cd;color:#7a5200'><b>⚠ {SCRIPTED_LABEL}.</b> Canned text and the demo "
                  "catalogue's answer; the zooms are real renders.</p>") if scripted else ""
        self.transcript.setHtml(banner + f"<p><b>{html.escape(title)}</b></p>")
        self._new_block()
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.status.setText("starting …")
        self._timer.start()

    def started(self, job_id: int, info: RunInfo) -> None:
        if job_id == self._job:
            self._who, self._backend = (SCRIPTED_LABEL if info.scripted else f"model {info.model}"), info.backend

    def append_tokens(self, job_id: int, rollout: int, text: str) -> None:
        """Text rollout ``rollout`` of the run ``job_id`` just generated: into its tab (the transcript for the
        first); the status line counts every rollout's."""
        if job_id != self._job:
            return
        shown = self._streams.setdefault(rollout, ReadableStream()).feed(text)  # thinking and calls, no markup
        if rollout > 0:
            while rollout > len(self._rollout_views):  # a later round of --rollouts auto started
                self._add_rollout_tab()
            if rollout <= len(self._rollout_views):
                view = self._rollout_views[rollout - 1]
                view.moveCursor(QTextCursor.MoveOperation.End)
                view.insertPlainText(shown)
                view.ensureCursorVisible()
            self._other_chars += len(text)
            return
        self._live_chars += len(text)
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(shown)
        self.transcript.setTextCursor(cursor)
        self.transcript.ensureCursorVisible()

    def add_step(self, job_id: int, step: Step) -> None:
        if job_id != self._job:
            return
        if isinstance(step, AssistantStep):
            self._done_tokens += step.n_tokens
            self._live_chars = 0
            rest = self._streams.pop(0, ReadableStream()).flush()  # the turn ended: what was held back
            if rest:
                cursor = self.transcript.textCursor()
                cursor.movePosition(QTextCursor.MoveOperation.End)
                cursor.insertText(rest)
            self._append_html("<br>")
        elif isinstance(step, ToolStep):
            self._add_zoom(step)
        elif isinstance(step, VerdictStep):
            self._show_verdict(step)

    def _new_block(self) -> None:
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertBlock()
        self.transcript.setTextCursor(cursor)

    def _append_html(self, fragment: str) -> None:
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertHtml(fragment)
        self.transcript.setTextCursor(cursor)

    def _add_zoom(self, step: ToolStep) -> None:
        label = step.label or "zoom"
        rng = step.wavelength_range
        if not step.ok or rng is None or step.image is None:
            self._append_html(f"<p style='color:#b32d2d'>Tool error: {html.escape(step.response_text)}</p>")
            return
        lo, hi = float(rng[0]), float(rng[1])
        i = len(self._zoom_windows)
        self._zoom_windows.append((lo, hi, label))
        image = QImage.fromData(step.image.png)
        thumb = QPixmap.fromImage(image).scaled(140, 78, Qt.AspectRatioMode.KeepAspectRatio,
                                                Qt.TransformationMode.SmoothTransformation)
        item = QListWidgetItem(QIcon(thumb), f"{label}\n{lo:g}–{hi:g} Å")
        item.setData(Qt.ItemDataRole.UserRole, i)
        item.setToolTip(tooltip(f"{label}: {lo:g}–{hi:g} Å (rest frame). Click to show on the plot."))
        self.zooms.addItem(item)
        self._append_html(f"<p>▶ zoom <a href='zoom:{i}'><b>{html.escape(label)}</b> {lo:g}–{hi:g} Å</a> "
                          f"(rest frame)</p><br>")

    def _show_verdict(self, step: VerdictStep) -> None:
        outcome = step.outcome.value
        who = self._who
        if step.verdict:
            head = f"<span style='{_VERDICT_STYLE.get(step.verdict, '')};font-size:16pt'><b>{esc(step.verdict)}</b></span>"
        else:
            head = f"<b>no verdict</b> ({html.escape(outcome)}: {html.escape(step.detail)})"
        evidence = "; ".join(f"{lab} {lo:g}–{hi:g} Å" for lo, hi, lab in self._zoom_windows) or "no zooms"
        answer = esc(readable(step.answer).strip()[:600]) if step.answer else ""  # no markup, cut, then escaped
        self.verdict.setText(f"{head} — {html.escape(who)}<br><small>Evidence: {html.escape(evidence)}</small>"
                             + (f"<br><small>{answer}</small>" if answer else "") + _accept_hint(step.verdict))

    def show_confidence(self, conf, who: str, k_max: int | None = None, stop_reason: str | None = None) -> None:
        """The fold of K rollouts (`speco3.agent.confidence.Confidence`) in place of a single verdict; with
        ``--rollouts auto`` (``stop_reason`` other than ``fixed``) how many of the budget ``k_max`` ran and why."""
        if conf.verdict and not conf.abstained:
            head = f"<span style='{_VERDICT_STYLE.get(conf.verdict, '')};font-size:16pt'><b>{esc(conf.verdict)}</b></span>"
        else:  # what the run came to, named as everywhere: "tie: 1 YES / 1 NO", "abstained: split evidence, …"
            head = f"<b>no verdict to accept</b> ({esc(conf.headline)})"
        adaptive = bool(stop_reason) and stop_reason != STOP_FIXED
        votes = f"{conf.yes} YES / {conf.no} NO " + (f"· {describe_use(conf.k, k_max, stop_reason)}" if adaptive
                                                      else f"of {conf.k} rollouts")
        if conf.p_yes is not None:
            votes += f" · p_yes {conf.p_yes:.2f} · agreement {conf.agreement:.2f}"
        if conf.p_yes_token is not None:
            votes += f" · P(YES) at the answer token {conf.p_yes_token:.2f}"
        if conf.format_failures:
            votes += f" · {conf.format_failures} format failures"
        warn = (f"<br><span style='color:#8a6d00'><b>Abstained: {html.escape(conf.reason or conf.abstain_reason)}."
                "</b></span>" if conf.abstained else "")
        self.verdict.setText(f"{head} — {html.escape(str(who))}<br><small>{html.escape(votes)}</small>{warn}"
                             "<br><small>The transcript shows one rollout; all are stored and side by side in the "
                             "HTML report.</small>" + _accept_hint(None if conf.abstained else conf.verdict))

    def show_trace(self, trace: Trace, heading: str, others: Sequence[Trace | str] = ()) -> None:
        """Replay a stored trace (after a batch run or on revisit): transcript, clickable zooms, verdict; with
        ``others`` (rollouts 2…K: their traces, or why one cannot be shown) each in its tab."""
        if self.running:
            return
        self.clear()
        if heading != self._live_heading:  # the figures of the run just finished stay beside its own replay only
            self.status.setText("stored run")
        self._set_rollouts(1 + len(others))
        for view, other in zip(self._rollout_views, others, strict=True):
            view.setPlainText(other if isinstance(other, str) else rollout_text(other))
        self.set_compact(False)
        model = trace.model
        scripted = bool(model.get("scripted"))
        self._who = SCRIPTED_LABEL if scripted else f"model {model.get('model_id', '?')}"
        banner = f"<p style='background:#fff3cd;color:#7a5200'><b>⚠ {SCRIPTED_LABEL}.</b></p>" if scripted else ""
        self.transcript.setHtml(banner + f"<p><b>{html.escape(heading)}</b> (stored run)</p>")
        self._new_block()
        for step in trace.steps:
            if isinstance(step, AssistantStep):
                cursor = self.transcript.textCursor()
                cursor.movePosition(QTextCursor.MoveOperation.End)
                cursor.insertText(readable(step.text))  # the raw text stays in the trace
                self._append_html("<br>")
            elif isinstance(step, ToolStep):
                self._add_zoom(step)
            elif isinstance(step, VerdictStep):
                self._show_verdict(step)

    def show_batch(self, text: str) -> None:
        """What the batch pre-screen is doing, in the status line while the panel shows no run of its own."""
        if not self.running:
            self.status.setText(text or "idle")

    def show_idle(self, text: str = "", trust: Path | None = None) -> None:
        """No run for this spectrum: clear the trace and say so (plain text); with ``trust``, a stored trace was
        refused for its folder: a button offers to trust that folder (`trustRequested`)."""
        if self.running:
            return
        self.clear()
        self._set_rollouts(1)
        self.status.setText("idle")  # the last run's figures belong to another spectrum
        self._live_heading = ""
        self.hint.setText(text)
        self._trust_folder = str(trust) if trust is not None else ""
        self.set_compact(True)
        self.trust_button.setVisible(trust is not None)

    def finish(self, job_id: int, message: str = "") -> None:
        if job_id != self._job:
            return
        self._update_status()
        if message:
            self._append_html(f"<p style='color:#b32d2d'>{html.escape(message)}</p>")
        self._job = None
        self._timer.stop()
        self.run_button.setEnabled(self.model_box.count() > 0 and self._runnable)
        self.cancel_button.setEnabled(False)

    def set_eta(self, job_id: int, seconds_left: float, _queue_left: float = -1.0) -> None:
        """The inference thread's estimate of the time left for this run (negative: not known yet)."""
        if job_id == self._job:
            self._eta = (seconds_left, time.perf_counter()) if seconds_left >= 0 else None
            self._update_status()

    def eta_text(self) -> str:
        """``about 40 s left`` counting down from the last estimate, ``estimating time left …``, or "" once the
        verdict is in."""
        if self._eta is None:
            return format_eta(None)
        left, at = self._eta
        return format_eta(max(0.0, left - (time.perf_counter() - at))) if left > 0 else ""

    def _update_status(self) -> None:
        if self._job is None:
            return
        elapsed = time.perf_counter() - self._t0
        tokens = self._done_tokens + (self._live_chars + self._other_chars) // 4
        rate = tokens / elapsed if elapsed > 0 else 0.0
        backend = self._backend
        eta = self.eta_text()
        if self._scripted:  # canned text replayed at a set pace: a token rate would read as a model's throughput
            self.status.setText(f"{SCRIPTED_LABEL}: canned text, no throughput · {elapsed:.1f} s"
                                + (f" · {eta}" if eta else ""))
            return
        self.status.setText(f"{backend} · {tokens} tokens · {rate:.1f} tok/s · {elapsed:.1f} s" + (f" · {eta}" if eta else ""))

    # -- zooms ---------------------------------------------------------------------------------------------------
    def zoom_windows(self) -> list[tuple[float, float, str]]:
        return list(self._zoom_windows)

    def activate_zoom(self, i: int) -> None:
        if 0 <= i < len(self._zoom_windows):
            lo, hi, label = self._zoom_windows[i]
            self.zoomRequested.emit(lo, hi, label)

    def _zoom_item_clicked(self, item: QListWidgetItem) -> None:
        self.activate_zoom(int(item.data(Qt.ItemDataRole.UserRole)))

    def _anchor_clicked(self, url: QUrl) -> None:
        text = url.toString()
        if text.startswith("zoom:"):
            self.activate_zoom(int(text.split(":", 1)[1]))

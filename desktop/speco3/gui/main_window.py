"""The main window: archive panel | viewer over agent panel | decision panel, menus, keys and the start screen."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from speco3 import __version__
from speco3.agent.confidence import ABSTAINED
from speco3.agent.tasks import load_tasks as load_task_library
from speco3.agent.trace import Trace, TraceError
from speco3.config import cache_dir, take_cache_notice
from speco3.demo import is_demo_spectrum
from speco3.engine.choice import DEMO, SCRIPTED_LABEL, ModelChoice, ModelServer
from speco3.errors import Speco3Error, StoreError, TaskError
from speco3.gui.agent_control import AgentController, BatchControls, installed_models
from speco3.gui.agent_panel import AgentPanel, ModelEntry
from speco3.gui.archive_model import ArchiveTableModel, Filters
from speco3.gui.archive_panel import ArchivePanel
from speco3.gui.collector import collect_garbage_on_gui_thread
from speco3.gui.decision_panel import DecisionPanel
from speco3.gui.dialogs import ModelManagerDialog, SettingsDialog, dialogs_off, run_export
from speco3.gui.keymap import ACTIONS, FLAG_ACTIONS, KeyFilter, Keymap
from speco3.gui.labels import WrapLabel
from speco3.gui.lines import known_lines
from speco3.gui.menus import build_menus
from speco3.gui.samp_panel import SampPanel
from speco3.gui.settings import AppSettings
from speco3.gui.task_editor import TaskEditor
from speco3.gui.text import message
from speco3.gui.vetting import VettingController, store_path_for
from speco3.gui.viewer import SpectrumViewer
from speco3.gui.workers import IndexWorker, InferenceThread, StoppingJob, StoppingWorker, render_png
from speco3.vetting import stopping
from speco3.vetting.archive_store import (
    StoreFit,
    moved_beside,
    moved_store,
    relocate,
    store_fit,
    stores_beside,
)
from speco3.vetting.export_formats import export_format
from speco3.vetting.records import ModelVerdict
from speco3.vetting.session import Opened
from speco3.vetting.store import ARCHIVE_ROOT_STATE, VettingStore
from speco3.vetting.trace_roots import RootRefused, TraceOutside, roots_file, trust_root
from speco3.vetting.writer_lock import Holder

if TYPE_CHECKING:  # annotations only (the archive index is imported when an archive opens)
    from speco3.spectra.index import ArchiveIndex, IndexEntry
    from speco3.spectra.model import Spectrum

log = logging.getLogger(__name__)

#: Key actions that write for the spectrum shown (or run the model on it): refused with nothing readable shown.
WRITING_ACTIONS = frozenset({"decide_yes", "decide_no", "decide_unsure", "accept_model", "comment", "run_agent",
                             "mark_evidence", *FLAG_ACTIONS})
#: The keys that act on the spectrum in the viewer: with none readable shown they say why and do nothing.
VIEW_ACTIONS = frozenset({a.name for a in ACTIONS if a.group == "View"} | {"z_from_line"})


def archive_summary(summary: dict[str, Any], unusable: int, root: str) -> str:
    """What an opened archive holds, in the words of ``spec-o3 index`` (the status bar said "196 spectra" where the
    table listed 190 and the index 193 + 3 unreadable)."""
    text = f"{summary['spectra']:,} spectra in {summary['files']:,} files in {root}"
    if summary["errors"]:
        text += f"; {summary['errors']:,} unreadable (listed, with the reason)"
    if unusable:
        text += f"; {unusable:,} sky fibres or fully masked, not in the queue (tick 'sky fibres, fully masked')"
    if summary["skipped"]:
        text += f"; {summary['skipped']:,} entries the readers skipped (e.g. unassigned fibres)"
    return text


class MainWindow(QMainWindow):
    """Spec-o3 Desktop main window.

    Parameters
    ----------
    settings : AppSettings, optional
        Loaded from the config folder when omitted.
    render : callable, optional
        ``View -> PNG bytes`` for the agent (the training-faithful renderer by default).
    engine_opener : callable, optional
        ``(model id, EngineSettings) -> Engine`` (tests pass a scripted engine).

    Signals
    -------
    stoppingShown(certificate or None) -- a stopping test came back from its worker and is shown (the line, the
    greyed rows) ; auditReady(n) -- "Audit the rest" made its audit sample (n spectra) the queue, or had nothing to add
    (0)
    """

    stoppingShown = Signal(object)
    auditReady = Signal(int)

    def __init__(self, settings: AppSettings | None = None, render=None, engine_opener=None):
        super().__init__()
        from speco3.agent import load_tasks

        collect_garbage_on_gui_thread()  # before any worker starts: cycles are then only collected on this thread

        self.settings = settings or AppSettings.load()
        self.keymap = Keymap.from_settings(self.settings.keymap)  # conflicting/unknown keys -> defaults, warned
        self.task_errors: list[TaskError] = []  # user task files not read: shown in the task box
        self.tasks = load_tasks(errors=self.task_errors)
        self.index: ArchiveIndex | None = None
        self.archive_root: str | None = None
        self._last_export_dir: Path | None = None
        self._index_worker: IndexWorker | None = None
        self._store_request: Path | None = None  # the store to open the archive being indexed with (`open_archive`)
        self._store_title = ""  # "store: r.sqlite" in the title while a chosen store is vetted in (`_show_store`)
        self._vetter_asked = False  # "Who is vetting?" was asked in this window (`_ask_vetter`): asked once
        self.setWindowTitle(f"Spec-o3 Desktop {__version__}")

        self.table_model = ArchiveTableModel(parent=self)
        self.archive = ArchivePanel(self.table_model)
        self.viewer = SpectrumViewer()
        self.agent_panel = AgentPanel()
        self.decision = DecisionPanel(self.keymap)
        self.vetting = VettingController(self.table_model, self.archive.table, self.settings, self)
        self.inference = InferenceThread(render or render_png, self)
        self.agent = AgentController(self.inference, self.vetting, self.agent_panel, self.settings, self.tasks,
                                     engine_opener=engine_opener, parent=self)
        self._filling_models = False  # `refresh_models` fills the model box: its changes are not the user's
        self.agent_panel.model_box.currentIndexChanged.connect(self._model_picked)
        self.inference.start()
        # the stopping test runs on its own thread (170,000 screened spectra take 1-2 s to read and order)
        self.stopping_worker = StoppingWorker(self)
        self.stopping_worker.done.connect(self._stopping_done)
        self._stopping_jobs: dict[int, StoppingJob] = {}
        self._stopping_ids = 0
        self._stopping_shown = 0  # the newest job whose result is shown

        self.stack = QStackedWidget()
        self.stack.addWidget(self._start_page())
        self.stack.addWidget(self.viewer)
        # Laid out for a 1366×768 laptop first: the plot takes the room, the agent panel folds to its controls
        # while it has no run to show, the decision panel scrolls rather than being cut off at the right edge.
        self.centre = QSplitter(Qt.Orientation.Vertical, objectName="centreSplitter")
        self.centre.addWidget(self.stack)
        self.centre.addWidget(self.agent_panel)
        self.centre.setStretchFactor(0, 1)
        self.centre.setStretchFactor(1, 0)
        self.centre.setCollapsible(0, False)
        self.centre.setCollapsible(1, False)
        decision_scroll = QScrollArea(objectName="decisionScroll", widgetResizable=True)
        decision_scroll.setWidget(self.decision)
        decision_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        decision_scroll.setFrameShape(QFrame.Shape.NoFrame)
        decision_scroll.setMinimumWidth(self.decision.minimumSizeHint().width() + 16)
        self.main_splitter = QSplitter(Qt.Orientation.Horizontal, objectName="mainSplitter")
        self.main_splitter.addWidget(self.archive)
        self.main_splitter.addWidget(self.centre)
        self.main_splitter.addWidget(decision_scroll)
        for i, stretch in enumerate((0, 1, 0)):
            self.main_splitter.setStretchFactor(i, stretch)
            self.main_splitter.setCollapsible(i, False)
        self.setCentralWidget(self.main_splitter)
        self._build_status_bar()
        self.menu_actions = build_menus(self)  # greyed while they cannot act (`_show_enabled`)
        self._connect()
        self.samp = SampPanel(self)  # SAMP toolbar, status and handlers; off unless settings.samp_enabled
        self.evidence_toolbar = QToolBar("Evidence", self, objectName="evidenceToolbar")
        self.mark_action = self.evidence_toolbar.addAction(f"Mark evidence ({self.keymap.keys['mark_evidence']})",
                                                           self.mark_evidence)
        self.mark_action.setToolTip("Mark the visible wavelength window as evidence (its label is typed in the "
                                    "decision panel)")
        self.addToolBar(self.evidence_toolbar)
        self.agent_panel.set_tasks(self.tasks, self.settings.task if self.settings.task in self.tasks else None,
                                   self.task_errors)
        self.vetting.set_task(self.agent_panel.task_id())
        self.viewer.set_task(self.tasks.get(self.agent_panel.task_id()))
        self.refresh_models()
        self.key_filter = KeyFilter(self, self.keymap)
        self.key_filter.triggered.connect(self.trigger)
        QApplication.instance().installEventFilter(self.key_filter)  # type: ignore[union-attr]  # a window lives only inside the running QApplication
        for err in self.task_errors:
            self.show_message(f"task file skipped: {err}")
        if self.keymap.problems:
            self.show_message(f"keymap in {AppSettings.path()}: " + "; ".join(self.keymap.problems))
        if self.settings.notice:  # once: the file no longer holds what it was about
            self.show_message(self.settings.notice)
            self.settings.notice = ""
        self._fit_to_screen()
        self.agent_panel.compactChanged.connect(self._agent_folded)
        self.agent_panel.set_compact(True)
        self._show_enabled()  # the start screen: nothing shown, nothing to decide or run
        # Deleted by Qt on the GUI thread once closed (after closeEvent joined the workers), never by Python's
        # cyclic garbage collector, which may run on any thread that allocates.
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

    # -- construction --------------------------------------------------------------------------------------------
    def _fit_to_screen(self) -> None:
        """1600×950 where the screen has room, else the screen's available area; the columns in proportion."""
        screen = self.screen().availableGeometry() if self.screen() is not None else None
        width = min(1600, screen.width()) if screen is not None else 1600
        height = min(950, screen.height()) if screen is not None else 950
        self.resize(width, height)
        side = self.main_splitter.widget(2).minimumWidth()  # type: ignore[union-attr]  # pane 2 (the side column) is added above
        archive = max(300, int(0.3 * width))
        self.main_splitter.setSizes([archive, max(400, width - archive - side), side])

    def _agent_folded(self, compact: bool) -> None:
        """The agent panel folded (no run shown): the plot takes its room; unfolded: the run gets 45 %."""
        total = sum(self.centre.sizes()) or self.height()
        if compact:  # the height its notes need at its width (`AgentPanel._fit_height`); [total, 0] gave it its
            # minimum size, which knows nothing of wrapped notes: "No Spec-o3 model installed…" was squeezed to one
            # clipped line under the hint after a run
            need = min(self.agent_panel.maximumHeight(), total // 2) if self.agent_panel.isVisible() else 0
            self.centre.setSizes([total - need, need])
        else:
            agent = min(max(self.agent_panel.minimumSizeHint().height(), int(0.45 * total)), int(0.7 * total))
            self.centre.setSizes([total - agent, agent])

    def _start_page(self) -> QWidget:
        page = QWidget(objectName="startPage")
        layout = QVBoxLayout(page)
        layout.addStretch(1)
        title = WrapLabel("<h2>Spec-o3 Desktop</h2><p>Open a folder of FITS spectra (LAMOST, SDSS, DESI, generic) to "
                          "browse, inspect and vet candidates — or try the demo archive: twenty synthetic LAMOST "
                          "spectra with CVs, carbon stars, S-type stars, M giants and white dwarfs.</p>")
        title.setWordWrap(True)  # a WrapLabel: the stack asks this hidden page its height on every switch
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        row = QHBoxLayout()
        open_b = QPushButton("Open archive folder…", objectName="startOpen")
        demo_b = QPushButton("Open the demo archive", objectName="startDemo")
        open_b.clicked.connect(self.choose_archive)
        demo_b.clicked.connect(self.open_demo)
        row.addStretch(1)
        row.addWidget(open_b)
        row.addWidget(demo_b)
        row.addStretch(1)
        layout.addWidget(title)
        layout.addLayout(row)
        layout.addStretch(2)
        return page

    def _build_status_bar(self) -> None:
        self.batch = BatchControls(self.inference, self.show_message, self)
        self.batch_bar = self.batch.bar
        for w in (self.batch.bar, self.batch.pause, self.batch.cancel):
            self.statusBar().addPermanentWidget(w)
        self.store_label = QLabel("", self, objectName="storeLabel")
        self.store_label.setStyleSheet("color: #333")
        self.statusBar().addPermanentWidget(self.store_label)
        # what stays true for the session and must stay seen (messages come and go): decisions kept in memory
        # only, a cache not kept; in red, plain text (it names folders), the longer words in its tooltip
        self.note_label = QLabel("", self, objectName="noteLabel")
        self.note_label.setTextFormat(Qt.TextFormat.PlainText)
        self.note_label.setStyleSheet("color: #b00020; font-weight: bold")
        self.note_label.setVisible(False)
        self._notes: dict[str, tuple[str, str]] = {}  # kind -> (the note, its tooltip)
        self.statusBar().addPermanentWidget(self.note_label)

    def _connect(self) -> None:
        self.archive.openRequested.connect(self.choose_archive)
        self.archive.rowActivated.connect(self.vetting.go_to)
        self.archive.filtersChanged.connect(self._filters_changed)
        self.vetting.currentChanged.connect(self._on_current)
        self.vetting.rowMoved.connect(self._show_position)
        # Previous / Next follow the queue: a re-query, a page read or a candidate list changes its rows
        self.vetting.rowMoved.connect(self._show_enabled)
        self.table_model.modelReset.connect(self._show_enabled)
        self.table_model.rowsInserted.connect(self._show_enabled)
        # verdicts arriving during a pre-screen re-query a state-filtered table at most every 0.4 s
        self._requery = QTimer(self, singleShot=True, interval=400)
        self._requery.timeout.connect(self.table_model.refresh)
        self.vetting.recordChanged.connect(self._on_record)
        # the stopping line and the greyed skippable rows follow the decisions (once the vetter pauses)
        self._stopping_timer = QTimer(self, singleShot=True, interval=300)
        self._stopping_timer.timeout.connect(self.refresh_stopping)
        self.vetting.recordChanged.connect(self._stopping_timer.start)
        # decisions of another process (`spectrum decide`, a `vet` run): the record shown and the counters follow
        self._record_stale = False
        self.vetting.storeChanged.connect(self._store_changed)
        for done in (self.decision.fieldLeft, self.decision.notesEdited, self.decision.commentChanged,
                     self.decision.evidenceChanged):  # the vetter stopped typing: a record held back is shown
            done.connect(self._show_stale_record)
        QApplication.instance().focusChanged.connect(self._show_stale_record)  # type: ignore[union-attr]  # a window lives only inside the running QApplication
        self.vetting.message.connect(self.show_message)
        self.vetting.error.connect(self.show_message)
        self.decision.decided.connect(self.decide)
        self.decision.acceptModel.connect(self.accept_model)
        self.vetting.bind_notes(self.decision)  # flags, comment and evidence stored as they change, decided or not
        self.decision.evidenceChanged.connect(self.viewer.set_evidence)
        self.decision.markRequested.connect(self.mark_evidence)
        self.decision.markerZRequested.connect(lambda: self.decision.set_fit_z(self.viewer.line_z()))
        self.viewer.markerDragged.connect(self._marker_dragged)
        self.decision.modelWindowsRequested.connect(self.start_from_model_windows)
        self.decision.zoomRequested.connect(lambda lo, hi: self.viewer.zoom_to(lo, hi, "observed"))
        self.decision.fieldLeft.connect(lambda: self.viewer.plot.setFocus(Qt.FocusReason.OtherFocusReason))
        self.decision.navigate.connect(self.vetting.step)
        self.agent_panel.runRequested.connect(lambda t, m: self.agent.run_current(t, m))
        self.agent_panel.cancelRequested.connect(self.agent.cancel)
        self.agent_panel.zoomRequested.connect(lambda lo, hi, label: self.viewer.show_window(lo, hi, "rest", label))
        self.agent_panel.taskChanged.connect(self._on_task)
        self.agent_panel.trustRequested.connect(self.ask_trust_trace_folder)
        self.agent.message.connect(self.show_message)
        self.agent.verdictRecorded.connect(self._on_verdict)
        self.agent.runChanged.connect(self._show_enabled)  # Cancel run: only while a run is going
        self.batch.stateChanged.connect(self._show_enabled)  # Pause / Cancel batch: only while a batch is going
        self.key_actions: dict[str, Callable[[], object]] = {
            "decide_yes": lambda: self.decide("YES"), "decide_no": lambda: self.decide("NO"),
            "decide_unsure": lambda: self.decide("UNSURE"), "accept_model": self.accept_model,
            "comment": self.decision.focus_comment, "next": lambda: self.vetting.step(1),
            "previous": lambda: self.vetting.step(-1), "next_undecided": self.vetting.next_undecided,
            "smooth_more": self.viewer.smooth_more, "smooth_less": self.viewer.smooth_less,
            "toggle_frame": self.viewer.toggle_frame, "toggle_lines": self.viewer.toggle_lines,
            "toggle_model": self.viewer.toggle_model,
            "zoom_in": lambda: self.viewer.zoom(0.5), "zoom_out": lambda: self.viewer.zoom(2.0),
            "pan_left": lambda: self.viewer.pan(-0.25), "pan_right": lambda: self.viewer.pan(0.25),
            "reset_zoom": self.viewer.reset_zoom, "y_zoom_in": lambda: self.viewer.zoom_y(0.5),
            "y_zoom_out": lambda: self.viewer.zoom_y(2.0), "y_up": lambda: self.viewer.pan_y(0.25),
            "y_down": lambda: self.viewer.pan_y(-0.25), "y_auto": self.viewer.auto_y_range, "run_agent": self.run_agent, "cancel_agent": self.escape,
            "cheat_sheet": self.decision.toggle_cheat_sheet, "mark_evidence": self.mark_evidence,
            "z_from_line": self.z_from_line,
        }
        for action, flag in FLAG_ACTIONS.items():
            self.key_actions[action] = lambda flag=flag: self.decision.toggle_flag(flag)  # type: ignore[misc]  # flag=flag binds the loop value; mypy cannot infer such a lambda

    def _filters_changed(self) -> None:
        """New filters: stay on the spectrum shown when it is still listed (the trial lost its place when it set
        the state filter back to "any"), else go to the first row; an empty table shows nothing, so that no
        decision key acts on a spectrum the queue no longer holds."""
        self.vetting.session.remember(filters=asdict(self.table_model.filters), order=self.table_model.triage_order)
        entry = self.vetting.entry
        if entry is not None and 0 <= self.vetting.row < self.table_model.loaded_rows() \
                and self.table_model.entry(self.vetting.row).key == entry.key:  # type: ignore[union-attr]  # the row is below loaded_rows(): it has an entry
            return  # `VettingController` followed it to its new row
        if self.table_model.loaded_rows():
            self.vetting.go_to(0)
        else:
            self.vetting.clear_current()
            self.show_message("no spectrum matches the filters")

    def trigger(self, action: str) -> None:
        """Run a keymap action by name (the key filter calls this); a decision, note or agent key while no readable
        spectrum of this archive is shown (or the store is read-only), and a viewer key while no readable spectrum
        is shown (the start screen, an empty table, an unreadable file), says why and does nothing."""
        fn = self.key_actions.get(action)
        if fn is None:
            return
        if action in VIEW_ACTIONS:
            what = "no line to measure" if action == "z_from_line" else "nothing to view"
            if (reason := self.vetting.session.view_refusal(what)) is not None:
                self.show_message(reason)
                return
        if action in WRITING_ACTIONS:
            what = "nothing run" if action == "run_agent" else "nothing decided" if action.startswith(
                ("decide_", "accept_")) else "nothing noted"
            if (reason := self.vetting.session.refusal(what)) is not None:
                self.show_message(reason)
                return
        fn()

    # -- archive -------------------------------------------------------------------------------------------------
    def choose_archive(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open archive folder", self.settings.last_archive or "")
        if folder:
            self.open_archive(folder)

    def open_demo(self) -> None:
        from speco3.demo import write_demo_archive

        folder = self.settings.resolved_data_folder() / "demo"
        try:
            write_demo_archive(folder)
        except Exception as exc:
            self.show_error(f"cannot write the demo archive: {exc}")
            return
        self.open_archive(folder)

    def open_archive(self, folder: str | Path, store: str | Path | None = None) -> None:
        """Index ``folder`` in the background, then show it and resume the vetting session. ``store``: the vetting
        store to vet it in (a night's ``spec-o3 vet … --out r.sqlite``: checked against the archive, remembered for
        it); else the one remembered for this archive, else a ``vet`` store found beside it (offered), else the
        app's own (`_chosen_store`)."""
        folder = str(Path(folder).expanduser().resolve())
        if not Path(folder).is_dir():
            self.show_error(f"{folder}: not a folder")
            return
        self._store_request = Path(store).expanduser().resolve() if store else None
        self._stop_index_worker()
        self.archive.set_folder(folder)
        self.archive.show_progress(0, 1, "starting …")
        self._index_worker = IndexWorker(folder, parent=self)
        self._index_worker.progress.connect(self.archive.show_progress)
        self._index_worker.finished.connect(self._index_ready)
        self._index_worker.failed.connect(self._index_failed)
        self._index_worker.start()

    def _stop_index_worker(self) -> None:
        """Cancel a running scan, join its thread and let Qt delete the worker (on this thread)."""
        worker, self._index_worker = self._index_worker, None
        if worker is not None:
            worker.stop()
            worker.deleteLater()

    def _index_failed(self, message: str) -> None:
        if self.sender() is not self._index_worker:  # a scan that was replaced or stopped
            return
        self._stop_index_worker()
        self.archive.hide_progress()
        self.show_error(message)

    def _index_ready(self, root: str) -> None:
        from speco3.spectra import ArchiveIndex

        if self.sender() is not self._index_worker:
            return
        self._stop_index_worker()
        self.archive.hide_progress()
        if self.index is not None:
            self.index.close()
        self.index = ArchiveIndex.for_root(root)
        if notice := take_cache_notice():  # a read-only cache folder: indexed in a temporary one, said once
            self.show_message(notice)
            self._set_note("cache", f"Cache not kept: {cache_dir()} cannot be written", notice)  # for the run
        self.archive_root = root
        path, chosen = self._chosen_store(root)
        if not self._use_store(root, path, chosen):  # a chosen store refused (the reason shown): the app's own
            self._use_store(root, self._own_store(root), False)

    # -- the vetting store of the archive ---------------------------------------------------------------------
    def _own_store(self, root: str) -> Path:
        return store_path_for(root, self.settings.resolved_data_folder())

    def _holds(self, key: str) -> bool:
        """Whether the open archive holds the spectrum of store key ``key`` (a chosen store's fit)."""
        return self._index_entry(key) is not None

    def _chosen_store(self, root: str) -> tuple[Path, bool]:
        """The store to vet the archive ``root`` in, and whether the vetter chose it (checked against the archive):
        the one asked for (``--store``, File → Open store…), else the one remembered for the archive, else a
        ``vet`` store found beside it when the vetter takes it (offered once; asked no more once declined), else a
        store made before the archive moved here (beside it, or the app's own of the old folder) when the vetter
        has it re-rooted (`_relocate_moved`; asked once), else the app's own."""
        own = self._own_store(root)
        request, self._store_request = self._store_request, None
        if request is not None:
            return request, True
        remembered = self.settings.archive_stores.get(root)
        if remembered == "":
            return own, False
        if remembered:
            if Path(remembered).is_file():
                return Path(remembered), True
            self.show_message(f"the store {remembered} chosen for this archive is gone: the app's own is used")
            del self.settings.archive_stores[root]
            return own, False
        found = stores_beside(root, self._holds, exclude=own)
        if found and self._offer_store(found[0]):
            return found[0].path, True
        if found:
            self._remember_store(root, "")
            return own, False
        # a store made before the archive moved here: beside it, or the app's own of its old folder (re-rooted)
        # … and the stores chosen for archive folders that are gone (File → Open store…, --store before the move)
        gone = [Path(p) for r, p in self.settings.archive_stores.items() if p and not Path(r).exists()]
        for path, _plan in moved_beside(root, exclude=own, own_stores=own.parent, remembered=gone)[:1]:
            not_moved = self._relocate_moved(path, root, beside=True)
            if not_moved is None:
                for old_root in [r for r, p in self.settings.archive_stores.items()  # its old folder's entry
                                 if p and not Path(r).exists() and Path(p).resolve() == path.resolve()]:
                    del self.settings.archive_stores[old_root]
                return path, True
            self.show_message(f"{path}: {not_moved} (File → Open store… asks again)")
            self._remember_store(root, "")  # declined or refused: not offered again
        return own, False

    def _offer_store(self, fit: StoreFit) -> bool:
        """A store of ``spec-o3 vet`` lies beside the archive: offer to vet in it (taken at once without dialogs,
        and said so)."""
        text = (f"A vetting store that fits this archive lies beside it:\n\n{fit.path}\n{fit.describe()}\n\n"
                "Vet in it (its model verdicts, p(YES), abstentions and traces shown in the table; your decisions "
                "written to it)? File → Use the app's own store goes back.")
        if dialogs_off():
            self.show_message(f"using the store found beside the archive: {fit.describe()}")
            return True
        box = message(self, "Spec-o3 Desktop", text)
        use = box.addButton("Vet in this store", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Keep the app's own store", QMessageBox.ButtonRole.RejectRole)
        box.exec()
        box.deleteLater()
        return box.clickedButton() is use

    def _remember_store(self, root: str, path: str) -> None:
        """Remember the store chosen for the archive ``root`` ("" = the app's own) in the settings, at once."""
        if self.settings.archive_stores.get(root) != path:
            self.settings.archive_stores[root] = path
            self._save_settings()

    def choose_store(self) -> None:
        """File → Open store…: a vetting store file (a night's ``spec-o3 vet … --out r.sqlite``)."""
        start = str(Path(self.archive_root).parent) if self.archive_root else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open vetting store", start,
                                              "Vetting stores (*.sqlite *.db);;All files (*)")
        if path:
            self.open_store(path)

    def open_store(self, path: str | Path) -> bool:
        """Vet in the store ``path``: the open archive, when the store fits it (`speco3.vetting.archive_store`);
        else the archive the store names, opened with it; remembered for that archive. False (the reason shown)
        when it cannot be used."""
        path = Path(path).expanduser().resolve()
        if not path.is_file():
            self.show_error(f"{path}: no such vetting store")
            return False
        if self.inference.batch_running():
            self.show_error("a pre-screen is running on the current store: cancel it before changing the store")
            return False
        try:
            with VettingStore(path, readonly=True) as store:
                named = store.get_state(ARCHIVE_ROOT_STATE)
        except StoreError as exc:
            self.show_error(str(exc))
            return False
        named = named if isinstance(named, str) and named else None
        root = self.archive_root
        if root is not None and self.index is not None and self._index_worker is None:
            fits = store_fit(path, root, self._holds).problem() is None
            if fits or named is None or not Path(named).is_dir():
                if not self._use_store(root, path, True) and self.vetting.store is None:
                    self._use_store(root, self._own_store(root), False)
                return self.vetting.store is not None and self.vetting.store.path == path
        if named is None or not Path(named).is_dir():
            self.show_error(f"{path} names no archive folder found here ({named or 'none'}): open its archive first "
                            "(File → Open archive folder…; one that moved: at its new place, and the store is "
                            "offered to be re-rooted onto it), then the store")
            return False
        self.open_archive(named, store=path)
        return True

    def use_own_store(self) -> None:
        """File → Use the app's own store: vet the open archive in the store the app keeps for it (remembered)."""
        root = self.archive_root
        if root is None or self.index is None:
            self.show_message("open an archive first")
            return
        if self.inference.batch_running():
            self.show_error("a pre-screen is running on the current store: cancel it before changing the store")
            return
        self._use_store(root, self._own_store(root), False)

    def _use_store(self, root: str, path: Path, chosen: bool) -> bool:
        """See `_open_store`; the decision and agent controls then follow what is shown (nothing: disabled)."""
        try:
            return self._open_store(root, path, chosen)
        finally:
            self._show_enabled()

    def _open_store(self, root: str, path: Path, chosen: bool) -> bool:
        """Vet the indexed archive ``root`` in the store ``path`` (``chosen``: checked against the archive first,
        remembered for it) and show the queue as the vetter left it there. False when a chosen store was refused
        (the reason shown)."""
        index = self.index
        assert index is not None, "a store is chosen only for an indexed archive"  # the callers check it
        not_moved = self._relocate_moved(path, root) if chosen else None
        try:  # nothing of the last archive stays shown, whatever follows
            opened = self.vetting.open_store(path, root, self._browse_read_only, self._holds if chosen else None)
        except StoreError as exc:
            if chosen:
                self.show_error(f"the vetting store {path} is not used: {exc}"
                                + (f" — {not_moved}" if not_moved else ""))
                return False
            self.show_error(f"cannot open the vetting store: {exc}")
            opened = Opened(False)
        except Exception as exc:
            self.show_error(f"cannot open the vetting store: {exc}")
            opened = Opened(False)
        if opened.opened and (chosen or root in self.settings.archive_stores):
            self._remember_store(root, str(path) if chosen else "")
        self._show_store(path if opened.opened else None, chosen)
        self._show_read_only()
        self.vetting.cache.clear()
        surveys = [name for name in index.summary()["by_survey"] if name != "?"]
        view = self.vetting.session.view
        filters = self.archive.reset_filters(surveys)
        if opened.opened:  # the queue as the vetter left it (restart, crash)
            filters = self.archive.show_filters(Filters.of(view.filters), view.order)
        self.table_model.set_index(index, filters)
        self._show_position(self.vetting.row)
        self.stack.setCurrentWidget(self.viewer)
        if not opened.opened:
            self.table_model.set_entries([])
            self.show_message(f"{root}: not opened (its vetting store is in use)")
            return True
        n = index.count()
        summary = archive_summary(index.summary(), index.count(usable=False), root)
        if chosen and opened.fit is not None:
            summary = f"vetting in {opened.fit.describe()} · {summary}"
        self.show_message(summary)
        if opened.fit is not None and (note := opened.fit.note()):
            self.show_message(f"{note} · {summary}")
        self._show_unsaved(opened.unsaved)  # after the summary: the warning is what the status bar shows
        self.settings.last_archive = root
        self._save_settings()
        if view.candidates:
            self._restore_candidates(view.candidates)
        if self.vetting.session.store_refusal() is None:
            self._ask_vetter()  # before a spectrum is shown: no key meant as a decision reaches the prompt
        if self.table_model.loaded_rows():
            self.vetting.resume()
        elif n:
            self.show_message("no spectrum matches the filters")
        return True

    def _relocate_moved(self, path: Path, root: str, beside: bool = False) -> str | None:
        """A store made before its archive moved here (`speco3.vetting.archive_store.moved_store`): it names an
        archive folder that is gone, and files of its spectra lie at the same relative paths under ``root`` with the
        sizes it noted; one chosen, or (``beside``) one found beside the archive or among the app's own stores. Ask
        to re-root it onto ``root`` (`speco3.vetting.archive_store.relocate`: one transaction, nothing removed), old
        and new folder named, with the counts; then it fits. Without dialogs it is re-rooted when every file is
        found. Returns why a moved store was not re-rooted (None: it was, or it is no moved store)."""
        plan = moved_store(path, root)  # a store that cannot be read: the opening says what is wrong with it
        if plan is None:
            return None
        if plan.problem(allow_missing=True) is not None:
            return f"its archive {plan.old} moved? {plan.problem(allow_missing=True)}"
        if dialogs_off():
            if not plan.complete:
                return (f"made for {plan.old}, which is not there: {plan.describe()}; not re-rooted "
                        f"(spec-o3 store relocate {path} {plan.new} --allow-missing)")
        else:
            missing = (f"\n\n{plan.missing:,} of its {stopping.plural(plan.files, 'file')} "
                       f"{'is' if plan.missing == 1 else 'are'} not in this folder: their verdicts and decisions move "
                       "with the rest and stay in the store." if plan.missing else "")
            box = message(self, "Spec-o3 Desktop", (
                f"The vetting store\n{path}\nwas made for the archive folder\n{plan.old}\nwhich is not there any "
                f"more. Its spectra are in this archive folder:\n{plan.new}\n\n{plan.describe()}.{missing}\n\n"
                "Re-root the store onto this folder? Its spectrum keys and file paths are rewritten in one "
                "transaction; no verdict, decision or note is removed."
                + ("\n\nRe-rooted, it is the store this archive is vetted in (File → Use the app's own store goes "
                   "back)." if beside else "")))
            move = box.addButton("Re-root the store", QMessageBox.ButtonRole.AcceptRole)
            box.addButton(QMessageBox.StandardButton.Cancel)
            box.exec()
            box.deleteLater()
            if box.clickedButton() is not move:
                return f"made for {plan.old}; not re-rooted onto {plan.new}"
        try:
            relocate(path, plan.old, plan.new, allow_missing=True)
        except StoreError as exc:
            return str(exc)
        self.show_message(f"{path.name} re-rooted from {plan.old} onto {plan.new}: {plan.describe()}")
        return None

    def _show_store(self, path: Path | None, chosen: bool) -> None:
        """Name the store vetted in, in the status bar (a chosen one by its file, the app's own as such)."""
        if path is None:
            self.store_label.setText("")
        else:
            self.store_label.setText(f"store: {path.name}" if chosen else "store: the app's own")
        self.store_label.setToolTip(str(path) if path is not None else "")
        # a chosen store (--store, Open store…, remembered for the archive) is named in the title too: a vetter
        # reopening the archive sees which store takes the decisions (`_show_read_only` writes the title)
        self._store_title = f"store: {path.name}" if path is not None and chosen else ""

    def _browse_read_only(self, holder: Holder) -> bool:
        """Another instance writes this archive's store: say so and offer to browse it read-only."""
        text = (f"This archive's vetting store is being written by {holder.describe()}. Two writers would "
                "interleave their decisions, so this window can only browse it: decisions, notes and model runs "
                "are off here.")
        if dialogs_off():
            self.show_message(text)
            return True
        box = message(self, "Spec-o3 Desktop", text)  # plain text: the holder's host is read from its lock file
        browse = box.addButton("Browse read-only", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        box.deleteLater()
        return box.clickedButton() is browse

    def _show_read_only(self) -> None:
        """The window title: the version, the chosen store vetted in (`_show_store`), read-only when it is."""
        parts = [f"Spec-o3 Desktop {__version__}", self._store_title,
                 "read-only" if self.vetting.session.read_only else ""]
        self.setWindowTitle(" — ".join(p for p in parts if p))

    def _restore_candidates(self, path: str) -> None:
        if not Path(path).is_file():
            self.show_message(f"the candidate list {path} of the last session is gone: the table is the queue")
            self.vetting.session.remember(candidates=None)
            return
        self.load_candidates(path, go=False)

    def use_table_queue(self) -> None:
        """Queue → the filtered table again (after a candidate list)."""
        self.table_model.set_entries(None)
        self.vetting.session.remember(candidates=None)

    def choose_candidates(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load candidate list", self.archive_root or "",
                                              "Tables (*.csv *.ecsv *.txt *.fits *.fit *.vot *.xml)")
        if path:
            self.load_candidates(path)

    def load_candidates(self, path: str | Path, go: bool = True) -> int:
        """Make the candidate list at ``path`` the queue (remembered for the next session); ``go``: show its first
        spectrum."""
        from speco3.gui.candidates import match_candidates

        if self.index is None:
            self.show_error("open an archive first; candidates are matched against its index")
            return 0
        try:
            match = match_candidates(path, self.index)
        except Exception as exc:
            self.show_error(str(exc))
            return 0
        self.table_model.set_entries(match.entries)
        self.vetting.session.remember(candidates=str(Path(path).resolve()))
        note = f", {len(match.unmatched)} not found ({', '.join(match.unmatched[:5])}…)" if match.unmatched else ""
        self.show_message(f"candidate list {Path(path).name}: {len(match.entries)} spectra by {match.column}{note}")
        if match.entries and go:
            self.vetting.go_to(0)
        return len(match.entries)

    # -- current spectrum ----------------------------------------------------------------------------------------
    def _on_current(self, row: int, entry: IndexEntry | None, spectrum: Spectrum | None) -> None:
        unavailable: str | None
        if entry is None:  # nothing current (an empty table)
            unavailable = "no spectrum: the table is empty (see the filters)"
        else:
            unavailable = None if spectrum is not None else f"{entry.name}: {self.vetting.load_error or 'not readable'}"
        self.viewer.set_spectrum(spectrum, unavailable=unavailable)
        self.stack.setCurrentWidget(self.viewer)
        self.refresh_models()
        self._show_position(row)

    def _show_position(self, row: int) -> None:
        self.decision.show_position(row, self.table_model.total_hint(), self.vetting.decided_count(),
                                    "candidate list" if self.table_model.is_candidate_list else "table")

    def _on_record(self) -> None:
        self._record_stale = False
        dec, mv = self.vetting.current_record()
        saved = f"saved {dec.decided_at[:19].replace('T', ' ')} UTC by {dec.vetter}" if dec else "not decided yet"
        notes = self.vetting.current_notes()
        self.decision.show_record(dec.decision if dec else None, notes.flags, notes.comment, saved, notes.evidence,
                                  (dec.vetter_z, dec.z_conf, dec.vetter_class, dec.vetter_subclass) if dec
                                  else (None, None, None, None))
        self.viewer.set_evidence(notes.evidence)
        self.decision.show_model_windows(bool(self.vetting.model_windows()))  # a run without zooms: nothing to start from
        if mv is not None:  # an abstention is shown where the suggestion is, with its reason, and not accepted
            who = "(scripted demo — not a model)" if mv.model_id == SCRIPTED_LABEL else f"({mv.model_id})"
            self.decision.show_suggestion(mv.suggestion, who if mv.suggestion else
                                          f"{mv.headline.removeprefix(ABSTAINED + ': ')} {who}",
                                          abstained=bool(mv.abstained and (mv.rollouts or 1) > 1))
        else:
            self.decision.show_suggestion(None)
        self._show_stored_trace(mv)
        self._show_position(self.vetting.row)  # the decided count of this task
        self._show_enabled()

    def _show_enabled(self, *_args: object) -> None:
        """Enable what can act now, as the session says (the keys say why they do nothing): the decision, note and
        agent controls only when a readable spectrum of this archive is shown in a writable store
        (`VettingSession.refusal`: the start screen, an empty table, an unreadable file and a read-only store show
        them disabled, issue #41); Previous and Next only when there is a row to move to
        (`VettingSession.move_refusal`: not on the start screen, an empty queue, at its start or end); the menu
        entries that need an archive, a store or a writable one (`MenuActions`) only with it, Cancel run only while
        an agent run is going and Pause / Cancel batch only while a batch is (the run events say when)."""
        session = self.vetting.session
        writable = session.refusal() is None
        self.decision.set_writable(writable)
        self.decision.set_navigable(session.move_refusal(-1) is None, session.move_refusal(1) is None)
        self.agent_panel.set_runnable(writable)
        self.mark_action.setEnabled(writable)
        need = self.menu_actions
        for actions, enabled in ((need.archive, self.index is not None), (need.store, session.store is not None),
                                 (need.writable, session.store_refusal() is None), (need.spectrum, writable),
                                 (need.run, self.agent.interactive_job is not None), (need.batch, self.batch.running)):
            for act in actions:
                act.setEnabled(enabled)

    def _store_changed(self) -> None:
        """Another process wrote to the store: the counters and the stopping line follow at once, the spectrum's
        decision panel too unless the vetter is typing there (then once the field is left)."""
        self._show_position(self.vetting.row)
        self._stopping_timer.start()
        self._record_stale = True
        self._show_stale_record()

    def _show_stale_record(self, *_args: object) -> None:
        if self._record_stale and self.vetting.entry is not None and not self.decision.editing():
            self._on_record()

    def _show_stored_trace(self, mv: ModelVerdict | None) -> None:
        if self.agent_panel.running:
            return
        if mv is None or not mv.trace_dir:
            self.agent_panel.show_idle("No model run for this spectrum and task yet — press A to run the agent.")
            return
        try:
            if self.vetting.store is None:
                raise TraceError("no store open")
            trace = self.vetting.store.load_trace(mv.trace_dir, self._trace_roots())
        except TraceOutside as exc:  # plain text, and a button that asks to trust the folder
            self.agent_panel.show_idle(str(exc), exc.suggested)
            return
        except TraceError as exc:
            self.agent_panel.show_idle(str(exc) if str(exc).startswith("not shown") else
                                       f"stored trace unreadable: {exc}")
            return
        except Exception as exc:
            self.agent_panel.show_idle(f"stored trace unreadable: {exc}")
            return
        name = self.vetting.spectrum.name if self.vetting.spectrum is not None else ""
        self.agent_panel.show_trace(trace, f"{name} · task {mv.task} · {mv.model_id}", self._other_rollouts(mv))
        conf = mv.confidence()
        # K rollouts (or auto): their fold, not the one rollout the transcript replays
        if conf is not None and (conf.k > 1 or mv.k_max not in (None, 1)):
            self.agent_panel.show_confidence(conf, f"model {mv.model_id}", mv.k_max, mv.stop_reason)

    def ask_trust_trace_folder(self, folder: str) -> None:
        """"Trust this folder…": a box names the folder (plain text) and asks; only "Trust this folder" records it in
        the trusted trace folders of the user's configuration (`speco3.vetting.trace_roots`), then the trace is
        shown. The box opens window-modal without blocking (``open``), with dialogs off too."""
        text = (f"The stored trace of this spectrum is in a folder outside the store's folder:\n\n{folder}\n\n"
                "Read traces in this folder from now on, for every store? Only trust a folder your own runs write "
                f"traces to: a store copied from elsewhere may name any folder. Recorded in {roots_file()}.")
        box = message(self, "Trust this trace folder?", text, QMessageBox.Icon.Question)
        box.setObjectName("trustTraceBox")
        trust = box.addButton("Trust this folder", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def answered(button: object) -> None:
            if button is trust:
                self.trust_trace_folder(folder)

        box.buttonClicked.connect(answered)
        box.open()

    def trust_trace_folder(self, folder: str) -> bool:
        """Record ``folder`` as a trusted trace folder (the user confirmed) and show the spectrum's trace again;
        a refused folder (``/``, the home folder) or an unwritable configuration is said in the status bar."""
        try:
            root = trust_root(folder)
        except (RootRefused, OSError) as exc:
            self.show_message(f"trace folder not trusted: {exc}")
            return False
        self.show_message(f"trusted trace folder: {root}")
        if self.vetting.entry is not None:
            self._on_record()  # the trace refused a moment ago is shown now
        return True

    def _trace_roots(self) -> list[Path]:
        """Where the app writes traces (`speco3.gui.agent_control`): a store's traces may be read from there too."""
        return [self.settings.resolved_data_folder() / "traces"]

    def _other_rollouts(self, mv: ModelVerdict) -> list[Trace | str]:
        """The stored traces of rollouts 2…K of a run (a sentence in place of one that cannot be read)."""
        if self.vetting.store is None or mv.id is None or (mv.rollouts or 1) < 2:
            return []
        out: list[Trace | str] = []
        for r in self.vetting.store.rollouts(mv.id)[1:]:
            try:
                out.append(self.vetting.store.load_trace(r.trace_dir, self._trace_roots()) if r.trace_dir
                           else f"rollout {r.idx + 1}: no trace stored")
            except TraceError as exc:
                out.append(f"rollout {r.idx + 1}: stored trace unreadable: {exc}")
        return out

    def _on_task(self, task_id: str) -> None:
        self.settings.task = task_id
        self._save_settings()  # at once: a crash keeps the task chosen
        self.vetting.set_task(task_id)
        self._show_position(self.vetting.row)  # the decided count of this task, shown or not
        self.viewer.set_task(self.tasks.get(task_id))
        self.refresh_models()  # the model box says whether the task's own adapter runs

    def _on_verdict(self, key: str) -> None:
        self.table_model.invalidate_states([key])
        if self.table_model.rows_follow_states():  # e.g. "model abstained": the rows themselves change
            self._requery.start()
        # the stopping line counts the screened spectra: it follows a pre-screen (at most every 0.3 s; restarting
        # the timer on each verdict, as decisions do, would hold it off for as long as the batch runs)
        if not self._stopping_timer.isActive():
            self._stopping_timer.start()
        if self.vetting.entry is not None and self.vetting.entry.key == key:
            self.decision.flush_notes()  # a comment or label being typed is stored before the record is shown again
            self._on_record()

    def refresh_models(self) -> None:
        """Fill the model box: the model server (Settings → Model server) first, the installed models, the scripted
        demo on the demo archive. The user's choice (`_model_picked`, remembered: `remembered_model`) is chosen while
        the box offers it — a server added in Settings does not take its place (`_settings_applied` says it was
        added), and a chosen server whose URL changed there is followed to the new one; else the box's choice while
        it is offered, else the first entry."""
        models: list[ModelEntry] = installed_models()
        try:
            server = self.settings.server_choice()
        except Exception as exc:  # a hand-edited, unusable URL: the local models stay usable
            self.statusBar().showMessage(f"model server ignored: {exc}")
            server = None
        if server is not None:  # Settings → Model server: offered first
            models = [ModelEntry(server, f"{server.model or 'served model'} @ {server.url}"), *models]
        demo = is_demo_spectrum(self.vetting.spectrum)
        offered = [e.choice for e in models] + ([DEMO] if demo else [])
        current: ModelChoice | None = self.settings.remembered_model(server, demo)
        if current not in offered:  # nothing remembered, or not offered here: the box's choice while it is offered
            current = self.agent_panel.choice()
        task = self.tasks.get(self.agent_panel.task_id())
        self._filling_models = True  # the box's own fallbacks are not the user's choice (`_model_picked`)
        try:
            self.agent_panel.set_models(models, demo, current, self.settings.lora,
                                        task.lora if task is not None else None)
        finally:
            self._filling_models = False

    def _model_picked(self, _index: int) -> None:
        """The user chose in the model box: remembered at once (`AppSettings.remember_model`), so that a box filled
        again (another spectrum, a server added in Settings, the next start) chooses it again."""
        if not self._filling_models:
            self.settings.remember_model(self.agent_panel.choice())

    # -- certified stopping (speco3.vetting.stopping) -------------------------------------------------------------
    def refresh_stopping(self) -> None:
        """Ask the stopping worker whether the vetter may stop; the answer (the decision panel's line, the greyed
        spectra a stop leaves unread) is shown when it comes back (`_stopping_done`)."""
        store = self.vetting.store
        if store is None or not self.vetting.task_id:
            self._show_certificate(None)
            return
        self._submit_stopping(store, audit=False)

    def _submit_stopping(self, store: VettingStore, audit: bool) -> int:
        """Queue a stopping test of the current store and task at the settings' target (``audit``: Audit the rest)."""
        self._stopping_ids += 1
        job = StoppingJob(self._stopping_ids, store, self.vetting.task_id, self.settings.stop_recall,
                          self.settings.stop_confidence, audit=audit,
                          vetter=self.settings.vetter_name() if audit else "",
                          archive=self.index.count(usable=True) if self.index is not None else None)
        self._stopping_jobs[job.job_id] = job
        self.stopping_worker.submit(job)
        return job.job_id

    def _stopping_done(self, job_id: int, cert: stopping.Certificate | None, error: str) -> None:
        """A stopping test came back: shown when it is of the store and task shown now, and newer than the one
        shown; Audit the rest then makes the audit sample the queue."""
        job = self._stopping_jobs.pop(job_id, None)
        for dropped in [i for i in self._stopping_jobs if i < job_id]:  # refreshes the worker dropped for a later one
            del self._stopping_jobs[dropped]
        if job is None or job.store is not self.vetting.store or job.task != self.vetting.task_id \
                or job_id < self._stopping_shown:
            return
        if error:
            if job.audit:
                self.show_error(error)
                self.auditReady.emit(0)
            else:
                self.show_message(f"stopping test unavailable: {error}")
            return
        self._stopping_shown = job_id
        self._show_certificate(cert)
        if job.audit:
            self._audit_ready(cert, job.task)

    def _show_certificate(self, cert: stopping.Certificate | None) -> None:
        self.decision.show_stopping(cert.line() if cert is not None else "")
        self.table_model.set_skippable(set(cert.skippable_keys) if cert is not None else set())
        self.stoppingShown.emit(cert)

    def audit_rest(self) -> None:
        """File → Audit the rest: add to the audit sample the random spectra the stopping test asks for (recorded
        with its seed; a later one extends it), on the stopping worker; when it comes back the audit sample is the
        queue, in its drawn order (`auditReady`)."""
        store = self.vetting.store
        if store is None or self.index is None:
            self.show_error("open an archive and screen it first: the audit sample is drawn from its screened spectra")
            return
        self.show_message("drawing the audit sample …")
        self._submit_stopping(store, audit=True)

    def _audit_ready(self, cert: stopping.Certificate | None, task: str) -> None:
        if cert is None:
            self.show_error(f"no spectrum is screened for the task {task!r}: nothing to audit")
            self.auditReady.emit(0)
            return
        if (cert.verdict == "stop" or cert.unscreened) and not cert.drawn_keys:
            self.show_message(cert.line())
            self.auditReady.emit(0)
            return
        entries = [e for e in (self._index_entry(key) for key in cert.drawn_keys) if e is not None]
        self.table_model.set_entries(entries)
        self.show_message(f"audit sample: {cert.sample_drawn:,} random spectra (seed {cert.seed}); decide them in "
                          "this order, only then do they count")
        if entries:
            self.vetting.go_to(min(cert.labels_used, len(entries) - 1))
        self.auditReady.emit(len(entries))

    def _index_entry(self, key: str) -> IndexEntry | None:
        """The archive index's entry of a store key ``PATH#N`` (None when the archive does not hold it)."""
        path, _, n = key.rpartition("#")
        root = self.index.root if self.index is not None else None
        if not root or not path:
            return None
        for p, r in ((Path(path), Path(root)), (Path(path).resolve(), Path(root).resolve())):
            if p.is_relative_to(r):  # entries are root / rel (ArchiveIndex): their store keys start with the root
                return self.index.get(f"{p.relative_to(r).as_posix()}#{n}")  # type: ignore[union-attr]  # not None: root came from it above
        return None

    # -- decisions -----------------------------------------------------------------------------------------------
    def decide(self, decision: str) -> None:
        try:
            fit = self.decision.fit()
        except ValueError as exc:  # a z that is not a number: said, never stored as empty
            self.show_message(f"{exc}: nothing decided")
            return
        self.vetting.decide(decision, self.decision.flags(), self.decision.comment.text(), self.decision.evidence(),
                            fit=fit)

    def z_from_line(self) -> None:
        """Key Z: the vetter's z from the centroid of the line in view (the markers move there)."""
        got = self.viewer.centroid_z()
        if isinstance(got, str):
            self.show_message(got)
            return
        z, line, centre = got
        self.decision.set_fit_z(z)
        self.show_message(f"your z = {z:.5f}: {line.name} centred at {centre:.1f} Å ({self.viewer.frame} frame); "
                          "stored with your next decision")

    def _marker_dragged(self, z: float, name: str) -> None:
        """A line marker dragged and let go: its z is the vetter's (stored with the next decision)."""
        self.decision.set_fit_z(z)
        self.show_message(f"your z = {z:.5f} from dragging {name}; stored with your next decision")

    def _ask_vetter(self) -> None:
        """An archive opened in a store this window writes and no vetter name is set: ask for it now, before the
        archive's first spectrum is shown, with the login name offered (selected: typing replaces it); kept in the
        settings. Asked once a window. Never at a decision key: a vetter pressing Y and then N or an arrow typed those
        keys into the name field (the first letter replaced the offered name) and the decision waited on a dialog.
        Declined: decisions carry the offered name (`AppSettings.vetter_name`, as ``spec-o3 decide`` does), said."""
        if self.settings.vetter.strip() or self._vetter_asked or dialogs_off():
            return
        self._vetter_asked = True
        offered = self.settings.vetter_name()
        name, ok = QInputDialog.getText(self, "Who is vetting?", "Your name, stored with every decision "
                                        "(Settings → Settings… changes it):", text=offered)
        if ok and name.strip():
            self.settings.vetter = " ".join(name.split())
            self._save_settings()
        else:
            self.show_message(f"decisions are stored as {offered!r} (the login name) until you set your vetter name "
                              "in Settings → Settings…")

    def accept_model(self) -> None:
        mv = self.vetting.model_suggestion()
        if mv is not None and mv.verdict is not None and mv.suggestion is None:  # Enter never takes an abstention
            self.show_message(f"the model abstained ({mv.reason}): nothing to accept; decide yourself (Y / N / U)")
            return
        if mv is None or mv.suggestion is None:
            self.show_message("no model verdict to accept for this spectrum")
            return
        self.decide(mv.suggestion)

    def escape(self) -> None:
        """Escape: in a text field of the decision panel it leaves the field (the edit kept); elsewhere it cancels
        the agent run."""
        focus = QApplication.focusWidget()
        if focus is not None and self.decision.isAncestorOf(focus):
            self.decision.leave_field()
        else:
            self.agent.cancel()

    def mark_evidence(self) -> None:
        """Mark the plot's visible wavelength window (observed frame, within the data) as evidence; its label field
        then has the focus."""
        if (reason := self.vetting.session.refusal("nothing to mark")) is not None:
            self.show_message(reason)
            return
        window = self.viewer.visible_window()
        if window is None:
            self.show_message("the plot shows no part of the spectrum: nothing to mark")
            return
        if any((e.lo, e.hi) == (window.lo, window.hi) for e in self.decision.evidence()):
            self.show_message(f"{window.lo:g}–{window.hi:g} Å is marked already")
            return
        self.decision.add_evidence([window])
        self.show_message(f"evidence {window.lo:g}–{window.hi:g} Å marked: type a label, Enter to go on")

    def start_from_model_windows(self) -> None:
        """Add the zoom windows of the model's latest run (those not marked yet) for the vetter to edit."""
        windows = self.vetting.model_windows()
        have = {(e.lo, e.hi) for e in self.decision.evidence()}
        new = [w for w in windows if (w.lo, w.hi) not in have]
        if not windows:
            self.show_message("the model's latest run on this spectrum asked for no zoom windows")
            return
        self.decision.add_evidence(new, focus_label=False)
        self.show_message(f"{len(new)} of the model's {len(windows)} windows added: relabel or remove what is not "
                          "evidence" if new else "the model's windows are all marked already")

    # -- agent ---------------------------------------------------------------------------------------------------
    def run_agent(self) -> None:
        self.agent.run_current(self.agent_panel.task_id(), self.agent_panel.choice())

    def start_batch(self) -> None:
        self.table_model.fetch_all()
        rows = (self.table_model.entry(r) for r in range(self.table_model.loaded_rows()))
        entries = [e for e in rows if e is not None]  # every loaded row has an entry
        if not entries:
            self.show_message("nothing to pre-screen: the table is empty (see the filters)")
            return
        choice = self.agent_panel.choice()
        if choice is None or choice.scripted:
            demo = [e for e in entries if (e.file_name or "").startswith("spec-60001-SPECO3DEMO")]
            choice = DEMO if demo and not installed_models() else choice
        self.agent.start_batch(entries, self.agent_panel.task_id(), choice)

    def toggle_batch_pause(self) -> None:
        self.batch.toggle_pause()

    # -- dialogs and exports -------------------------------------------------------------------------------------
    def export_suggestion(self, ext: str) -> Path:
        """Where the export dialog starts: the folder of this session's last export, else the user's documents
        folder (an archive folder may be read-only), and a file named after the archive."""
        folder = self._last_export_dir or Path(platformdirs.user_documents_dir())
        name = Path(self.archive_root).name if self.archive_root else ""
        return folder / f"{name + '-' if name else ''}vetting.{ext}"

    def choose_export(self, fmt: str) -> None:
        """Ask where to write the registered export format ``fmt`` (`speco3.vetting.export_formats`), then write it."""
        ext = export_format(fmt).extension
        path, _ = QFileDialog.getSaveFileName(self, f"Export ({fmt})", str(self.export_suggestion(ext)), f"*.{ext}")
        if path:
            self._last_export_dir = Path(path).parent
            self.export(path, fmt)

    def export(self, path: str | Path, fmt: str) -> Path | None:

        if self.vetting.store is None:
            self.show_error("open an archive first")
            return None
        try:
            out = run_export(self.vetting.store, path, fmt, self.agent_panel.task_id())
        except Exception as exc:
            self.show_error(f"export failed: {exc}")
            return None
        self.show_message(f"exported to {out}")
        return out

    def open_model_manager(self) -> None:

        dlg = ModelManagerDialog(self)
        dlg.exec()
        dlg.deleteLater()  # destroyed by Qt on this thread, not left to the garbage collector
        self.refresh_models()

    def open_settings(self) -> None:

        before = (self.settings.server_url, self.settings.server_model)
        dlg = SettingsDialog(self.settings, self)
        accepted = dlg.exec()
        dlg.deleteLater()
        if accepted:
            self._settings_applied(before)

    def _settings_applied(self, server_before: tuple[str, str]) -> None:
        """What Settings → OK changes in the window. A model server set (or changed) there joins the model box
        without taking the user's choice, and the status bar says so (chosen only when nothing usable was)."""
        self.keymap = Keymap.from_settings(self.settings.keymap)
        self.key_filter.keymap = self.keymap
        self.decision.keymap = self.keymap
        self.decision.cheat.setText(self.keymap.cheat_sheet_html())
        self.mark_action.setText(f"Mark evidence ({self.keymap.keys['mark_evidence']})")
        self.samp.toggle.setChecked(self.settings.samp_enabled)  # connects or disconnects as chosen
        self.refresh_models()  # the model server entry comes and goes with its URL
        box = self.agent_panel.model_box
        at = next((i for i, c in enumerate(self.agent_panel.choices()) if isinstance(c, ModelServer)), None)
        if at is not None and (self.settings.server_url, self.settings.server_model) != server_before:
            self.show_message(f"{box.itemText(at)} added to the Model box" + (  # short: it must fit at 1366 px
                " and chosen" if box.currentIndex() == at else f"; {box.currentText()} stays chosen"))
        self._save_settings()
        self._store_place_changed()
        self.refresh_stopping()  # the stopping target may have changed

    def new_task(self) -> None:
        self.open_task_editor(None)

    def edit_task(self) -> None:
        self.open_task_editor(self.tasks.get(self.agent_panel.task_id()))

    def open_task_editor(self, task=None) -> TaskEditor:
        """Tasks → New/Edit task…: the editor (`speco3.gui.task_editor`); a saved task joins the task box at once."""
        dlg = TaskEditor(known_lines(self.tasks), task, parent=self)
        dlg.saved.connect(self._task_saved)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()
        return dlg

    def _task_saved(self, task) -> None:
        self.task_errors[:] = []
        self.tasks.clear()  # in place: the agent controller holds the same mapping
        self.tasks.update(load_task_library(errors=self.task_errors))
        self.agent_panel.set_tasks(self.tasks, task.id, self.task_errors)
        self._on_task(self.agent_panel.task_id())
        self.show_message(f"task {task.id} saved: {task.source}")

    def _show_unsaved(self, reason: str | None) -> None:
        """Say, and keep saying in the status bar, that decisions live in memory only (`VettingController.open_store`
        fell back to it because the data folder is read-only); nothing when ``reason`` is None."""
        self._set_note("unsaved", "Decisions are not saved: the data folder is read-only (Settings)" if reason
                       else None, reason or "")
        if reason is not None:
            self.show_error(f"{reason}.\n\nYou can browse and vet, but decisions are kept in memory only and are lost "
                            "when the app closes, until you choose a data folder you can write to (Settings).")

    def _set_note(self, kind: str, text: str | None, tip: str = "") -> None:
        """Show (``text``) or withdraw (None) the persistent red note of ``kind`` in the status bar (`note_label`;
        several are joined)."""
        if text is None:
            self._notes.pop(kind, None)
        else:
            self._notes[kind] = (text, tip or text)
        self.note_label.setText(" · ".join(t for t, _tip in self._notes.values()))
        self.note_label.setToolTip("\n\n".join(tip for _t, tip in self._notes.values()))
        self.note_label.setVisible(bool(self._notes))

    def _store_place_changed(self) -> None:
        """After Settings: a session kept in memory moves to the newly chosen data folder (its decisions with it)."""
        store = self.vetting.store
        if store is None or not store.is_in_memory or not self.archive_root:
            return
        try:
            opened = self.vetting.move_store(store_path_for(self.archive_root, self.settings.resolved_data_folder()),
                                             self._browse_read_only)
        except Speco3Error as exc:
            self.show_error(str(exc))
            return
        self._show_read_only()
        self._show_enabled()
        self.table_model.invalidate_states()
        self._show_unsaved(opened.unsaved)
        if not opened.opened:
            self.table_model.set_entries([])
            self.show_message(f"{self.archive_root}: not opened (its vetting store is in use)")
        elif opened.unsaved is None and self.vetting.store is not None:
            self.show_message(f"decisions are now saved in {self.vetting.store.path}")

    # -- misc ----------------------------------------------------------------------------------------------------
    def show_message(self, text: str) -> None:
        log.info("%s", text)
        self.statusBar().showMessage(text, 8000)

    def show_error(self, text: str) -> None:
        log.warning("%s", text)
        self.statusBar().showMessage(text, 15000)
        if not dialogs_off():
            message(self, "Spec-o3 Desktop", text).exec()  # plain text: errors quote file names and values

    def _save_settings(self) -> None:
        if not self.settings.model_id and not self.settings.model_source:  # nothing picked yet: what the box shows
            self.settings.remember_model(self.agent_panel.choice())
        try:
            self.settings.save()
        except OSError as exc:
            log.warning("settings not saved: %s", exc)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Stop and join every worker, close the stores; Qt then deletes the window (WA_DeleteOnClose)."""
        QApplication.instance().removeEventFilter(self.key_filter)  # type: ignore[union-attr]  # a window lives only inside the running QApplication
        with contextlib.suppress(RuntimeError, TypeError):  # a second close finds it disconnected
            QApplication.instance().focusChanged.disconnect(self._show_stale_record)  # type: ignore[union-attr]  # as above
        self.samp.shutdown()  # SAMP threads joined before any widget goes
        self.inference.stop()
        self.stopping_worker.stop()  # joined before the store it reads closes
        self._stop_index_worker()
        self.vetting.cache.close()
        self.vetting.close_store()
        if self.index is not None:
            self.index.close()
            self.index = None
        self._save_settings()
        super().closeEvent(event)

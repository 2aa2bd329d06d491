"""The vetting workflow of the main window: the Qt face of `speco3.vetting.session.VettingSession`.

The session (Qt-free) holds the archive, store, task, queue and the spectrum shown, and refuses what cannot land on
a readable spectrum of this archive; this controller observes it and turns its events into Qt signals, keeps the
archive table's highlighted row on the spectrum shown, prefetches the neighbours and saves the position 0.5 s after
the vetter pauses, and every `WATCH_MS` asks the session whether another process wrote to the store (`follow_store`).
The queue is the archive table's row order (the filtered, sorted index, or a loaded candidate
list). Every decision, flag change, comment and evidence window goes to the SQLite store immediately
(`speco3.vetting.VettingStore`, WAL), with the vetter's name, the time and the app version, and apart from the
model's verdicts. Flags, comment and the marked evidence windows are stored as notes of their own
(`save_annotation`) the moment they change, decided or not, and come back when the vetter returns to the spectrum;
a decided spectrum's decision is stored again with them. The position and the queue's arrangement are saved as
store state, so reopening the archive resumes where the vetter stopped, as the vetter left it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QItemSelectionModel, QObject, QTimer, Signal

from speco3.gui.archive_model import ArchiveTableModel
from speco3.gui.prefetch import SpectrumCache
from speco3.spectra.index import IndexEntry
from speco3.spectra.model import Spectrum
from speco3.vetting.archive_store import Holds
from speco3.vetting.records import Decision, Evidence, ModelVerdict, Notes
from speco3.vetting.session import Opened, Shown, VettingSession, store_key
from speco3.vetting.store import VettingStore
from speco3.vetting.writer_lock import Holder

if TYPE_CHECKING:  # the window builds both; the controller only connects to the panel's signals
    from speco3.gui.decision_panel import DecisionPanel

log = logging.getLogger(__name__)

PREFETCH_AHEAD = 3
PREFETCH_BEHIND = 1
WATCH_MS = 2000  # how often the table looks for writes of other processes to the store (`follow_store`)

__all__ = ["VettingController", "store_key", "store_path_for"]


def store_path_for(archive_root: str | Path, data_folder: Path) -> Path:
    """Per-archive store file under the data folder (archives may be read-only)."""
    root = Path(archive_root).resolve()
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    return data_folder / "vetting" / f"{root.name or 'archive'}-{digest}.sqlite"


class VettingController(QObject):
    """Queue, decisions and resume; see module doc.

    Signals
    -------
    currentChanged(row, entry, spectrum) ; recordChanged() ; storeChanged() ; message(text) ; error(text) ;
    leaving() -- emitted before the current spectrum changes or the store closes (pending notes are flushed)
    """

    leaving = Signal()
    currentChanged = Signal(int, object, object)
    rowMoved = Signal(int)  # the current spectrum stayed, its row changed (the table was re-queried)
    recordChanged = Signal()
    storeChanged = Signal()  # another process wrote to the store (`follow_store`)
    message = Signal(str)
    error = Signal(str)

    def __init__(self, model: ArchiveTableModel, table, settings, parent=None):
        super().__init__(parent)
        self.model = model
        self.table = table
        self.settings = settings
        self.cache = SpectrumCache()
        self.session = VettingSession(settings, self.cache.get, settings.task)
        self.session.set_queue(model)
        self._moving_table = False  # the table's current row is being set to the row shown (which calls go_to back)
        # a durable SQLite write per switch cost 4-8 ms of each key press: the position (a convenience for resuming,
        # never a decision) is saved 0.5 s after the last switch, and at once when the store closes
        self._position_save = QTimer(self, singleShot=True, interval=500)
        self._position_save.timeout.connect(self.save_position)
        # decisions and verdicts written by other processes (`spec-o3 decide`, `vet` on the same store) reach the
        # table's columns: one cheap `data_version` read every 2 s (`VettingSession.follow_store`)
        self._watch = QTimer(self, interval=WATCH_MS)
        self._watch.timeout.connect(self.follow_store)
        s = self.session
        s.leaving.connect(self._leaving)
        s.current_changed.connect(self._on_current)
        s.row_moved.connect(self._on_row_moved)
        s.record_changed.connect(self.recordChanged.emit)
        s.stored.connect(lambda key: self.model.invalidate_states([key]))
        s.message.connect(self.message.emit)
        s.error.connect(self.error.emit)
        model.state_fn = s.state_of
        model.confidence_fn = s.confidence_of
        model.modelAboutToBeReset.connect(s.before_requery)
        model.modelReset.connect(s.after_requery)

    # -- the session's state, as the window and the tests read it ------------------------------------------------
    @property
    def store(self) -> VettingStore | None:
        return self.session.store

    @property
    def task_id(self) -> str:
        return self.session.task_id

    @property
    def row(self) -> int:
        return self.session.row

    @property
    def entry(self) -> IndexEntry | None:
        return self.session.entry

    @property
    def spectrum(self) -> Spectrum | None:
        return self.session.spectrum

    @property
    def load_error(self) -> str | None:
        """Why the current entry could not be read (None: it was, or nothing is shown)."""
        return self.session.shown.error if self.session.shown is not None else None

    @property
    def last_switch_ms(self) -> float:
        return self.session.last_switch_ms

    # -- store ---------------------------------------------------------------------------------------------------
    def open_store(self, path: Path, archive_root: str | None = None,
                   browse_read_only: Callable[[Holder], bool] = lambda holder: True,
                   holds: Holds | None = None) -> Opened:
        """Open the store of the archive ``archive_root`` (see `VettingSession.open_archive`: a read-only data
        folder gives a store kept in memory, ``Opened.unsaved`` says why; ``holds``: a store the vetter chose,
        checked against the archive first); nothing is shown."""
        self._position_save.stop()
        opened = self.session.open_archive(archive_root or path.parent, path, browse_read_only, holds)
        self._follow(opened)
        return opened

    def move_store(self, path: Path, browse_read_only: Callable[[Holder], bool] = lambda holder: True) -> Opened:
        """Write a store kept in memory to ``path`` and go on there (`VettingSession.move_store`; raises
        `speco3.errors.StoreError` when it cannot, the memory store staying open)."""
        self._position_save.stop()
        opened = self.session.move_store(path, browse_read_only)
        self._follow(opened)
        return opened

    def _follow(self, opened: Opened) -> None:
        if opened.opened:
            self._watch.start()
        else:
            self._watch.stop()

    def follow_store(self) -> None:
        """Repaint the table's model and decision columns when another process wrote to the store since the last
        look, and emit `storeChanged` (the window shows the spectrum's record and the counters again, keeping an
        edit in progress)."""
        if self.session.follow_store():
            self.model.invalidate_states()
            self.storeChanged.emit()

    def bind_notes(self, panel: DecisionPanel) -> None:
        """Store the decision panel's flags, comment and evidence as they change, and flush its pending edit on
        leaving."""
        panel.flagsChanged.connect(lambda flags: self.update_notes(flags, panel.comment.text(), panel.evidence()))
        panel.commentChanged.connect(lambda comment: self.update_notes(panel.flags(), comment, panel.evidence()))
        panel.evidenceChanged.connect(lambda ev: self.update_notes(panel.flags(), panel.comment.text(), ev))
        panel.notesEdited.connect(lambda flags, comment: self.save_notes(flags, comment, panel.evidence()))
        self.leaving.connect(panel.flush_notes)

    def _leaving(self) -> None:
        self.leaving.emit()
        if self._position_save.isActive():
            self.save_position()

    def save_position(self) -> None:
        """Store the current spectrum as the queue position (`resume` goes back there)."""
        self._position_save.stop()
        self.session.save_position()

    def close_store(self) -> None:
        """Store what is pending and close the store (the window is closing: nothing more is shown)."""
        self._watch.stop()
        self.session.close(notify=False)

    def state_of(self, entry: IndexEntry) -> tuple[str | None, str | None]:
        return self.session.state_of(entry)

    def confidence_of(self, entry: IndexEntry) -> ModelVerdict | None:
        return self.session.confidence_of(entry)

    def set_task(self, task_id: str) -> None:
        self.session.set_task(task_id)
        if self.model.rows_follow_states():  # e.g. "undecided": the rows themselves change with the task
            self.model.refresh()
        else:
            self.model.invalidate_states()

    # -- navigation ----------------------------------------------------------------------------------------------
    def go_to(self, row: int) -> bool:
        """Make ``row`` current (loads from the prefetch cache) and prefetch its neighbours.

        The table's current row follows (and a row made current in the table comes here: `ArchivePanel`), so
        the highlighted row, the viewer and the spectrum a decision is written for are always the same one.
        """
        if self._moving_table:
            return True  # the table's current row is being set to this row by `_on_current`
        return self.session.go_to(row)

    def clear_current(self) -> None:
        """Nothing current (the table is empty): the viewer and the decision panel show no spectrum."""
        self.session.clear()

    def _select(self, row: int | None) -> None:
        """Highlight ``row`` in the table (None: nothing) without coming back here."""
        sel = self.table.selectionModel()
        if sel is None:
            return
        self._moving_table = True
        try:
            if row is None:
                sel.clear()
            else:
                idx = self.model.index(row, 0)
                # not sel.blockSignals: the view repaints from those signals (blocked, rows stayed highlighted)
                sel.setCurrentIndex(idx, QItemSelectionModel.SelectionFlag.ClearAndSelect
                                    | QItemSelectionModel.SelectionFlag.Rows)
                self.table.scrollTo(idx)
        finally:
            self._moving_table = False

    def _on_current(self, shown: Shown | None) -> None:
        if shown is None:
            self._select(None)
            self.currentChanged.emit(-1, None, None)
            return
        self._select(shown.row)
        self.currentChanged.emit(shown.row, shown.entry, shown.spectrum)
        self._position_save.start()  # the queue position is written once the vetter pauses, not per key press
        self._prefetch_around(shown.row)

    def _on_row_moved(self, row: int) -> None:
        """After the table was re-queried: highlight the spectrum's new row, or nothing when it is not listed."""
        entry = self.model.entry(row)
        shown = self.session.entry
        self._select(row if entry is not None and shown is not None and entry.key == shown.key else None)
        self.rowMoved.emit(row)

    def _prefetch_around(self, row: int) -> None:
        if row + PREFETCH_AHEAD >= self.model.loaded_rows() and self.model.canFetchMore():
            self.model.fetchMore()
        around = [self.model.entry(r) for r in range(row + 1, row + 1 + PREFETCH_AHEAD)]
        around += [self.model.entry(r) for r in range(row - PREFETCH_BEHIND, row)]
        self.cache.prefetch([e for e in around if e is not None])

    def step(self, delta: int) -> bool:
        return self.session.step(delta)

    def next_undecided(self) -> bool:
        return self.session.next_undecided()

    def resume(self) -> bool:
        """Go to the spectrum the vetter was on when the store was last used (else the first row)."""
        return self.session.resume()

    # -- decisions -----------------------------------------------------------------------------------------------
    def _current_key(self) -> str | None:
        shown = self.session.shown
        return shown.key if shown is not None else None

    def decide(self, decision: str, flags: list[str], comment: str, evidence: list[Evidence],
               fit: tuple[float | None, int | None, str | None, str | None] = (None, None, None, None)) -> bool:
        """Store the vetter's decision on the current spectrum now, with their (z, confidence 0-4, class,
        subclass) ``fit``; advance when the setting says so."""
        return self.session.decide(decision, flags, comment, evidence, fit=fit)

    def save_notes(self, flags: list[str], comment: str, evidence: list[Evidence]) -> bool:
        return self.session.save_notes(flags, comment, evidence)

    def current_notes(self) -> Notes:
        return self.session.current_notes()

    def update_notes(self, flags: list[str], comment: str, evidence: list[Evidence]) -> None:
        self.session.update_notes(flags, comment, evidence)

    def model_windows(self) -> list[Evidence]:
        return self.session.model_windows()

    def model_suggestion(self) -> ModelVerdict | None:
        return self.session.model_suggestion()

    def decided_count(self) -> int | None:
        return self.session.decided_count()

    def current_record(self) -> tuple[Decision | None, ModelVerdict | None]:
        return self.session.current_record()

"""The vetting workflow of the main window: queue navigation with prefetch, decisions written at once, resume.

The queue is the archive table's row order (the filtered, sorted index, or a loaded candidate list). Every
decision, flag change, comment and evidence window goes to the SQLite store immediately
(`speco3.vetting.VettingStore`, WAL), with the vetter's name, the time and the app version, and apart from the
model's verdicts. Flags, comment and the marked evidence windows are stored as notes of their own
(`save_annotation`) the moment they change, decided or not, and come back when the vetter returns to the spectrum;
a decided spectrum's decision is stored again with them. The current position is saved as store state, so reopening the archive resumes where the
vetter stopped.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QItemSelectionModel, QObject, QTimer, Signal

from speco3.agent.tasks import get_task
from speco3.errors import Speco3Error, SpectrumReadError, StoreError, TaskError
from speco3.gui.archive_model import ArchiveTableModel
from speco3.gui.demo_session import SCRIPTED_LABEL
from speco3.gui.prefetch import SpectrumCache
from speco3.spectra.index import IndexEntry
from speco3.spectra.model import Spectrum
from speco3.vetting.records import (
    Decision,
    Evidence,
    ModelVerdict,
    Notes,
    SpectrumInfo,
    label_warnings,
    model_evidence,
)
from speco3.vetting.screening import file_sha256
from speco3.vetting.store import ARCHIVE_ROOT_STATE, ReadOnlyStoreError, VettingStore

log = logging.getLogger(__name__)

PREFETCH_AHEAD = 3
PREFETCH_BEHIND = 1
FOLLOWERS = 256  # rows after the current one remembered across a re-query of the table
WATCH_MS = 2000  # how often the table looks for writes of other processes to the store (`follow_store`)


def store_key(entry: IndexEntry) -> str:
    """Store key of an index entry: the spectrum address ``PATH#N`` (as `speco3.vetting.records.spectrum_key`)."""
    return f"{entry.path}#{entry.index}"


def store_path_for(archive_root: str | Path, data_folder: Path) -> Path:
    """Per-archive store file under the data folder (archives may be read-only)."""
    root = Path(archive_root).resolve()
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    return data_folder / "vetting" / f"{root.name or 'archive'}-{digest}.sqlite"


class VettingController(QObject):
    """Queue, decisions and resume; see module doc.

    Signals
    -------
    currentChanged(row, entry, spectrum) ; recordChanged() ; message(text) ; error(text) ;
    leaving() -- emitted before the current spectrum changes or the store closes (pending notes are flushed)
    """

    leaving = Signal()
    currentChanged = Signal(int, object, object)
    rowMoved = Signal(int)  # the current spectrum stayed, its row changed (the table was re-queried)
    recordChanged = Signal()
    message = Signal(str)
    error = Signal(str)

    def __init__(self, model: ArchiveTableModel, table, settings, parent=None):
        super().__init__(parent)
        self.model = model
        self.table = table
        self.settings = settings
        self.store = None
        self.task_id = settings.task
        self.cache = SpectrumCache()
        self._sha256: dict[str, str] = {}  # file -> sha256, hashed once a session for the exports' file_sha256
        self.row = -1
        self.entry: Any = None
        self.spectrum: Spectrum | None = None
        self.load_error: str | None = None  # why the current entry could not be read (None: it was)
        self.last_switch_ms = 0.0
        self._moving_table = False  # go_to is setting the table's current row (which calls go_to back)
        # a durable SQLite write per switch cost 4-8 ms of each key press: the position (a convenience for resuming,
        # never a decision) is saved 0.5 s after the last switch, and at once when the store closes
        self._position_save = QTimer(self, singleShot=True, interval=500)
        self._position_save.timeout.connect(self.save_position)
        # decisions and verdicts written by other processes (`spec-o3 decide`, `vet` on the same store) reach the
        # table's columns: one cheap `data_version` read every 2 s (it changes only for other connections' commits)
        self._watch = QTimer(self, interval=WATCH_MS)
        self._watch.timeout.connect(self.follow_store)
        self._data_version: int | None = None
        model.state_fn = self.state_of
        model.confidence_fn = self.confidence_of
        self._followers: list[str] = []  # keys after the current row before a re-query (`_follow_current`)
        model.modelAboutToBeReset.connect(self._remember_followers)
        model.modelReset.connect(self._follow_current)

    # -- store ---------------------------------------------------------------------------------------------------
    def open_store(self, path: Path, archive_root: str | None = None) -> str | None:
        """Open the store of this session at ``path``.

        When that place is read-only (`ReadOnlyStoreError`), the session goes on with a store kept in memory, so
        that the archive can still be browsed and vetted, and the reason is returned (the window says that decisions
        are not kept until another data folder is chosen; `move_store` then writes them there). Else None.
        """
        self.close_store()
        unsaved = None
        try:
            self.store = VettingStore(path)
        except ReadOnlyStoreError as exc:
            log.warning("%s; keeping decisions in memory", exc)
            unsaved = str(exc)
            self.store = VettingStore.in_memory()
        self._data_version = self.store.data_version()
        self._watch.start()
        log.info("vetting store %s", self.store.path)
        if archive_root is not None:
            self.store.set_state(ARCHIVE_ROOT_STATE, str(archive_root))  # reports are titled by it
        return unsaved

    def move_store(self, path: Path, archive_root: str | None = None) -> str | None:
        """Leave a store kept in memory for the file ``path``: what it holds is written there when ``path`` does not
        exist yet. When it does, and the memory holds decisions or notes, `StoreError` says so and the memory store
        stays open (nothing is lost unseen). Returns what `open_store` returns."""
        store = self.store
        if store is not None and store.is_in_memory:
            self.leaving.emit()  # the decision panel's pending notes go into the store first
            if not path.exists():
                store.copy_to(path)
            elif store.decisions() or store.annotations():
                raise StoreError(f"{path}: a store exists there already; the decisions made since the app started "
                                 "are kept in memory only (choose a data folder without a store for this archive)")
        return self.open_store(path, archive_root)

    def bind_notes(self, panel: Any) -> None:
        """Store the decision panel's flags, comment and evidence as they change, and flush its pending edit on
        leaving."""
        panel.flagsChanged.connect(lambda flags: self.update_notes(flags, panel.comment.text(), panel.evidence()))
        panel.commentChanged.connect(lambda comment: self.update_notes(panel.flags(), comment, panel.evidence()))
        panel.evidenceChanged.connect(lambda ev: self.update_notes(panel.flags(), panel.comment.text(), ev))
        panel.notesEdited.connect(lambda flags, comment: self.save_notes(flags, comment, panel.evidence()))
        self.leaving.connect(panel.flush_notes)

    def save_position(self) -> None:
        """Store the current spectrum as the queue position (`open_archive` resumes there)."""
        self._position_save.stop()
        if self.store is not None and self.entry is not None:
            self.store.set_state("current_key", self.entry.key)

    def follow_store(self) -> None:
        """Repaint the table's model and decision columns when another process wrote to the store since the last
        look (the decision panel keeps what it shows: an edit in progress is never replaced under the vetter)."""
        if self.store is None:
            return
        try:
            version = self.store.data_version()
        except Speco3Error as exc:  # a store gone or locked for long: said once per change, tried again later
            log.warning("cannot read the store's version: %s", exc)
            return
        if version != self._data_version:
            self._data_version = version
            self.model.invalidate_states()

    def close_store(self) -> None:
        self._watch.stop()
        if self.store is not None:
            self.leaving.emit()
            if self._position_save.isActive():
                self.save_position()
            self.store.close()
        self.store = None

    def state_of(self, entry: Any) -> tuple[str | None, str | None]:
        """(latest model verdict, human decision) of an index entry for the current task; a run without a verdict
        to accept shows what it came to (``abstained``, ``tie``, ``no_answer``, ``format_error`` …), never the
        majority it abstained on."""
        if self.store is None:
            return None, None
        key = store_key(entry)
        mv = self.store.latest_model_verdict(key, self.task_id)
        dec = self.store.decision(key, self.task_id)
        verdict = (mv.suggestion or mv.outcome) if mv else None
        if verdict and mv.model_id == SCRIPTED_LABEL:  # never shown (or filtered) as a model's verdict
            verdict = f"{verdict} (demo)"  # the scripted demo: its answers are the catalogue's, not a model's
        return verdict, (dec.decision if dec else None)

    def confidence_of(self, entry: Any) -> ModelVerdict | None:
        """The latest model verdict of an entry for the current task (its ``p_yes``, ``abstained`` … feed the
        confidence column and the triage); None without one, and for the scripted demo (not a model)."""
        if self.store is None:
            return None
        mv = self.store.latest_model_verdict(store_key(entry), self.task_id)
        return None if mv is None or mv.model_id == SCRIPTED_LABEL else mv

    def set_task(self, task_id: str) -> None:
        self.leaving.emit()  # pending notes belong to the previous task
        self.task_id = task_id
        self.model.invalidate_states()
        if self.entry is not None:
            self._show_record()

    # -- navigation ----------------------------------------------------------------------------------------------
    def go_to(self, row: int) -> bool:
        """Make ``row`` current (loads from the prefetch cache) and prefetch its neighbours.

        The table's current row follows (and a row made current in the table comes here: `ArchivePanel`), so
        the highlighted row, the viewer and the spectrum a decision is written for are always the same one.
        """
        if self._moving_table:
            return True  # the table's current row is being set to this row by the call below
        entry = self.model.entry(row)
        if entry is None:
            return False
        t0 = time.perf_counter()
        self.leaving.emit()  # notes still being typed belong to the spectrum we leave
        self.load_error = None
        try:
            spectrum = self.cache.get(entry)
        except (SpectrumReadError, Speco3Error, OSError) as exc:
            spectrum = None
            self.load_error = str(exc)  # shown in place of the plot, not only in the status bar
            self.error.emit(f"{entry.key}: {exc}")
        self.row, self.entry, self.spectrum = row, entry, spectrum
        sel = self.table.selectionModel()
        if sel is not None:
            idx = self.model.index(row, 0)
            # not sel.blockSignals: the view repaints from those signals (blocked, rows stayed highlighted)
            self._moving_table = True
            try:
                sel.setCurrentIndex(idx, QItemSelectionModel.SelectionFlag.ClearAndSelect
                                    | QItemSelectionModel.SelectionFlag.Rows)
            finally:
                self._moving_table = False
            self.table.scrollTo(idx)
        self.currentChanged.emit(row, entry, spectrum)
        self._show_record()
        self.last_switch_ms = (time.perf_counter() - t0) * 1000
        self._position_save.start()  # the queue position is written once the vetter pauses, not per key press
        self._prefetch_around(row)
        return True

    def clear_current(self) -> None:
        """Nothing current (the table is empty): the viewer and the decision panel show no spectrum."""
        self.leaving.emit()
        self.row, self.entry, self.spectrum, self.load_error = -1, None, None, None
        sel = self.table.selectionModel()
        if sel is not None:
            sel.clear()
        self.currentChanged.emit(-1, None, None)
        self._show_record()

    def _remember_followers(self) -> None:
        first = self.row + 1
        last = min(first + FOLLOWERS, self.model.loaded_rows())
        self._followers = [e.key for e in (self.model.entry(r) for r in range(first, last)) if e is not None]

    def _follow_current(self) -> None:
        """After the table was re-queried (a verdict arrived under a state filter, a column sort): keep showing
        the same spectrum, highlight its new row, and let → go on to what followed it. When the re-query dropped
        it (e.g. "no model verdict" and the model just answered), nothing is highlighted and → goes to the first
        of its old followers still listed."""
        if self.entry is None:
            return
        limit = max(self.row + 1, 0) + FOLLOWERS
        row = self.model.row_of(self.entry.key, fetch_limit=limit)
        shown = row is not None
        if row is None:
            loaded = {self.model.entry(r).key: r for r in range(self.model.loaded_rows())}
            after = next((loaded[k] for k in self._followers if k in loaded), None)
            row = (after if after is not None else self.model.loaded_rows()) - 1
        self.row = row
        sel = self.table.selectionModel()
        if sel is not None:
            self._moving_table = True
            try:
                if shown:
                    idx = self.model.index(row, 0)
                    sel.setCurrentIndex(idx, QItemSelectionModel.SelectionFlag.ClearAndSelect
                                        | QItemSelectionModel.SelectionFlag.Rows)
                    self.table.scrollTo(idx)
                else:
                    sel.clear()
            finally:
                self._moving_table = False
        self.rowMoved.emit(row)

    def _prefetch_around(self, row: int) -> None:
        if row + PREFETCH_AHEAD >= self.model.loaded_rows() and self.model.canFetchMore():
            self.model.fetchMore()
        around = [self.model.entry(r) for r in range(row + 1, row + 1 + PREFETCH_AHEAD)]
        around += [self.model.entry(r) for r in range(row - PREFETCH_BEHIND, row)]
        self.cache.prefetch([e for e in around if e is not None])

    def step(self, delta: int) -> bool:
        target = self.row + delta
        if target >= self.model.loaded_rows() and self.model.canFetchMore():
            self.model.fetchMore()
        if 0 <= target < self.model.loaded_rows():
            return self.go_to(target)
        self.message.emit("end of the queue" if delta > 0 else "start of the queue")
        return False

    def next_undecided(self) -> bool:
        r = self.row + 1
        while True:
            if r >= self.model.loaded_rows():
                if not self.model.canFetchMore():
                    self.message.emit("no undecided spectrum after this one")
                    return False
                self.model.fetchMore()
                continue
            entry = self.model.entry(r)
            if self.model.state(entry)[1] is None:
                return self.go_to(r)
            r += 1

    def resume(self) -> bool:
        """Go to the spectrum the vetter was on when the store was last used (else the first row)."""
        key = self.store.get_state("current_key") if self.store is not None else None
        row = self.model.row_of(key) if key else None
        if row is None:
            row = 0
        ok = self.go_to(row)
        if ok and key:
            self.message.emit(f"resumed at {self.entry.key}")
        return ok

    # -- decisions -----------------------------------------------------------------------------------------------
    def _current_key(self) -> str | None:
        return store_key(self.entry) if self.entry is not None else None

    def decide(self, decision: str, flags: list[str], comment: str, evidence: list[Evidence],
               fit: tuple[float | None, int | None, str | None, str | None] = (None, None, None, None)) -> bool:
        """Store the vetter's decision on the current spectrum now, with their (z, confidence 0-4, class,
        subclass) ``fit``; advance when the setting says so."""
        key = self._current_key()
        if self.store is None:
            self.message.emit("open an archive first")
            return False
        if key is None:
            self.message.emit("no spectrum shown (the table is empty): nothing decided")
            return False
        mv = self.store.latest_model_verdict(key, self.task_id)
        rec = Decision(spectrum_key=key, task=self.task_id, decision=decision, flags=list(flags), comment=comment,
                       vetter=self.settings.vetter_name(), model_verdict_seen=mv.verdict if mv else None,
                       model_verdict_id=mv.id if mv else None, evidence=list(evidence), vetter_z=fit[0],
                       z_conf=fit[1], vetter_class=fit[2], vetter_subclass=fit[3])
        try:
            info = self.store.spectrum_info(key)
            if self.spectrum is not None and (info is None or info.file_sha256 is None):  # what exports show of it
                path = self.spectrum.meta.path
                self.store.record_spectrum(SpectrumInfo.of(key, self.spectrum,
                                                           file_sha256(path, self._sha256) if path else None))
            self.store.record_decision(rec)
        except Speco3Error as exc:
            self.error.emit(f"decision not saved: {exc}")
            return False
        self.model.invalidate_states([self.entry.key])
        self._show_record()
        self.message.emit(f"{decision} saved for {self.entry.name}")  # replaces an older note in the status bar
        if self.settings.auto_advance:
            self.step(1)
        return True

    def save_notes(self, flags: list[str], comment: str, evidence: list[Evidence]) -> bool:
        """Store the current spectrum's flags, comment and evidence windows now (decided or not); False when they
        could not be."""
        key = self._current_key()
        if key is None or self.store is None:
            return False
        try:
            self.store.save_annotation(key, self.task_id, list(flags), comment, self.settings.vetter_name(),
                                       evidence=evidence)
        except Speco3Error as exc:
            self.error.emit(f"flags/comment/evidence not saved: {exc}")
            return False
        self._warn_labels(evidence)
        return True

    def _warn_labels(self, evidence: list[Evidence]) -> None:
        """A label naming a line of the task's list that lies outside its window at the spectrum's z (windows are
        observed-frame; `speco3.vetting.records.label_warnings`, as ``spec-o3 decide`` warns) goes to the status bar."""
        if self.spectrum is None or not evidence:
            return
        try:
            lines = get_task(self.task_id).lines
        except TaskError:  # a task file gone since: nothing to check against
            return
        warnings = label_warnings(evidence, lines, self.spectrum.z)
        if warnings:
            self.message.emit("warning: " + warnings[0])

    def current_notes(self) -> Notes:
        """(flags, comment, evidence) of the current spectrum as last left (notes or the decision, whichever is
        newer)."""
        key = self._current_key()
        if key is None or self.store is None:
            return Notes([], "", [])
        return self.store.notes(key, self.task_id)

    def update_notes(self, flags: list[str], comment: str, evidence: list[Evidence]) -> None:
        """Flags ticked, comment entered or evidence changed: store them now; a decided spectrum's decision is
        re-saved with them (unless it already holds them)."""
        key = self._current_key()
        if key is None or self.store is None or not self.save_notes(flags, comment, evidence):
            return
        dec = self.store.decision(key, self.task_id)
        if dec is None:
            self.message.emit("notes saved (not decided yet)")
            return
        if (dec.flags, dec.comment, dec.evidence) == (list(flags), comment, list(evidence)):
            return
        auto, self.settings.auto_advance = self.settings.auto_advance, False
        try:
            self.decide(dec.decision, flags, comment, evidence)
        finally:
            self.settings.auto_advance = auto

    def model_windows(self) -> list[Evidence]:
        """The zoom windows of the latest model run on the current spectrum for the task, as evidence windows in
        the observed frame (`model_evidence`); none for the scripted demo, which is not a model."""
        mv = self.model_suggestion()
        if mv is None or mv.id is None or mv.model_id == SCRIPTED_LABEL or self.spectrum is None:
            return []
        return model_evidence(self.store.rollouts(mv.id), self.spectrum.z)

    def model_suggestion(self) -> Any:
        key = self._current_key()
        if key is None or self.store is None:
            return None
        return self.store.latest_model_verdict(key, self.task_id)

    def decided_count(self) -> int | None:
        if self.store is None:
            return None
        return self.store.decision_count(self.task_id)

    def current_record(self) -> tuple[Any, Any]:
        """(stored `Decision` or None, latest `ModelVerdict` or None) of the current spectrum."""
        key = self._current_key()
        if key is None or self.store is None:
            return None, None
        return self.store.decision(key, self.task_id), self.store.latest_model_verdict(key, self.task_id)

    def _show_record(self) -> None:
        self.recordChanged.emit()

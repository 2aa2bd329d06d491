"""The vetting session: archive, store, task, queue, the spectrum shown; Qt-free, observed by the app.

`VettingSession` holds what the vetter is working on: the archive and its store (`VettingStore`), the task, the
queue (anything with the `Queue` methods: the app's archive table, or a `ListQueue`), the spectrum shown (`Shown`,
or none) and the vetter. Every operation that writes (decide, notes: flags, comment, evidence windows) and every
model run is refused with a reason (`refusal`) unless a readable spectrum of this archive is shown and the store is
writable, so a decision always lands on the spectrum shown, in the store of the archive shown. The app's widgets
only observe it: each `Event` is a plain list of callbacks (napari's evented models in ``components/`` and the Qt
widgets that wrap them are the pattern).

What the vetter arranged comes back after a restart or a crash: the queue's order, filters and candidate list
(`SESSION_STATE`, written the moment they change) and the position (``current_key``) live in the store (the task
is the app's setting, saved by the app the moment it changes).

One app instance writes a store (`speco3.vetting.writer_lock.WriterLock`): a second one is told who holds it and
may browse read-only. A data folder that cannot be written (`ReadOnlyStoreError`) leaves the session on a store kept
in memory (`Opened.unsaved` says why) until `move_store` writes it to a folder that can be; `follow_store` tells
when another process (``spec-o3 decide``, ``vet``) wrote to the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from speco3.agent.tasks import get_task
from speco3.engine.choice import SCRIPTED_LABEL
from speco3.errors import Speco3Error, SpectrumReadError, StoreError, TaskError
from speco3.spectra.index import IndexEntry
from speco3.spectra.model import Spectrum
from speco3.vetting.archive_store import Holds, StoreFit, store_fit
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
from speco3.vetting.store import ARCHIVE_ROOT_STATE, ReadOnlyStoreError, VettingStore, read_only_place
from speco3.vetting.writer_lock import Holder, WriterLock

log = logging.getLogger(__name__)

#: Store state key of the arranged queue: ``{"order", "filters", "candidates"}``.
SESSION_STATE = "session"
#: Store state key of the spectrum shown last (its index key), where reopening resumes.
POSITION_STATE = "current_key"
FOLLOWERS = 256  # rows after the current one remembered across a re-query of the queue


def store_key(entry: IndexEntry) -> str:
    """Store key of an index entry: the spectrum address ``PATH#N`` (`IndexEntry.address`)."""
    return entry.address


# -- events ------------------------------------------------------------------------------------------------------
class Event:
    """Callbacks called in order, on the caller's thread, with the event's arguments (no Qt)."""

    def __init__(self) -> None:
        self._observers: list[Callable[..., object]] = []

    def connect(self, fn: Callable[..., object]) -> None:
        self._observers.append(fn)

    def disconnect(self, fn: Callable[..., object]) -> None:
        self._observers.remove(fn)

    def emit(self, *args: object) -> None:
        for fn in list(self._observers):
            fn(*args)


# -- the queue ---------------------------------------------------------------------------------------------------
class Queue(Protocol):
    """The rows the vetter walks, read lazily (the app's `speco3.gui.archive_model.ArchiveTableModel`)."""

    def entry(self, row: int) -> IndexEntry | None: ...

    def loaded_rows(self) -> int: ...

    def fetch_next(self) -> bool:
        """Read the next page; False when every row is loaded."""
        ...

    def has_more(self) -> bool:
        """Whether rows are left to read (`fetch_next` would read a page); reads nothing."""
        ...

    def row_of(self, key: str, fetch_limit: int = 20000) -> int | None: ...


class ListQueue:
    """A queue of explicit entries (all loaded)."""

    def __init__(self, entries: list[IndexEntry]):
        self.entries = list(entries)

    def entry(self, row: int) -> IndexEntry | None:
        return self.entries[row] if 0 <= row < len(self.entries) else None

    def loaded_rows(self) -> int:
        return len(self.entries)

    def fetch_next(self) -> bool:
        return False

    def has_more(self) -> bool:
        return False

    def row_of(self, key: str, fetch_limit: int = 20000) -> int | None:
        return next((i for i, e in enumerate(self.entries) if e.key == key), None)


class SessionSettings(Protocol):
    """What the session reads of the app's settings."""

    auto_advance: bool

    def vetter_name(self) -> str: ...


@dataclass(frozen=True)
class Shown:
    """The spectrum shown: its queue row, index entry and spectrum (None: not readable, ``error`` says why)."""

    row: int
    entry: IndexEntry
    spectrum: Spectrum | None
    error: str | None
    archive: int  # `VettingSession.archive_serial` when it was shown

    @property
    def key(self) -> str:
        return store_key(self.entry)


@dataclass
class SessionView:
    """How the vetter arranged the queue (saved in the store as `SESSION_STATE`; the task is the app's setting)."""

    order: str = "queue"
    filters: dict[str, Any] = field(default_factory=dict)
    candidates: str | None = None

    @classmethod
    def of(cls, value: object) -> SessionView:
        """From the stored JSON; anything malformed reads as the default arrangement (it is a convenience)."""
        if not isinstance(value, dict):
            return cls()
        order, filters, cand = (value.get(k) for k in ("order", "filters", "candidates"))
        return cls(order if isinstance(order, str) else "queue", dict(filters) if isinstance(filters, dict) else {},
                   cand if isinstance(cand, str) else None)

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, "filters": self.filters, "candidates": self.candidates}


@dataclass(frozen=True)
class Opened:
    """What `VettingSession.open_archive` did: ``opened`` False when another instance writes the store and the
    vetter chose not to browse it (nothing is open); ``unsaved``: why decisions are kept in memory only (the data
    folder cannot be written), else None."""

    opened: bool
    unsaved: str | None = None
    fit: StoreFit | None = None  # how a store the vetter chose fits the archive (None: not checked)


# -- the session -------------------------------------------------------------------------------------------------
class VettingSession:
    """See module doc.

    Parameters
    ----------
    settings : SessionSettings
        The vetter's name (`vetter_name`) and whether a decision moves on (`auto_advance`).
    loader : callable
        ``IndexEntry -> Spectrum`` (the app's prefetch cache); may raise `SpectrumReadError`, `Speco3Error` or
        `OSError` (the spectrum is then shown as not readable, with the reason).
    task : str
        The task decided first.

    Events
    ------
    leaving() -- before the spectrum shown changes, the task changes or the store closes (pending notes are stored)
    current_changed(Shown | None) ; row_moved(row) -- the spectrum shown stayed, its row changed (a re-query) ;
    record_changed() -- its stored record changed (or another task's is shown) ; stored(entry key) -- a decision
    was stored for it ; message(text) ; error(text)
    """

    def __init__(self, settings: SessionSettings, loader: Callable[[IndexEntry], Spectrum], task: str = "cv"):
        self.settings = settings
        self._sha256: dict[str, str] = {}  # file -> sha256, hashed once a session for the exports' file_sha256
        self.loader = loader
        self.task_id = task
        self.store: VettingStore | None = None
        self.archive_root: str | None = None
        self.archive_serial = 0  # one more for every archive opened: a spectrum shown before belongs to another
        self.read_only: str | None = None  # why the store is read-only (None: this instance writes it)
        self.unsaved: str | None = None  # why the store is kept in memory only (None: it is a file)
        self._data_version: int | None = None  # the store's `data_version` at the last look (`follow_store`)
        self.queue: Queue = ListQueue([])
        self.shown: Shown | None = None
        self.view = SessionView()
        self.last_switch_ms = 0.0
        self._lock: WriterLock | None = None
        self._followers: list[str] = []
        self.leaving = Event()
        self.current_changed = Event()
        self.row_moved = Event()
        self.record_changed = Event()
        self.stored = Event()
        self.message = Event()
        self.error = Event()

    # -- archive and store ---------------------------------------------------------------------------------------
    def open_archive(self, root: str | Path, store_path: Path,
                     browse_read_only: Callable[[Holder], bool] = lambda holder: True,
                     holds: Holds | None = None) -> Opened:
        """Show nothing, close the store, and open ``store_path`` for the archive ``root``. When another instance
        writes it, ``browse_read_only(holder)`` says whether to open it read-only (else nothing is opened:
        ``Opened.opened`` False). When its place cannot be written (a read-only data folder), the session goes on
        with a store kept in memory, so that the archive can still be browsed and vetted, and ``Opened.unsaved``
        says why (`move_store` then writes it elsewhere). Raises `speco3.errors.StoreError` when the store cannot
        be opened otherwise.

        ``holds`` (the archive's index: store key -> held) marks a store the vetter chose (``--store``, File → Open
        store…, a night's ``vet`` store found beside the archive): an existing one is checked first
        (`speco3.vetting.archive_store.store_fit`, read only) and one that does not belong to the archive is
        refused with `StoreError` saying why, the session left as it was; one in a place that cannot be written is
        opened read-only (its verdicts shown) rather than replaced by an empty store in memory. ``Opened.fit`` says
        how it fits."""
        fit = None
        if holds is not None and store_path.exists():
            fit = store_fit(store_path, root, holds)
            if (problem := fit.problem()) is not None:
                raise StoreError(f"{problem}: not opened for this archive")
        self.close()
        self.archive_serial += 1
        lock = WriterLock(store_path)
        try:
            holder = lock.acquire()
        except OSError as exc:  # its lock file cannot be made: a read-only place, else a store we cannot use
            why = read_only_place(store_path)
            if why is None:
                raise StoreError(f"{store_path}: cannot take its writer lock ({exc.strerror or exc})") from exc
            if fit is not None:
                return self._browse_only(root, store_path, why, fit)
            return self._in_memory(root, f"{store_path}: cannot write the vetting store there: {why}")
        if holder is not None:
            if not browse_read_only(holder):
                return Opened(False)
            self.read_only = f"read-only: this archive's store is being written by {holder.describe()}"
            self.store = VettingStore(store_path, readonly=True)
        else:
            try:
                self.store = VettingStore(store_path)
                self.store.set_state(ARCHIVE_ROOT_STATE, str(root))  # reports are titled by it
            except ReadOnlyStoreError as exc:
                lock.release()
                if fit is not None:
                    return self._browse_only(root, store_path, read_only_place(store_path) or str(exc), fit)
                return self._in_memory(root, str(exc))
            except BaseException:
                if self.store is not None:
                    self.store.close()
                    self.store = None
                lock.release()
                raise
            self._lock = lock
        self._opened(root)
        log.info("vetting store %s%s", store_path, " (read-only)" if self.read_only else "")
        return Opened(True, fit=fit)

    def _browse_only(self, root: str | Path, store_path: Path, why: str, fit: StoreFit) -> Opened:
        """A chosen store that cannot be written where it is: shown read-only (its verdicts and decisions)."""
        self.store = VettingStore(store_path, readonly=True)
        self.read_only = f"read-only: {store_path} cannot be written there ({why})"
        self._opened(root)
        log.info("vetting store %s (read-only: %s)", store_path, why)
        return Opened(True, fit=fit)

    def _in_memory(self, root: str | Path, reason: str) -> Opened:
        log.warning("%s; keeping decisions in memory", reason)
        self.store = VettingStore.in_memory()
        self.store.set_state(ARCHIVE_ROOT_STATE, str(root))
        self.unsaved = reason
        self._opened(root)
        return Opened(True, reason)

    def _opened(self, root: str | Path) -> None:
        assert self.store is not None
        self.archive_root = str(root)
        self.view = SessionView.of(self.store.get_state(SESSION_STATE))
        self._data_version = self.store.data_version()

    def move_store(self, store_path: Path,
                   browse_read_only: Callable[[Holder], bool] = lambda holder: True) -> Opened:
        """Leave a store kept in memory for the file ``store_path`` (another data folder chosen): what it holds is
        written there when no store exists there yet; when one does and the memory holds decisions or notes,
        `StoreError` says so and the memory store stays open (nothing is lost unseen). The spectrum shown stays
        shown. Returns what `open_archive` returns; a store that is a file already stays as it is."""
        store, root = self.store, self.archive_root
        if store is None or root is None or not store.is_in_memory:
            return Opened(store is not None, self.unsaved)
        self.leaving.emit()  # the notes being typed go into the memory store first
        if not store_path.exists():
            store.copy_to(store_path)
        elif store.decisions() or store.annotations():
            raise StoreError(f"{store_path}: a store exists there already; the decisions made since the app started "
                             "are kept in memory only (choose a data folder without a store for this archive)")
        row = self.row if self.shown is not None else None
        opened = self.open_archive(root, store_path, browse_read_only)
        if opened.opened and row is not None:
            self.go_to(row)
        return opened

    def follow_store(self) -> bool:
        """True when another process wrote to the store since the last look (SQLite's ``data_version``: not this
        session's own writes); a store that cannot be read now is looked at again next time."""
        if self.store is None:
            return False
        try:
            version = self.store.data_version()
        except Speco3Error as exc:  # a store gone or locked for long: tried again at the next look
            log.warning("cannot read the store's version: %s", exc)
            return False
        if version == self._data_version:
            return False
        self._data_version = version
        return True

    def close(self, notify: bool = True) -> None:
        """Store what is pending, show nothing and close the store (its writer lock goes); ``notify=False``: no
        `current_changed` (the app is closing)."""
        if self.shown is not None and notify:
            self.clear()
        elif self.store is not None or self.shown is not None:
            self.leaving.emit()
            self.shown = None
        if self.store is not None:
            self.store.close()
        self.store, self.archive_root, self.read_only, self.unsaved = None, None, None, None
        self._data_version = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def set_queue(self, queue: Queue) -> None:
        self.queue = queue

    def set_task(self, task_id: str) -> None:
        """Decide for ``task_id`` from now on (pending notes are stored for the previous task first)."""
        self.leaving.emit()
        self.task_id = task_id
        if self.shown is not None:
            self.record_changed.emit()

    def remember(self, **view: object) -> None:
        """Change and store the queue's arrangement (`SessionView` fields: order, filters, candidates)."""
        for name, value in view.items():
            setattr(self.view, name, value)
        if self.store is not None and self.read_only is None:
            try:
                self.store.set_state(SESSION_STATE, self.view.to_json())
            except Speco3Error as exc:
                self.error.emit(f"queue arrangement not saved: {exc}")

    def save_position(self) -> None:
        """Store the spectrum shown as the queue position (`resume` goes back to it)."""
        if self.store is not None and self.read_only is None and self.shown is not None:
            self.store.set_state(POSITION_STATE, self.shown.entry.key)

    # -- what is shown -------------------------------------------------------------------------------------------
    @property
    def row(self) -> int:
        return self.shown.row if self.shown is not None else -1

    @property
    def entry(self) -> IndexEntry | None:
        return self.shown.entry if self.shown is not None else None

    @property
    def spectrum(self) -> Spectrum | None:
        return self.shown.spectrum if self.shown is not None else None

    def go_to(self, row: int) -> bool:
        """Show the queue's ``row`` (False when there is none); at the last row read, the next page is read first
        (`move_refusal` reads none)."""
        entry = self.queue.entry(row)
        if entry is None:
            return False
        t0 = time.perf_counter()
        self.leaving.emit()  # notes still being typed belong to the spectrum we leave
        spectrum, error = None, None
        try:
            spectrum = self.loader(entry)
        except (SpectrumReadError, Speco3Error, OSError) as exc:
            error = str(exc)
            self.error.emit(f"{entry.key}: {exc}")
        self.shown = Shown(row, entry, spectrum, error, self.archive_serial)
        if row == self.queue.loaded_rows() - 1:  # the last row read: read on, so that Next knows whether one
            self.queue.fetch_next()  # follows (a verdict-state filter's pages left may hold none: Next greyed)
        self.current_changed.emit(self.shown)
        self.record_changed.emit()
        self.last_switch_ms = (time.perf_counter() - t0) * 1000
        return True

    def clear(self) -> None:
        """Show nothing (an empty queue, another archive)."""
        self.leaving.emit()
        self.shown = None
        self.current_changed.emit(None)
        self.record_changed.emit()

    def step(self, delta: int) -> bool:
        """Show the spectrum ``delta`` rows on (False, the reason said, when `move_refusal` refuses)."""
        if (reason := self.move_refusal(delta)) is not None:
            self.message.emit(reason)
            return False
        target = self.row + delta
        while target >= self.queue.loaded_rows() and self.queue.fetch_next():
            pass
        if 0 <= target < self.queue.loaded_rows():
            return self.go_to(target)
        self.message.emit("end of the queue")  # the pages left held no row (a verdict-state filter)
        return False

    def next_undecided(self) -> bool:
        if (reason := self.move_refusal(1)) is not None:
            self.message.emit(reason)
            return False
        r = self.row + 1
        while True:
            if r >= self.queue.loaded_rows() and not self.queue.fetch_next():
                self.message.emit("no undecided spectrum after this one")
                return False
            entry = self.queue.entry(r)
            if entry is not None and self.decision_of(entry) is None:
                return self.go_to(r)
            r += 1

    def resume(self) -> bool:
        """Show the spectrum shown last in this store (else the first row)."""
        key = self.store.get_state(POSITION_STATE) if self.store is not None else None
        row = self.queue.row_of(key) if isinstance(key, str) else None
        ok = self.go_to(row if row is not None else 0)
        if ok and row is not None and self.shown is not None:
            self.message.emit(f"resumed at {self.shown.entry.key}")
        return ok

    def before_requery(self) -> None:
        """The queue is about to be read again (a verdict under a state filter, a sort): remember what follows."""
        first = self.row + 1
        last = min(first + FOLLOWERS, self.queue.loaded_rows())
        self._followers = [e.key for e in (self.queue.entry(r) for r in range(first, last)) if e is not None]

    def after_requery(self) -> bool:
        """The queue was read again: keep showing the same spectrum at its new row (True), or, when the queue no
        longer lists it, at the row before the first of its old followers still listed, so that the next step goes
        on to it (False). Emits `row_moved` with the row."""
        if self.shown is None:
            return False
        limit = max(self.shown.row + 1, 0) + FOLLOWERS
        row = self.queue.row_of(self.shown.entry.key, fetch_limit=limit)
        listed = row is not None
        if row is None:
            loaded = {e.key: r for r in range(self.queue.loaded_rows()) if (e := self.queue.entry(r)) is not None}
            after = next((loaded[k] for k in self._followers if k in loaded), None)
            row = (after if after is not None else self.queue.loaded_rows()) - 1
        self.shown = Shown(row, self.shown.entry, self.shown.spectrum, self.shown.error, self.shown.archive)
        self.row_moved.emit(row)
        return listed

    # -- refusals ------------------------------------------------------------------------------------------------
    def store_refusal(self) -> str | None:
        """Why nothing can be written to the store now (None: it can)."""
        if self.store is None:
            return "open an archive first"
        return self.read_only

    def move_refusal(self, delta: int) -> str | None:
        """Why a step of ``delta`` rows (Previous -1; Next and next undecided +1) cannot move (None: it can): no
        archive open (the start screen), an empty queue, the start or the end of the queue. Reads no page."""
        if self.store is None:
            return "open an archive first: nothing to move to"
        loaded, more = self.queue.loaded_rows(), self.queue.has_more()
        if not loaded and not more:
            return "the queue is empty (see the filters)"
        target = self.row + delta
        if target < 0:
            return "start of the queue"
        if target >= loaded and not more:
            return "end of the queue"
        return None

    def view_refusal(self, what: str = "nothing to view") -> str | None:
        """Why there is no spectrum to look at (None: a readable one is shown, in a read-only store too): the viewer
        keys (zoom, pan, smoothing, frame, lines, y-range, Z) say it on the start screen, with an empty table and on
        an unreadable file; ``what`` ends the sentence."""
        if self.store is None:
            return f"open an archive first: {what}"
        if self.shown is None:
            return f"no spectrum shown (the table is empty): {what}"
        if self.shown.spectrum is None:
            return f"{self.shown.entry.name}: not readable ({self.shown.error or 'no data'}): {what}"
        return None

    def refusal(self, what: str = "nothing decided") -> str | None:
        """Why nothing can be written for the spectrum shown (None: a readable spectrum of this archive is shown
        and the store is writable); ``what`` ends the sentence."""
        reason = self.store_refusal()
        if reason is not None:
            return f"{reason}: {what}"
        if self.shown is not None and self.shown.archive != self.archive_serial:
            return f"the spectrum shown is of another archive: {what}"
        return self.view_refusal(what)

    # -- decisions and notes -------------------------------------------------------------------------------------
    def decide(self, decision: str, flags: list[str], comment: str, evidence: list[Evidence],
               advance: bool | None = None,
               fit: tuple[float | None, int | None, str | None, str | None] = (None, None, None, None)) -> bool:
        """Store the vetter's decision on the spectrum shown now, with their (z, confidence 0-4, class, subclass)
        ``fit``; move on when ``advance`` (default: the setting) says so. Refused (the reason as a message, False)
        unless `refusal` is None."""
        reason = self.refusal()
        if reason is not None or self.shown is None or self.store is None:
            self.message.emit(reason or "nothing decided")
            return False
        shown, key = self.shown, self.shown.key
        mv = self.store.latest_model_verdict(key, self.task_id)
        rec = Decision(spectrum_key=key, task=self.task_id, decision=decision, flags=list(flags), comment=comment,
                       vetter=self.settings.vetter_name(), model_verdict_seen=mv.verdict if mv else None,
                       model_verdict_id=mv.id if mv else None, evidence=list(evidence), vetter_z=fit[0],
                       z_conf=fit[1], vetter_class=fit[2], vetter_subclass=fit[3])
        if (problem := rec.fit_problem()) is not None:  # a confidence without a z, a z out of range …
            self.message.emit(f"{problem}: nothing decided")
            return False
        try:
            info = self.store.spectrum_info(key)
            if shown.spectrum is not None and (info is None or info.file_sha256 is None):  # what exports show of it
                path = shown.spectrum.meta.path
                self.store.record_spectrum(SpectrumInfo.of(key, shown.spectrum,
                                                           file_sha256(path, self._sha256) if path else None))
            self.store.record_decision(rec)
        except Speco3Error as exc:
            self.error.emit(f"decision not saved: {exc}")
            return False
        self.stored.emit(shown.entry.key)
        self.record_changed.emit()
        self.message.emit(f"{decision} saved for {shown.entry.name}")  # replaces an older note in the status bar
        if self.settings.auto_advance if advance is None else advance:
            self.step(1)
        return True

    def save_notes(self, flags: list[str], comment: str, evidence: list[Evidence]) -> bool:
        """Store the shown spectrum's flags, comment and evidence windows now (decided or not); False when they
        could not be (the reason as a message)."""
        reason = self.refusal("flags, comment and evidence not saved")
        if reason is not None or self.shown is None or self.store is None:
            if self.shown is not None and (flags or comment or evidence):  # nothing typed: nothing lost
                self.message.emit(reason or "not saved")
            return False
        try:
            self.store.save_annotation(self.shown.key, self.task_id, list(flags), comment,
                                       self.settings.vetter_name(), evidence=evidence)
        except Speco3Error as exc:
            self.error.emit(f"flags/comment/evidence not saved: {exc}")
            return False
        self._warn_labels(evidence)
        return True

    def _warn_labels(self, evidence: list[Evidence]) -> None:
        """A label naming a line of the task's list that lies outside its window at the spectrum's z (windows are
        observed-frame; `speco3.vetting.records.label_warnings`, as ``spec-o3 decide`` warns) becomes a message."""
        if self.spectrum is None or not evidence:
            return
        try:
            lines = get_task(self.task_id).lines
        except TaskError:  # a task file gone since: nothing to check against
            return
        warnings = label_warnings(evidence, lines, self.spectrum.z)
        if warnings:
            self.message.emit("warning: " + warnings[0])

    def update_notes(self, flags: list[str], comment: str, evidence: list[Evidence]) -> None:
        """Flags ticked, comment entered or evidence changed: store them now; a decided spectrum's decision is
        stored again with them (unless it already holds them)."""
        if not self.save_notes(flags, comment, evidence) or self.shown is None or self.store is None:
            return
        dec = self.store.decision(self.shown.key, self.task_id)
        if dec is None:
            self.message.emit("notes saved (not decided yet)")
            return
        if (dec.flags, dec.comment, dec.evidence) == (list(flags), comment, list(evidence)):
            return
        self.decide(dec.decision, flags, comment, evidence, advance=False,  # the vetter's z and class stay with it
                    fit=(dec.vetter_z, dec.z_conf, dec.vetter_class, dec.vetter_subclass))

    def current_notes(self) -> Notes:
        """(flags, comment, evidence) of the spectrum shown as last left (notes or the decision, whichever is
        newer)."""
        if self.shown is None or self.store is None:
            return Notes([], "", [])
        return self.store.notes(self.shown.key, self.task_id)

    # -- what the store holds ------------------------------------------------------------------------------------
    def decision_of(self, entry: IndexEntry) -> Decision | None:
        return self.store.decision(store_key(entry), self.task_id) if self.store is not None else None

    def state_of(self, entry: IndexEntry) -> tuple[str | None, str | None]:
        """(latest model verdict, human decision) of an index entry for the task; a run without a verdict to accept
        shows what it came to (``abstained``, ``tie``, ``no_answer``, ``format_error`` …), never the majority it
        abstained on."""
        if self.store is None:
            return None, None
        key = store_key(entry)
        mv = self.store.latest_model_verdict(key, self.task_id)
        dec = self.store.decision(key, self.task_id)
        verdict = (mv.suggestion or mv.outcome) if mv else None
        if verdict and mv is not None and mv.model_id == SCRIPTED_LABEL:  # never shown (or filtered) as a model's
            verdict = f"{verdict} (demo)"  # the scripted demo: its answers are the catalogue's, not a model's
        return verdict, (dec.decision if dec else None)

    def confidence_of(self, entry: IndexEntry) -> ModelVerdict | None:
        """The latest model verdict of an entry for the task (its ``p_yes``, ``abstained`` … feed the confidence
        column and the triage); None without one, and for the scripted demo (not a model)."""
        if self.store is None:
            return None
        mv = self.store.latest_model_verdict(store_key(entry), self.task_id)
        return None if mv is None or mv.model_id == SCRIPTED_LABEL else mv

    def model_suggestion(self) -> ModelVerdict | None:
        if self.shown is None or self.store is None:
            return None
        return self.store.latest_model_verdict(self.shown.key, self.task_id)

    def model_windows(self) -> list[Evidence]:
        """The zoom windows of the latest model run on the spectrum shown for the task, as evidence windows in
        the observed frame (`model_evidence`); none for the scripted demo, which is not a model."""
        mv = self.model_suggestion()
        if mv is None or mv.id is None or mv.model_id == SCRIPTED_LABEL or self.spectrum is None \
                or self.store is None:
            return []
        return model_evidence(self.store.rollouts(mv.id), self.spectrum.z)

    def decided_count(self) -> int | None:
        return self.store.decision_count(self.task_id) if self.store is not None else None

    def current_record(self) -> tuple[Decision | None, ModelVerdict | None]:
        """(stored `Decision` or None, latest `ModelVerdict` or None) of the spectrum shown."""
        if self.shown is None or self.store is None:
            return None, None
        return self.store.decision(self.shown.key, self.task_id), self.model_suggestion()

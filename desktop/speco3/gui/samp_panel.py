"""SAMP in the main window: a toolbar toggle (off by default), status, the peers menu, send actions, receive handlers.

The `speco3.interop.SampLink` runs on threads of its own; its events (plain frozen dataclasses) go into a
thread-safe queue that a timer on the GUI thread drains and re-emits as the ``event`` signal. No SAMP thread ever
holds, touches or releases a Qt object. Received messages act on the window: TOPCAT's ``table.highlight.row`` /
``table.select.rowList`` of a table sent from here select those spectra, ``coord.pointAt.sky`` selects the
nearest archive spectrum within ``AppSettings.samp_match_arcsec``, and ``table.load.votable`` opens the table as
the vetting queue through the candidate-list loader once the user has said yes (a dialog naming the peer; the
answer may be remembered per peer name: `speco3.interop.consent.QueueConsent`, ``AppSettings.samp_table_peers``).
What a peer may make the app read at all is `speco3.interop.fetch`'s to decide. `shutdown` stops the link (joining
its threads) and is called from the window's ``closeEvent`` before any widget goes away.
"""

from __future__ import annotations

import logging
import queue
from concurrent.futures import Future
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QCheckBox, QLabel, QMenu, QMessageBox, QToolBar, QToolButton

from speco3.gui.dialogs import dialogs_off
from speco3.gui.text import message
from speco3.interop.consent import QueueConsent

if TYPE_CHECKING:  # the window owns the panel; SAMP (pyvo) loads when switched on
    from speco3.gui.main_window import MainWindow
    from speco3.interop.hubs import Peer
    from speco3.interop.messages import LoadTable
    from speco3.interop.samp import SampEvent, SampLink

log = logging.getLogger(__name__)

STATE_TEXT = {"off": "SAMP off", "connected": "SAMP on", "lost": "SAMP: hub lost", "error": "SAMP: not connected"}


class SampPanel(QObject):
    """See module doc. ``window`` is the `MainWindow` (its vetting controller, table model, index, status bar)."""

    received = Signal(object)  # (not `event`: that name is QObject.event(), the event handler Qt calls)

    def __init__(self, window: MainWindow, timeout: float = 5.0):
        super().__init__(window)
        self.window = window
        self.timeout = timeout
        self.link: SampLink | None = None
        self.inbox: queue.Queue[SampEvent | tuple[str, str, str]] = queue.Queue()
        self.last_status = ""
        # the user's answers per peer name; the same dict as the settings', saved with them
        self.consent = QueueConsent(window.settings.samp_table_peers)
        self.asking: QMessageBox | None = None  # the open "replace the queue?" question, one at a time
        self.timer = QTimer(self, interval=50)
        self.timer.timeout.connect(self.drain)
        self.received.connect(self._handle)

        self.toolbar = QToolBar("SAMP", window, objectName="sampToolbar")
        self.toggle = QAction("SAMP", self, checkable=True, objectName="sampToggle",
                              toolTip="Connect to a SAMP hub to exchange data with TOPCAT, SPLAT-VO and Aladin")
        self.toggle.toggled.connect(self.set_enabled)
        self.send_spectrum_action = QAction("Send spectrum", self, triggered=self.send_spectrum, enabled=False)
        self.send_table_action = QAction("Send table", self, triggered=self.send_table, enabled=False)
        self.point_action = QAction("Point sky viewers", self, triggered=self.point_at, enabled=False)
        self.peers_menu = QMenu("Peers", window, objectName="sampPeers")
        self.start_hub_action = QAction("Start a SAMP hub", self, triggered=self.start_hub)
        peers_button = QToolButton(text="Peers", popupMode=QToolButton.ToolButtonPopupMode.InstantPopup)
        peers_button.setMenu(self.peers_menu)
        for act in (self.toggle, self.send_spectrum_action, self.send_table_action, self.point_action):
            self.toolbar.addAction(act)
        self.toolbar.addWidget(peers_button)
        window.addToolBar(self.toolbar)
        self.status = QLabel(STATE_TEXT["off"], objectName="sampStatus")
        window.statusBar().addPermanentWidget(self.status)
        self._fill_peers(())
        if window.settings.samp_enabled:
            self.toggle.setChecked(True)

    # -- switching ---------------------------------------------------------------------------------------------
    def set_enabled(self, on: bool) -> None:
        """Switch SAMP on (connect to the running hub) or off (disconnect; temporary files removed)."""
        if self.window.settings.samp_enabled != on:
            self.window.settings.samp_enabled = on
            self.window._save_settings()
        if on and self.link is None:
            from speco3.interop import SampLink

            self.link = SampLink(self.inbox.put, timeout=self.timeout,
                                 max_table_bytes=int(self.window.settings.samp_max_table_mb) * 2**20)
            self.timer.start()
            self._watch(self.link.connect(), "connect")
        elif not on and self.link is not None:
            self.shutdown()
            self._set_state("off", "SAMP off")

    def start_hub(self) -> None:
        if self.link is None:
            self.toggle.setChecked(True)  # set_enabled makes the link
        if self.link is not None:
            self._watch(self.link.start_hub(), "start hub")

    def _watch(self, fut: Future[object], what: str) -> None:
        inbox = self.inbox  # the callback holds the plain queue only
        fut.add_done_callback(lambda f: inbox.put(("failed", what, str(f.exception()))) if f.exception() else None)

    def shutdown(self) -> None:
        """Stop the link and its threads (joined here), stop draining; safe to call twice."""
        link, self.link = self.link, None
        self.timer.stop()
        if link is not None:
            link.stop(timeout=self.timeout)
        while not self.inbox.empty():
            self.inbox.get_nowait()
        self._fill_peers(())
        for act in (self.send_spectrum_action, self.send_table_action, self.point_action):
            act.setEnabled(False)

    # -- events (GUI thread) ---------------------------------------------------------------------------------
    def drain(self) -> None:
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return
            self.received.emit(item)

    def _handle(self, item: SampEvent | tuple[str, str, str]) -> None:
        from speco3.interop import messages as m
        from speco3.interop.samp import Peers, Status

        try:
            if isinstance(item, tuple) and item and item[0] == "failed":
                self._failed(item[1], item[2])
            elif isinstance(item, Status):
                self._set_state(item.state, item.text)
            elif isinstance(item, Peers):
                self._fill_peers(item.peers)
            elif isinstance(item, m.Malformed):
                pass  # the link has already reported it as a status message
            elif isinstance(item, m.Highlight | m.SelectRows):
                self.select_keys(list(item.keys), jump_only=isinstance(item, m.Highlight))
            elif isinstance(item, m.PointAt):
                self.select_near(item.ra, item.dec)
            elif isinstance(item, m.LoadTable):
                self.load_table(item)
        except Exception as exc:  # a message must never take the window down
            log.exception("SAMP event %r failed", item)
            self.message(f"SAMP: could not act on a message: {exc}")

    def _failed(self, what: str, reason: str) -> None:
        self.message(f"SAMP {what}: {reason}")
        if what == "connect" and "no SAMP hub running" in reason and self.link is not None and not dialogs_off() \
                and QMessageBox.question(
                    self.window, "SAMP", "No SAMP hub is running. Start one in Spec-o3?\n(TOPCAT, SPLAT-VO and "
                    "Aladin started later will join it.)") == QMessageBox.StandardButton.Yes:
            self.start_hub()

    def _set_state(self, state: str, text: str) -> None:
        self.last_status = text
        if state in STATE_TEXT:
            self.status.setText(STATE_TEXT[state] + (f" ({len(self.link.peers)} peers)" if state == "connected"
                                                     and self.link else ""))
            connected = state == "connected"
            for act in (self.send_spectrum_action, self.send_table_action, self.point_action):
                act.setEnabled(connected)
        self.message(f"SAMP: {text}")

    def _fill_peers(self, peers: tuple[Peer, ...]) -> None:
        self.peers_menu.clear()
        self.peers_menu.addAction(self.start_hub_action)
        self.peers_menu.addSeparator()
        if not peers:
            self.peers_menu.addAction(QAction("(no other application)", self.peers_menu, enabled=False))
        for p in peers:
            takes = ", ".join(p.capabilities) or "no shared message types"  # as the hub matched them (Peer.accepts)
            name = p.name.replace("&", "&&")  # the peer's own text: no mnemonic from it
            self.peers_menu.addAction(QAction(f"{name} — {takes}", self.peers_menu, enabled=False))
        if self.link is not None and self.link.connected:
            self.status.setText(f"{STATE_TEXT['connected']} ({len(peers)} peers)")

    def message(self, text: str) -> None:
        self.window.show_message(text)

    # -- sending -----------------------------------------------------------------------------------------------
    def _ready(self) -> SampLink | None:
        """The link when it is connected; else None, and the user is told."""
        if self.link is None or not self.link.connected:
            self.message("SAMP is not connected (switch it on in the toolbar)")
            return None
        return self.link

    def send_spectrum(self) -> None:
        spec = self.window.vetting.spectrum
        link = self._ready()
        if link is None or spec is None:
            return self.message("no spectrum to send") if spec is None else None
        self._watch(link.send_spectrum(spec), "send spectrum")

    def send_table(self) -> None:
        from speco3.gui.vetting import store_key
        from speco3.interop.tables import queue_table

        link = self._ready()
        if link is None:
            return
        model = self.window.table_model
        model.fetch_all()
        entries = [e for e in (model.entry(r) for r in range(model.loaded_rows())) if e is not None]
        if not entries:
            return self.message("the queue is empty: nothing to send")
        vetting = self.window.vetting
        table, keys = queue_table(entries, vetting.store, vetting.task_id, store_key)
        self._watch(link.send_table(table, keys, "spec-o3 queue"), "send table")

    def position(self) -> tuple[float, float] | None:
        """RA/Dec of the current spectrum: from the file's header, else from the archive index entry."""
        spec, entry = self.window.vetting.spectrum, self.window.vetting.entry
        for ra, dec in ((spec.meta.ra, spec.meta.dec) if spec is not None else (None, None),
                        (entry.ra, entry.dec) if entry is not None else (None, None)):
            if ra is not None and dec is not None:
                return float(ra), float(dec)
        return None

    def point_at(self) -> None:
        pos = self.position()
        link = self._ready()
        if link is None or pos is None:
            return self.message("this spectrum has no RA/Dec (header or index)") if pos is None else None
        self._watch(link.point_at(*pos), "point at")

    # -- receiving ---------------------------------------------------------------------------------------------
    def select_keys(self, keys: list[str], jump_only: bool) -> None:
        """Go to the first of ``keys`` (archive keys); a selection of several becomes the queue."""
        w = self.window
        if jump_only or len(keys) == 1:
            row = w.table_model.row_of(keys[0])
            if row is not None:
                w.vetting.go_to(row)
                return self.message(f"SAMP: highlighted {keys[0]}")
        entries = [e for e in (w.index.get(k) for k in keys) if e is not None] if w.index is not None else []
        if not entries:
            return self.message(f"SAMP: {len(keys)} selected rows are not in the open archive")
        w.table_model.set_entries(entries)
        w.vetting.go_to(0)
        self.message(f"SAMP: {len(entries)} selected spectra are now the queue")

    def select_near(self, ra: float, dec: float) -> None:
        from speco3.interop.tables import nearest_entry

        w = self.window
        if w.index is None:
            return self.message("SAMP: open an archive to select spectra by position")
        radius = float(w.settings.samp_match_arcsec)
        found = nearest_entry(w.index, ra, dec, radius)
        if found is None:
            return self.message(f"SAMP: no spectrum within {radius:g}″ of RA {ra:.5f}, Dec {dec:+.5f}")
        entry, sep = found
        row = w.table_model.row_of(entry.key)
        if row is None:
            w.table_model.set_entries([entry])
            row = 0
        w.vetting.go_to(row)
        self.message(f"SAMP: selected {entry.name}, {sep:.2f}″ from RA {ra:.5f}, Dec {dec:+.5f}")

    def load_table(self, item: LoadTable) -> None:
        """A table a peer sent: it replaces the queue once the user says so (remembered answers apply)."""
        if not item.path:
            return self.message(f"SAMP: table {item.name or item.url} could not be read")
        peer, table = item.sender_name or item.sender, item.name or "a table"
        known = self.consent.known(peer)
        if known is not None:
            return self._load(item) if known else self.message(
                f"SAMP: ignored {table} from {peer} (you chose never to load tables from it)")
        if dialogs_off():
            return self.message(f"SAMP: {peer} offers {table}; not loaded (no dialogs to ask you)")
        if self.asking is not None:
            return self.message(f"SAMP: ignored {table} from {peer}: another table is waiting for your answer")
        box = message(self.window, "SAMP: replace the vetting queue?",
                      f"The application “{peer}” sends the table “{table}”.\n\nReplace the vetting queue with the "
                      "spectra of the open archive that it lists? (Your decisions are kept either way.)",
                      QMessageBox.Icon.Question)
        box.setObjectName("sampTableQuestion")
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        box.setDefaultButton(QMessageBox.StandardButton.No)
        remember = QCheckBox(f"Always answer this way for “{peer.replace('&', '&&')}”", objectName="sampRemember")
        remember.setToolTip("SAMP applications name themselves: any application on this desktop could use this name")
        box.setCheckBox(remember)
        box.finished.connect(lambda result: self._answered(item, peer, result == QMessageBox.StandardButton.Yes,
                                                           remember.isChecked()))
        self.asking = box
        box.open()

    def _answered(self, item: LoadTable, peer: str, load: bool, remember: bool) -> None:
        box, self.asking = self.asking, None
        if box is not None:
            box.deleteLater()
        self.consent.answer(peer, load, remember)
        if remember:
            self.window._save_settings()
        if load:
            self._load(item)
        else:
            self.message(f"SAMP: {item.name or 'the table'} from {peer} not loaded")

    def _load(self, item: LoadTable) -> None:
        n = self.window.load_candidates(item.path)
        self.message(f"SAMP: {item.name or 'table'} from {item.sender_name or item.sender}: {n} spectra in the queue")

"""`SampLink`: this app as a SAMP client (pyvo.samp), on threads of its own, with a timeout on every call.

Nothing here blocks its caller: each operation is queued to the link's worker thread and returns a
``concurrent.futures.Future``; a watchdog fails a job that overruns its deadline (a hub that stopped answering)
and replaces the stuck worker. What happens is reported to ``on_event`` as plain data (`Status`, `Peers` and the
incoming events of `speco3.interop.messages`); that callback runs on the link's or pyvo's threads, so a GUI must
pass the events on through a queued signal and never touch widgets there.

Loopback only: the hub's URL must point at this machine (else the connection is refused), the callback server
listens on 127.0.0.1, pyvo's internet probe is switched off, and ``SAMP_HUB=std-lockurl:`` may name only a local
lockfile. Nothing opens a socket until `connect` or `start_hub` is called.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import logging
import queue
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from speco3 import __version__
from speco3.interop import messages as msg
from speco3.interop.fetch import DEFAULT_MAX_BYTES, Refused, check_url, download, local_table
from speco3.interop.files import MIME, Outbox, TempFolder, write_spectrum, write_table_votable
from speco3.interop.hubs import (
    Peer,
    Peers,
    SampError,
    Status,
    close_client,
    lockfile_path,
    pyvo_samp,
    read_hub_params,
    reply_text,
    with_state,
)

if TYPE_CHECKING:  # pyvo (untyped) and astropy load when SAMP is switched on
    from astropy.table import Table
    from pyvo.samp import SAMPHubServer, SAMPIntegratedClient

    from speco3.spectra.model import Spectrum

log = logging.getLogger(__name__)

#: What the link reports to ``on_event`` (see module doc).
SampEvent = Status | Peers | msg.Incoming
_T = TypeVar("_T")

APP_NAME = "Spec-o3 Desktop"
DESCRIPTION = "Inspect FITS spectra and vet rare-object candidates with the Spec-o3 model, offline"
HUB_EVENTS = ("samp.hub.event.register", "samp.hub.event.unregister", "samp.hub.event.metadata",
              "samp.hub.event.subscriptions")
ICON = Path(__file__).with_name("icon.png")


class SampLink:
    """See module doc. ``timeout`` bounds each hub call and each peer's reply (seconds); ``max_table_bytes`` a
    table a peer sends (a file it names or a download)."""

    def __init__(self, on_event: Callable[[SampEvent], None] | None = None, *, timeout: float = 5.0,
                 ping_interval: float = 2.0, name: str = APP_NAME, files: TempFolder | Outbox | None = None,
                 max_table_bytes: int = DEFAULT_MAX_BYTES):
        self.on_event = on_event or (lambda _e: None)
        self.timeout = float(timeout)
        self.ping_interval = ping_interval
        self.name = name
        self.files = files if files is not None else TempFolder()  # where sent copies live (see interop.files)
        self.max_table_bytes = int(max_table_bytes)  # cap on a table a peer sends (speco3.interop.fetch)
        self.peers: tuple[Peer, ...] = ()
        self.state = "off"
        self._client: SAMPIntegratedClient | None = None
        self._hub: SAMPHubServer | None = None
        self._tables: dict[str, tuple[str, ...]] = {}  # table-id -> row keys of a table this link sent
        self._urls: dict[str, str] = {}  # url -> table-id
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._worker = self._start_worker(self._queue)
        self._closed = False

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _emit(self, event: SampEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # a broken listener must not kill SAMP threads
            log.exception("SAMP event listener failed on %r", event)

    def _status(self, state: str, text: str) -> None:
        if state in ("off", "connected", "lost", "error"):
            self.state = state
        log.info("SAMP %s: %s", state, text)
        self._emit(Status(state, text))

    def _start_worker(self, q: queue.Queue) -> threading.Thread:
        t = threading.Thread(target=self._work, args=(q,), name="speco3-samp", daemon=True)
        t.start()
        return t

    def _work(self, q: queue.Queue) -> None:
        while True:
            try:
                item = q.get(timeout=self.ping_interval)
            except queue.Empty:
                if self._client is not None and q is self._queue and not self._closed:
                    self._submit(self._ping, "ping")  # notices a hub that vanished without a word
                continue
            if item is None:
                return
            fn, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # reported through the future and as a status message
                with_state(fut, exc=exc)
            else:
                with_state(fut, result=result)

    def _submit(self, fn: Callable[[], object], what: str, deadline: float | None = None) -> cf.Future:
        fut: cf.Future = cf.Future()
        if self._closed:
            fut.set_exception(SampError("SAMP link closed"))
            return fut
        q = self._queue
        q.put((lambda: self._guarded(fn, what), fut))
        timer = threading.Timer(deadline or self.timeout + 3.0, self._overdue, args=(fut, q, what))
        timer.daemon = True
        timer.start()
        fut.add_done_callback(lambda _f: timer.cancel())
        return fut

    def _overdue(self, fut: cf.Future, q: queue.Queue, what: str) -> None:
        if fut.done():
            return
        with_state(fut, exc=SampError(f"{what}: the SAMP hub did not answer in time"))
        with self._lock:
            if q is self._queue:  # replace the stuck worker; it exits when its call returns
                self._queue = queue.Queue()
                self._worker = self._start_worker(self._queue)
                q.put(None)
        self._drop_client()
        self._status("lost", f"{what}: the SAMP hub did not answer within {self.timeout:g} s; disconnected")

    def _guarded(self, fn: Callable[[], _T], what: str) -> _T:
        try:
            return fn()
        except SampError as exc:
            self._status("error", str(exc))
            raise
        except OSError as exc:  # connection refused / reset: the hub is gone
            self._drop_client()
            self._status("lost", f"{what}: lost the SAMP hub ({exc.strerror or exc})")
            raise SampError(f"{what}: lost the SAMP hub ({exc.strerror or exc})") from exc
        except Exception as exc:  # pyvo errors, garbage from the hub
            self._status("error", f"{what}: {type(exc).__name__}: {exc}")
            raise SampError(f"{what}: {exc}") from exc

    @property
    def connected(self) -> bool:
        return self._client is not None

    # -- connection --------------------------------------------------------------------------------------------
    def connect(self, hub_params: dict[str, str] | None = None) -> cf.Future:
        """Register with the running hub (the lockfile's, or ``hub_params``)."""
        return self._submit(lambda: self._connect(hub_params), "connect")

    def start_hub(self) -> cf.Future:
        """Start a hub in this process (loopback, standard profile only), then connect to it."""
        return self._submit(self._start_hub, "start hub", deadline=self.timeout + 15.0)

    def disconnect(self) -> cf.Future:
        return self._submit(self._disconnect, "disconnect")

    def _start_hub(self) -> bool:
        samp = pyvo_samp()
        if self._hub is None:
            path = lockfile_path()
            hub = samp.SAMPHubServer(addr="127.0.0.1", web_profile=False, lockfile=str(path),
                                     label=f"{APP_NAME} hub")
            hub.start(wait=False)
            self._hub = hub
            self._status("info", f"started a SAMP hub (lockfile {path})")
        return self._connect(self._hub.params)

    def _connect(self, hub_params: dict[str, str] | None) -> bool:
        samp = pyvo_samp()
        if self._client is not None:
            return True
        params = dict(hub_params) if hub_params is not None else read_hub_params()
        meta = {"samp.name": self.name, "samp.description.text": DESCRIPTION, "speco3.version": __version__,
                "samp.icon.url": ICON.resolve().as_uri(), "author.name": "Spec-o3"}
        client = samp.SAMPIntegratedClient(metadata=meta, addr="127.0.0.1")
        client.connect(hub_params=params, pool_size=4)
        try:
            for mtype in msg.RECEIVED:
                client.bind_receive_message(mtype, self._receive, declare=False)
            for mtype in HUB_EVENTS:
                client.bind_receive_notification(mtype, self._hub_event, declare=False)
            client.bind_receive_notification("samp.hub.event.shutdown", self._hub_shutdown, declare=False)
            client.bind_receive_notification("samp.hub.disconnect", self._hub_shutdown, declare=False)
            client.declare_subscriptions()
        except Exception:
            close_client(client)
            raise
        self._client = client
        self._status("connected", f"connected to {params.get('hub.label') or 'the SAMP hub'} as "
                                  f"{client.get_public_id()}")
        self._refresh_peers()
        return True

    def _disconnect(self) -> bool:
        had = self._client is not None
        self._drop_client()
        if had:
            self._status("off", "SAMP disconnected")
        return had

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            close_client(client)
        if self.peers:
            self.peers = ()
            self._emit(Peers(()))

    def _ping(self) -> None:
        if self._client is not None:
            self._client.ping()

    def _require(self) -> SAMPIntegratedClient:
        if self._client is None:
            raise SampError("SAMP is not connected")
        return self._client

    def stop(self, timeout: float = 5.0) -> None:
        """Disconnect, stop a hub this link started, end the worker thread and remove the temporary files (an
        `Outbox` keeps its recent files for peers that load them later)."""
        if self._closed:
            return
        fut = self.disconnect()
        try:
            fut.result(timeout)
        except Exception as exc:
            log.debug("SAMP disconnect on stop: %s", exc)
        self._closed = True
        with self._lock:
            worker, q = self._worker, self._queue
        q.put(None)
        worker.join(timeout)
        if self._client is not None:  # the worker was stuck: close the client's server here
            self._drop_client()
        if self._hub is not None:
            hub, self._hub = self._hub, None
            hub.stop()
        self.files.cleanup()

    # -- peers -------------------------------------------------------------------------------------------------
    def _subscribers(self, client: SAMPIntegratedClient, mtype: str) -> set[str]:
        """Ids of the clients subscribed to ``mtype``, as the hub says (``getSubscribedClients``): the hub applies
        the SAMP standard's wildcard rules (``*``, ``table.*``, ``table.load.*``), so no pattern is matched here."""
        subs = client.get_subscribed_clients(mtype)
        if not isinstance(subs, dict):
            raise SampError(f"the SAMP hub answered getSubscribedClients({mtype}) with {str(subs)[:60]!r}")
        return {str(cid) for cid in subs}

    def _refresh_peers(self) -> None:
        client = self._require()
        skip = {client.get_public_id(), getattr(client.client, "_hub_id", None) or "hub"}  # self and the hub
        takes = {mtype: self._subscribers(client, mtype) for mtype in msg.SENT}
        peers = []
        for cid in client.get_registered_clients():
            if cid in skip:
                continue
            try:
                meta = client.get_metadata(cid)
                subs = client.get_subscriptions(cid)
            except Exception:
                # the hub refuses to describe a client that has just left (a one-shot sender such as JSAMP's
                # messagesender): skip that one; any other failure is raised
                if cid not in client.get_registered_clients():
                    continue
                raise
            name = meta.get("samp.name") if isinstance(meta, dict) else None
            mtypes = tuple(sorted(subs)) if isinstance(subs, dict) else ()
            accepts = tuple(m for m in msg.SENT if str(cid) in takes[m])
            peers.append(Peer(str(cid), str(name or cid), mtypes, accepts))
        self.peers = tuple(peers)
        self._emit(Peers(self.peers))

    def refresh_peers(self) -> cf.Future:
        return self._submit(self._refresh_peers, "list peers")

    def peers_for(self, mtype: str) -> tuple[Peer, ...]:
        """The peers that take ``mtype`` (one of `messages.SENT`), as of the last peer list (the hub's answer)."""
        return tuple(p for p in self.peers if mtype in p.accepts)

    # -- sending -----------------------------------------------------------------------------------------------
    def send(self, mtype: str, params: dict[str, Any], recipient: str | None = None) -> cf.Future:
        """Call ``mtype`` on ``recipient`` (a peer id) or on every peer subscribed to it; the future's result maps
        peer names to ``"ok"`` or the reason it failed (no reply in time, error, garbage)."""
        n = 1 if recipient else max(1, len(self.peers_for(mtype)))
        return self._submit(lambda: self._send(mtype, params, recipient), f"send {mtype}",
                            deadline=n * (self.timeout + 1.0) + 3.0)

    def _send(self, mtype: str, params: dict[str, Any], recipient: str | None) -> dict[str, str]:
        client = self._require()
        self._refresh_peers()
        ids = self._subscribers(client, mtype)
        if recipient:
            targets = [p for p in self.peers if p.id == recipient]
        else:
            targets = [p for p in self.peers if p.id in ids]
        if not targets:
            raise SampError(f"no SAMP application accepts {mtype}" + (f" ({recipient})" if recipient else ""))
        results = {}
        for peer in targets:
            if peer.id not in ids:  # a named recipient that is not subscribed: the hub would refuse the call
                takes = ", ".join(peer.capabilities) or "nothing this app sends"
                results[peer.name] = f"not subscribed to {mtype} (it takes {takes})"
                continue
            try:
                reply = client.call_and_wait(peer.id, {"samp.mtype": mtype, "samp.params": params},
                                             str(max(1, round(self.timeout))))
                results[peer.name] = reply_text(reply)
            except OSError:
                raise
            except Exception as exc:
                text = str(exc)
                results[peer.name] = "no reply in time" if "timeout" in text.lower() else f"failed: {text}"
        summary = "; ".join(f"{n}: {r}" for n, r in results.items())
        self._status("info", f"{mtype} → {summary}")
        return results

    def send_spectrum(self, spec: Spectrum, fmt: str = "votable", recipient: str | None = None) -> cf.Future:
        """Write ``spec`` to the private folder and send it as ``spectrum.load.ssa-generic``."""
        path = write_spectrum(spec, self.files.path, fmt)
        return self.send(msg.SPECTRUM_LOAD, msg.spectrum_params(spec, path, fmt, MIME[fmt]), recipient)

    def send_table(self, table: Table, keys: list[str], name: str, recipient: str | None = None) -> cf.Future:
        """Send a candidate table (``keys[i]`` identifies row i for highlight/select messages from peers)."""
        table_id = f"speco3-{uuid.uuid4().hex[:12]}"
        path = write_table_votable(table, self.files.path / f"{table_id}.vot", name)
        params = msg.table_params(path, table_id, name)
        self._tables[table_id] = tuple(str(k) for k in keys)
        self._urls[params["url"]] = table_id
        return self.send(msg.TABLE_LOAD, params, recipient)

    def point_at(self, ra: float, dec: float, recipient: str | None = None) -> cf.Future:
        return self.send(msg.POINT_AT, msg.point_params(ra, dec), recipient)

    def sent_table_keys(self, table_id: str, url: str = "") -> tuple[str, ...] | None:
        tid = table_id if table_id in self._tables else self._urls.get(url, "")
        return self._tables.get(tid)

    # -- receiving (pyvo's server thread) -------------------------------------------------------------------
    def _receive(self, private_key, sender_id, msg_id, mtype, params, extra) -> None:
        event = msg.parse_incoming(mtype, params, str(sender_id))
        if isinstance(event, msg.Highlight | msg.SelectRows):
            keys = self.sent_table_keys(event.table_id, event.url)
            rows = (event.row,) if isinstance(event, msg.Highlight) else event.rows
            if keys is None:
                event = msg.Malformed(mtype, f"table {event.table_id or event.url!r} was not sent by {self.name}",
                                      str(sender_id))
            elif any(r >= len(keys) for r in rows):
                event = msg.Malformed(mtype, f"row {max(rows)} is beyond the {len(keys)} rows sent", str(sender_id))
            else:
                event = dataclasses.replace(event, keys=tuple(keys[r] for r in rows))
        if isinstance(event, msg.LoadTable):
            try:
                event = dataclasses.replace(event, path=str(self._local_copy(event.url)),
                                            sender_name=self._name_of(str(sender_id)))
            except Refused as exc:  # a fixed sentence: never whether a path exists or what a file holds
                event = msg.Malformed(mtype, f"cannot read {event.url:.80}: {exc}", str(sender_id))
        if msg_id is not None:
            error = event.reason if isinstance(event, msg.Malformed) else None
            self._submit(lambda: self._reply(msg_id, error), "reply")
        if isinstance(event, msg.Malformed):
            self._status("info", f"ignored {mtype} from {sender_id}: {event.reason}")
        self._emit(event)

    def _local_copy(self, url: str) -> Path:
        """The checked local table behind a ``file:`` URL, or a bounded copy of a loopback ``http:`` URL in the
        private folder (`speco3.interop.fetch`: what a peer may make this app read); `Refused` otherwise."""
        if check_url(url) == "file":
            return local_table(url, self.max_table_bytes)
        return download(url, self.files.path, self.max_table_bytes, self.timeout)

    def _name_of(self, client_id: str) -> str:
        """The ``samp.name`` a client declared (the last peer list, else the hub's metadata), else its id."""
        for p in self.peers:
            if p.id == client_id and p.name != client_id:  # a name listed as the id: unknown when listed, ask again
                return p.name
        client = self._client
        try:
            meta = client.get_metadata(client_id) if client is not None else None
        except Exception as exc:  # pyvo/XML-RPC faults: a client that has just left
            log.debug("SAMP: no metadata for %s (%s)", client_id, exc)
            meta = None
        name = meta.get("samp.name") if isinstance(meta, dict) else None
        return str(name) if isinstance(name, str) and name.strip() else client_id

    def _reply(self, msg_id: str, error: str | None) -> None:
        client = self._require()
        if error is None:
            client.reply(msg_id, {"samp.status": "samp.ok", "samp.result": {}})
        else:
            client.reply(msg_id, {"samp.status": "samp.error", "samp.error": {"samp.errortxt": error}})

    def _hub_event(self, private_key, sender_id, mtype, params, extra) -> None:
        self._submit(self._refresh_peers, "list peers")

    def _hub_shutdown(self, private_key, sender_id, mtype, params, extra) -> None:
        self._submit(self._lost_hub, "hub shutdown")

    def _lost_hub(self) -> None:
        self._drop_client()
        self._status("lost", "the SAMP hub shut down")



"""SAMP test kit: a real pyvo hub on loopback with its own lockfile, and a real client peer that records messages.

Importable by name from any test folder. Nothing here touches the user's ``~/.samp``: ``samp_env`` points HOME and
``SAMP_HUB`` into the test's tmp folder before any hub or client exists.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SPECTRUM_LOAD = "spectrum.load.ssa-generic"
TABLE_LOAD = "table.load.votable"
POINT_AT = "coord.pointAt.sky"


def pyvo_samp():
    pytest.importorskip("pyvo.samp", reason="pyvo >= 1.9 (pyvo.samp) is not installed")
    from speco3.interop.hubs import pyvo_samp

    return pyvo_samp()  # also switches pyvo's internet probe off


@pytest.fixture
def samp_env(tmp_path, monkeypatch) -> Path:
    """The lockfile path of this test's hub (``SAMP_HUB`` set, HOME moved to tmp)."""
    pyvo_samp()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    lock = tmp_path / "samp-lock"
    monkeypatch.setenv("SAMP_HUB", f"std-lockurl:{lock.as_uri()}")
    return lock


@pytest.fixture
def hub(samp_env):
    samp = pyvo_samp()
    server = samp.SAMPHubServer(addr="127.0.0.1", web_profile=False, lockfile=str(samp_env), label="test hub")
    server.start(wait=False)
    yield server
    server.stop()


class Recorder:
    """A SAMP peer that records what it receives; ``mode[mtype]`` says how it answers calls:
    "ok" (default), "silent" (never replies), "garbage" (a reply that is not a SAMP response), or a callable."""

    def __init__(self, hub=None, name: str = "Recorder", mtypes=(SPECTRUM_LOAD, TABLE_LOAD, POINT_AT),
                 hub_params: dict[str, str] | None = None):
        """``hub``: a pyvo hub of this process; or ``hub_params``: a lockfile's parameters (another process's hub,
        e.g. JSAMP's). ``mtypes`` may hold SAMP wildcards (``table.*``)."""
        samp = pyvo_samp()
        self.received: list[tuple[str, dict, str]] = []
        self.mode: dict[str, Any] = {}
        self.event = threading.Event()
        self.client = samp.SAMPIntegratedClient(name=name, description="records messages", addr="127.0.0.1")
        self.client.connect(hub=hub, hub_params=hub_params, pool_size=2)
        for mtype in mtypes:
            self.client.bind_receive_message(mtype, self._on_message, declare=False)
        self.client.declare_subscriptions()

    def _on_message(self, private_key, sender_id, msg_id, mtype, params, extra) -> None:
        self.received.append((mtype, params, sender_id))
        self.event.set()
        if msg_id is None:
            return
        mode = self.mode.get(mtype, "ok")
        if callable(mode):
            mode = mode(params)
        if mode == "silent":
            return
        if mode == "garbage":
            self.client.reply(msg_id, {"not-samp": "42"})
            return
        self.client.reply(msg_id, {"samp.status": "samp.ok", "samp.result": {}})

    def wait_for(self, mtype: str, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m, params, _ in self.received:
                if m == mtype:
                    return params
            time.sleep(0.02)
        raise AssertionError(f"{mtype} not received within {timeout} s (got {[m for m, _, _ in self.received]})")

    def id_of(self, name: str) -> str:
        for cid in self.client.get_registered_clients():
            if self.client.get_metadata(cid).get("samp.name") == name:
                return cid
        raise AssertionError(f"{name} is not registered")

    def wait_registered(self, name: str, timeout: float = 30.0) -> str:
        """The id of the client called ``name`` once it has registered and declared its subscriptions."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for cid in self.client.get_registered_clients():
                if self.client.get_metadata(cid).get("samp.name") == name and self.client.get_subscriptions(cid):
                    return cid
            time.sleep(0.1)
        raise AssertionError(f"{name} did not register with the hub within {timeout:g} s")

    def call(self, recipient: str, mtype: str, params: dict, timeout: int = 10) -> dict:
        return self.client.call_and_wait(recipient, {"samp.mtype": mtype, "samp.params": params}, str(timeout))

    def close(self) -> None:
        try:
            self.client.disconnect()
        except Exception:  # the hub may be gone already (hub-loss tests)
            if self.client.client is not None and self.client.client.is_running:
                self.client.client.stop()


@pytest.fixture
def recorder(hub):
    peer = Recorder(hub)
    yield peer
    peer.close()


class Events:
    """A thread-safe list of a link's events with a wait helper."""

    def __init__(self):
        self.items: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, event: Any) -> None:
        with self.lock:
            self.items.append(event)

    def wait(self, pred: Callable[[Any], bool], timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for e in self.items:
                    if pred(e):
                        return e
            time.sleep(0.02)
        raise AssertionError(f"no matching event within {timeout} s; got {self.items}")


@pytest.fixture
def link(samp_env):
    """A `SampLink` (not yet connected) recording its events in ``link.events``; stopped at teardown."""
    from speco3.interop import SampLink

    events = Events()
    lk = SampLink(events, timeout=8.0, ping_interval=0.5)  # generous: peers answer slowly on a loaded machine
    lk.events = events
    yield lk
    lk.stop(timeout=5)
    assert not lk._worker.is_alive()

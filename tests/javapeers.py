"""The real Java VO peers of the SAMP tests (Debian packages ``jsamp``, ``topcat``, ``aladin``, ``stilts``).

JSAMP's hub (``jsamp hub``), its snooper (a client that logs what it receives and answers ``samp.warning``,
"Message logged, not acted on") and its ``messagesender`` (a one-shot client that calls an mtype and prints the
reply); TOPCAT and Aladin under Xvfb. Every JVM runs with HOME and ``-Duser.home`` set to the test's own HOME
(``sampkit.samp_env``'s, in its tmp folder), and the hub's lockfile is that HOME's ``.samp``, so nothing touches the
user's ``~/.samp`` or preferences. Each is started in a process group of its own and that group is killed at
teardown (SIGTERM, then SIGKILL after 10 s), so no JVM outlives its test; every wait is bounded.

Start times (``JavaPeer.ready_s``: start to registered with the hub) are logged; the README's SAMP section gives
the figures measured on the project's 2-core machine.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sampkit import Recorder

log = logging.getLogger(__name__)
TOOLS = ("jsamp", "topcat", "aladin", "stilts")


def require(tool: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        pytest.skip(f"{tool} is not installed (scripts/setup.sh --tests installs the Debian package {tool})")
    return exe


#: Java's proxies pointed at a closed loopback port: a Java peer reaches loopback (the hub, the app) and nothing
#: else — Aladin, for one, tries the CDS servers on start. Java's default non-proxy hosts are the loopback ones.
OFFLINE = ("-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=9 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=9 "
           "-DsocksProxyHost=127.0.0.1 -DsocksProxyPort=9")


def java_env(home: Path, display: str | None = None) -> dict[str, str]:
    """The environment of a Java peer: private HOME (also as ``user.home``), this test's ``SAMP_HUB``, offline."""
    env = dict(os.environ, HOME=str(home), JAVA_TOOL_OPTIONS=f"-Duser.home={home} {OFFLINE}")
    if display:
        env["DISPLAY"] = display
    else:
        env.pop("DISPLAY", None)
    return env


class JavaPeer:
    """One Java program in its own process group, its output in ``log_path``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], folder: Path):
        self.name = name
        self.log_path = folder / f"{name}.log"
        self.started = time.monotonic()
        self.ready_s: float | None = None
        self.samp_id = ""  # its public id on the hub, once registered
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def ready(self) -> float:
        self.ready_s = time.monotonic() - self.started
        log.info("%s ready after %.1f s", self.name, self.ready_s)
        return self.ready_s

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()[-3000:]}")

    def stop(self) -> None:
        """Kill the whole process group (the launcher script and its JVM); bounded."""
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(self.proc.pid):
                break
        self.proc.wait(5)
        assert not _group_alive(self.proc.pid), f"{self.name}: processes of group {self.proc.pid} survived SIGKILL"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a group of zombies only: the launcher has been reaped by wait(); children are reaped by init
    return any(_state(pid) not in ("Z", "X") for pid in _group_pids(pgid))


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    pids.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


class JavaPeers:
    """Starts Java peers for one test and stops them all at teardown. ``home`` is their HOME; the hub's lockfile
    is ``home/.samp``, the standard place, since Aladin looks only there (it ignores ``SAMP_HUB``)."""

    def __init__(self, folder: Path, home: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.lockfile = home / ".samp"
        self.peers: list[JavaPeer] = []

    def start(self, name: str, argv: list[str], display: str | None = None) -> JavaPeer:
        peer = JavaPeer(name, argv, java_env(self.home, display), self.folder)
        self.peers.append(peer)
        return peer

    def stop_all(self) -> None:
        errors = []
        for peer in reversed(self.peers):
            try:
                peer.stop()
            except AssertionError as exc:
                errors.append(str(exc))
        self.peers.clear()
        assert not errors, errors


@pytest.fixture
def java(tmp_path, samp_env, monkeypatch) -> Iterator[JavaPeers]:
    """Java peers sharing this test's HOME (``samp_env``'s); ``SAMP_HUB`` is moved to ``HOME/.samp``."""
    peers = JavaPeers(tmp_path / "java", Path(os.environ["HOME"]))
    monkeypatch.setenv("SAMP_HUB", f"std-lockurl:{peers.lockfile.as_uri()}")
    yield peers
    peers.stop_all()


def _wait(pred, timeout: float, what: str, peer: JavaPeer) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        peer.check_alive()
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout:g} s; its output:\n{peer.output()[-3000:]}")


@pytest.fixture
def jsamp_hub(java) -> JavaPeer:
    """JSAMP's hub (standard profile, no GUI), its lockfile at ``java.lockfile``."""
    from speco3.interop.hubs import SampError, read_hub_params

    exe = require("jsamp")
    hub = java.start("jsamp-hub", [exe, "hub", "-mode", "no-gui", "-profiles", "std"])

    def up() -> bool:
        try:
            read_hub_params(java.lockfile)
        except SampError:
            return False
        return True

    _wait(up, 60, "JSAMP's hub wrote no lockfile", hub)
    hub.ready()
    return hub


@pytest.fixture
def probe(java, jsamp_hub) -> Iterator[Recorder]:
    """A pyvo client on JSAMP's hub that waits for peers and calls them (subscribed to nothing it is sent)."""
    from speco3.interop.hubs import read_hub_params

    peer = Recorder(name="Probe", mtypes=(), hub_params=read_hub_params(java.lockfile))
    yield peer
    peer.close()


def wait_registered(probe: Recorder, peer: JavaPeer, samp_name: str, timeout: float) -> str:
    """The SAMP id of ``peer`` once it is registered as ``samp_name`` with its subscriptions."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        peer.check_alive()
        try:
            cid = probe.wait_registered(samp_name, timeout=min(2.0, max(0.1, deadline - time.monotonic())))
        except AssertionError:
            continue
        peer.ready()
        return cid
    raise AssertionError(f"{peer.name} did not register as {samp_name!r} within {timeout:g} s; its output:\n"
                         f"{peer.output()[-3000:]}")


SNOOPER_MTYPES = ("spectrum.*", "table.load.*", "coord.*")


@pytest.fixture
def snooper(java, jsamp_hub, probe) -> JavaPeer:
    """JSAMP's snooper "snoop", subscribed by wildcards only: ``spectrum.*``, ``table.load.*``, ``coord.*``."""
    exe = require("jsamp")
    argv = [exe, "snooper", "-clientname", "snoop"]
    for pattern in SNOOPER_MTYPES:
        argv += ["-mtype", pattern]
    peer = java.start("snooper", argv)
    peer.samp_id = wait_registered(probe, peer, "snoop", 60)
    return peer


def snooped(peer: JavaPeer, mtype: str, timeout: float = 20.0) -> str:
    """The snooper's log of the first ``mtype`` call it received (its parameters, as it printed them)."""
    pattern = re.compile(r'"samp\.mtype": "' + re.escape(mtype) + r'".*?\} \}', re.S)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pattern.search(peer.output())
        if found:
            return found.group(0)
        time.sleep(0.1)
    raise AssertionError(f"the snooper logged no {mtype} within {timeout:g} s:\n{peer.output()[-3000:]}")


@pytest.fixture
def topcat(java, jsamp_hub, probe, xserver) -> JavaPeer:
    """TOPCAT under Xvfb, registered with JSAMP's hub as "topcat"."""
    exe = require("topcat")
    peer = java.start("topcat", [exe], display=xserver)
    peer.samp_id = wait_registered(probe, peer, "topcat", 120)
    return peer


@pytest.fixture
def aladin(java, jsamp_hub, probe, xserver) -> JavaPeer:
    """Aladin Desktop under Xvfb, registered with JSAMP's hub as "Aladin"."""
    exe = require("aladin")
    peer = java.start("aladin", [exe], display=xserver)
    peer.samp_id = wait_registered(probe, peer, "Aladin", 120)
    return peer


def samp_value(value: object) -> str:
    """A SAMP value as JSAMP's command line reads it (``SampUtils.parseValue``): a list as ``["a","b"]``."""
    if isinstance(value, list | tuple):
        return "[" + ",".join('"' + str(v) + '"' for v in value) + "]"
    return str(value)


class SentMessage:
    """A ``jsamp messagesender`` call in flight: `wait` gives the reply's ``samp.status`` and the full output."""

    def __init__(self, proc: subprocess.Popen, log_path: Path):
        self.proc, self.log_path = proc, log_path

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: float = 60.0) -> tuple[str, str]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
            raise AssertionError(f"jsamp messagesender did not finish within {timeout:g} s") from None
        out = self.log_path.read_text(encoding="utf-8", errors="replace")
        status = re.search(r'"samp\.status": "([^"]+)"', out)
        return (status.group(1) if status else ""), out


def message_sender(java: JavaPeers, mtype: str, params: dict[str, object], target_id: str) -> SentMessage:
    """Start ``jsamp messagesender`` calling ``mtype`` on the client ``target_id`` (sync: it waits for the reply).
    Its process group is killed by `SentMessage.wait` on timeout and by the ``java`` fixture at teardown.

    Debian's ``jsamp`` script re-splits its arguments on blanks, so no argument may hold one (hence the target's
    id rather than its name, "Spec-o3 Desktop")."""
    argv = [require("jsamp"), "messagesender", "-mtype", mtype, "-targetid", target_id, "-mode", "sync",
            "-sendername", "jsamp-sender"]
    for key, value in params.items():
        argv += ["-param", key, samp_value(value)]
    assert not any(any(c.isspace() for c in a) for a in argv), f"the jsamp script would split {argv}"
    peer = java.start(f"messagesender-{len(java.peers)}", argv)
    return SentMessage(peer.proc, peer.log_path)

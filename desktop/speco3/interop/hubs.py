"""SAMP plumbing shared by the link and its tests: events, errors, the hub's lockfile, pyvo helpers.

pyvo is imported only by `pyvo_samp`, which also switches pyvo's internet probe off (it would otherwise fetch
http://google.com to choose a host name). Lockfiles are read here, not by pyvo, so that only a local file is read
and only a hub on this machine is accepted.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from speco3.interop import messages as msg

if TYPE_CHECKING:  # pyvo (untyped) loads when SAMP is switched on
    from pyvo.samp import SAMPIntegratedClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Status:
    state: str  # "off", "connected", "lost", "error", "info"
    text: str


@dataclass(frozen=True)
class Peer:
    """A registered application: ``mtypes`` are its subscriptions as declared (wildcards such as ``table.*``
    included); ``accepts`` are those of the app's own messages (`messages.SENT`) the hub says it is subscribed to —
    the hub applies the standard's wildcard rules (``getSubscribedClients``), nothing here matches patterns."""

    id: str
    name: str
    mtypes: tuple[str, ...] = ()
    accepts: tuple[str, ...] = ()

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What it takes from this app, in words ("spectra", "tables", "sky positions")."""
        return tuple(msg.SENT[m] for m in self.accepts)


@dataclass(frozen=True)
class Peers:
    peers: tuple[Peer, ...]


class SampError(RuntimeError):
    """A SAMP operation failed (no hub, hub gone, refused, timed out); the message says which."""


def pyvo_samp() -> ModuleType:
    try:
        from pyvo import samp
    except ImportError as exc:
        raise SampError("SAMP needs pyvo ≥ 1.9 (pip install 'pyvo>=1.9')") from exc
    samp.conf.use_internet = False  # pyvo would otherwise probe http://google.com to pick its host name
    return samp


def lockfile_path() -> Path:
    """The standard-profile lockfile: ``SAMP_HUB=std-lockurl:<file URL or path>``, else ``~/.samp``."""
    env = os.environ.get("SAMP_HUB", "")
    if not env:
        return Path.home() / ".samp"
    if not env.startswith("std-lockurl:"):
        raise SampError(f"SAMP_HUB={env!r}: only the standard profile (std-lockurl:) is supported")
    url = env[len("std-lockurl:"):]
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "":
        return Path(url)
    raise SampError(f"SAMP_HUB lockfile {url!r} is not a local file (offline: only local lockfiles are read)")


def read_hub_params(path: Path | None = None) -> dict[str, str]:
    """The lockfile's ``key=value`` lines; `SampError` when there is none or its hub is not on this machine."""
    path = path or lockfile_path()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SampError(f"no SAMP hub running (no lockfile {path}); start TOPCAT or Aladin, or start a hub "
                        "from Spec-o3") from exc
    params = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            params[k.strip()] = v.strip()
    url = params.get("samp.hub.xmlrpc.url", "").replace("\\", "")
    if not url or "samp.secret" not in params:
        raise SampError(f"{path}: not a SAMP lockfile (no samp.hub.xmlrpc.url / samp.secret)")
    host = urlparse(url).hostname or ""
    if host not in msg.LOOPBACK_HOSTS and not host.startswith("127."):
        raise SampError(f"the SAMP hub at {url} is not on this machine; only loopback hubs are used")
    params["samp.hub.xmlrpc.url"] = url
    return params


def reply_text(reply: object) -> str:
    if not isinstance(reply, dict) or "samp.status" not in reply:
        return f"answered garbage ({str(reply)[:60]!r})"
    status = reply.get("samp.status")
    if status == "samp.ok":
        return "ok"
    err = reply.get("samp.error")
    text = err.get("samp.errortxt") if isinstance(err, dict) else None
    if status in ("samp.warning", "samp.error"):
        return f"{status.split('.')[-1]}: {text or 'no reason given'}"
    return f"answered garbage (status {str(status)[:40]!r})"


def delivered(result: str) -> bool:
    """Whether a peer's answer (`reply_text`) means it took the message: ``samp.ok``, or ``samp.warning`` — the
    standard's "action performed, with warnings or partial failure" (JSAMP's snooper: "Message logged, not acted
    on")."""
    return result == "ok" or result.startswith("warning:")


def close_client(client: SAMPIntegratedClient) -> None:
    """Unregister if the hub still answers; always stop the client's callback server and its thread."""
    try:
        client.disconnect()
    except Exception as exc:
        log.debug("SAMP unregister failed: %s", exc)
        inner = getattr(client, "client", None)
        if inner is not None and inner.is_running:
            try:
                inner.stop(timeout=5.0)
            except Exception as exc2:
                log.warning("SAMP client thread did not stop: %s", exc2)
        client.hub.disconnect()


def with_state(fut: cf.Future[Any], result: object = None, exc: BaseException | None = None) -> None:
    """Finish ``fut`` unless the watchdog already did."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except cf.InvalidStateError:
        pass

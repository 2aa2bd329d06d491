"""HTTP side of the remote engine: one OpenAI-compatible server, JSON and streamed requests, retries with backoff.

`ServerConfig` says which server (base URL, model name, where the API key comes from, TLS options, timeouts,
retries); `ChatClient` talks to it with httpx. Rules kept here:

- Only the configured host is contacted: no redirects are followed and proxy / netrc settings of the environment
  are ignored (``trust_env=False``). TLS certificates are always verified (``ca_bundle`` adds a custom CA file).
- The API key is read from an environment variable or the OS keyring (``keyring`` package, optional), kept only in
  the client's request headers, and never appears in a repr, a log line, an error message or a recorded setting.
- A user name and password in the URL (``http://user:pw@host``) are taken out of ``ServerConfig.url`` at once (so
  no log line, error, trace, store row or recorded setting holds them) and sent as HTTP basic auth; when an API key
  is set too, the key is sent (``Authorization: Bearer``) and the URL's credentials are not. A secret sent over
  plain ``http:`` to a host that is not this machine gets a warning.
- A request that fails with 429, a 5xx status, a connection problem, a timeout or a stream that ends before its
  finish reason is retried with exponential backoff (a ``Retry-After`` header is honoured, capped); other statuses
  fail at once with the server's message; after the last retry `ServerError` says why.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from speco3.errors import ContextFullError, EngineError
from speco3.netaddr import is_loopback_host, redact, split_credentials

if TYPE_CHECKING:  # httpx is imported when a client is made (the local engine never needs it)
    import ssl

    import httpx

logger = logging.getLogger(__name__)

#: A decoded JSON object as a server sends it.
JsonObject = dict[str, Any]
T = TypeVar("T")

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class ServerError(EngineError):
    """A request to the model server failed (after the retries, when the failure was transient)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _Transient(Exception):
    def __init__(self, reason: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(reason)
        self.retry_after = retry_after
        self.status = status


@dataclass
class ServerConfig:
    """Where the model is served and how to reach it (no secret in here: only the *name* of the key's variable).

    ``url`` is the server's base URL, with or without the trailing ``/v1``. ``model`` None: the first model the
    server lists. ``api_key_env`` names the environment variable holding the key; without it (or when the variable
    is unset) the OS keyring entry ``service="spec-o3", username=<url>`` is tried when keyring is installed.
    """

    url: str
    model: str | None = None
    api_key_env: str | None = None
    ca_bundle: str | None = None
    timeout_s: float = 300.0  # per request (reads included); a slower answer is retried
    connect_timeout_s: float = 10.0
    retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    #: (user, password) taken out of the URL (see module doc); never in a repr, `to_dict` or a message
    basic_auth: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        url, creds = split_credentials(self.url.strip())
        if creds is not None:
            self.basic_auth = creds
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineError(f"model server URL {redact(self.url.strip())!r}: expected http(s)://host[:port][/v1]")
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[:-3]
        self.url = f"{parts.scheme}://{parts.netloc}{path}"

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    def to_dict(self) -> dict:
        out = asdict(self)
        del out["basic_auth"]
        return out


def read_api_key(config: ServerConfig) -> str | None:
    """The API key from ``config.api_key_env`` or the OS keyring (None: no key; the server may need none)."""
    if config.api_key_env:
        key = os.environ.get(config.api_key_env)
        if key:
            return key.strip()
        logger.warning("environment variable %s is not set; trying the OS keyring", config.api_key_env)
    try:
        import keyring
    except ImportError:
        return None
    try:
        return keyring.get_password("spec-o3", config.url)
    except Exception as exc:  # no keyring backend on this machine
        logger.info("no key from the OS keyring: %s", type(exc).__name__)
        return None


class ChatClient:
    """A client of one OpenAI-compatible server (thread-safe: httpx clients may be shared by threads)."""

    def __init__(self, config: ServerConfig, *, sleep: Callable[[float], None] = time.sleep):
        import httpx

        self.config = config
        self._sleep = sleep
        key = read_api_key(config)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        auth: httpx.BasicAuth | None = None
        if config.basic_auth is not None:
            if key:
                logger.warning("%s: the user name and password in the server URL are not sent (an API key is set; "
                               "it is sent instead)", config.url)
            else:
                auth = httpx.BasicAuth(*config.basic_auth)
        parts = urlsplit(config.url)
        if (key or auth) and parts.scheme == "http" and not is_loopback_host(parts.hostname):
            logger.warning("%s: the %s travels unencrypted over plain http to another machine; use https", config.url,
                           "API key" if key else "password")
        verify: bool | ssl.SSLContext = True
        if config.ca_bundle:
            import ssl

            try:
                verify = ssl.create_default_context(cafile=config.ca_bundle)
            except (OSError, ssl.SSLError) as exc:
                raise EngineError(f"CA bundle {config.ca_bundle}: {exc}") from exc
        self._http = httpx.Client(
            base_url=config.url, headers=headers, auth=auth, verify=verify, trust_env=False, follow_redirects=False,
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s),
        )
        self.retried = 0  # requests repeated after a transient failure (all calls)

    def __repr__(self) -> str:
        return f"ChatClient({self.config.url!r})"

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ requests
    def get_json(self, path: str) -> JsonObject:
        return self._retrying(lambda: self._json(self._http.get(path)), f"GET {path}")

    def post_json(self, path: str, body: dict, *, retries: int | None = None) -> JsonObject:
        """POST ``body``; ``retries`` overrides the configured number for this request (0: a deterministic
        failure, like a template the server cannot apply, is reported at once)."""
        return self._retrying(lambda: self._json(self._http.post(path, json=body)), f"POST {path}", retries)

    def stream_chat(self, body: dict, on_chunk: Callable[[dict], None], cancel: threading.Event | None = None,
                    on_retry: Callable[[], None] | None = None) -> bool:
        """POST a streamed chat completion; feed each decoded chunk to ``on_chunk``. Retries from scratch on a
        transient failure (``on_retry`` runs first, to drop the partial answer). Returns False when cancelled."""
        attempt = {"n": 0}

        def once() -> bool:
            if attempt["n"] and on_retry is not None:
                on_retry()
            attempt["n"] += 1
            with self._http.stream("POST", "/v1/chat/completions", json=body) as resp:
                if resp.status_code != 200:
                    resp.read()
                    self._json(resp)  # raises
                finished = False
                for event in _sse_events(resp.iter_lines()):
                    if cancel is not None and cancel.is_set():
                        return False
                    if event == "[DONE]":
                        break
                    chunk = json.loads(event)
                    if "error" in chunk:
                        raise _Transient(f"error in the stream: {_message(chunk)}")
                    on_chunk(chunk)
                    finished = finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
                if not finished:
                    raise _Transient("the stream ended before the answer was finished")
                return True

        return self._retrying(once, "POST /v1/chat/completions")

    # ------------------------------------------------------------------ plumbing
    def _json(self, resp: httpx.Response) -> JsonObject:
        if resp.status_code == 200:
            try:
                body = resp.json()
            except ValueError as exc:
                raise _Transient(f"unreadable JSON from the server ({exc})") from exc
            if not isinstance(body, dict):
                raise ServerError(f"{self.config.url}: the answer is JSON but not an object: {str(body)[:200]}")
            return body
        try:
            detail = _message(resp.json())
        except ValueError:
            detail = resp.text[:300]
        if resp.status_code in RETRY_STATUS:
            raise _Transient(f"HTTP {resp.status_code}: {detail}", _retry_after(resp.headers.get("retry-after")),
                             resp.status_code)
        if resp.status_code == 400 and "context" in detail.lower():
            raise ContextFullError(f"the server's context is full: {detail}")
        if resp.status_code in (401, 403):
            detail = "the server refused the API key (set it with --api-key-env NAME or the OS keyring)"
        raise ServerError(f"{self.config.url}: HTTP {resp.status_code}: {detail}", resp.status_code)

    def _retrying(self, action: Callable[[], T], what: str, retries: int | None = None) -> T:
        """``action()``, repeated after transient failures; the last one's HTTP status (if any) is the
        `ServerError`'s ``status``."""
        import httpx

        cfg = self.config
        retries = cfg.retries if retries is None else retries
        for attempt in range(retries + 1):
            status = None
            try:
                return action()
            except _Transient as exc:
                reason, retry_after, status = str(exc), exc.retry_after, exc.status
            except (httpx.TransportError, httpx.StreamError) as exc:  # connect/read errors, timeouts, cut streams
                reason, retry_after = f"{type(exc).__name__}: {exc or 'connection problem'}", None
            except json.JSONDecodeError as exc:
                reason, retry_after = f"garbled stream ({exc})", None
            except httpx.HTTPError as exc:  # the HTTP client's other errors (undecodable body, bad URL): no retry
                raise ServerError(f"{what} to {cfg.url} failed: {type(exc).__name__}: {exc}") from exc
            if attempt == retries:
                times = f"failed {retries + 1} times; last" if retries else "failed"
                raise ServerError(f"{what} to {cfg.url} {times}: {reason}", status)
            delay = min(cfg.max_backoff_s, cfg.backoff_s * 2 ** attempt)
            if retry_after is not None:
                delay = min(cfg.max_backoff_s, max(delay, retry_after))
            logger.warning("%s to %s: %s; retry %d/%d in %.1f s", what, cfg.host, reason, attempt + 1, retries,
                           delay)
            self.retried += 1
            self._sleep(delay)
        raise AssertionError("unreachable")


def _sse_events(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (one ``data:`` line per event, as OpenAI-compatible servers send)."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


def _message(obj: object) -> str:
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:500]
        return str(err)[:500]
    return str(obj)[:500]


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to the backoff

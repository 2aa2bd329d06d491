"""What a SAMP peer may make this app read, and the bounded reading of it (no Qt).

A peer's ``table.load.votable`` names a URL. This app reads:

- a ``file:`` URL on this host naming a regular file whose name (and the name of the file a symlink leads to)
  ends in a table extension the user could open as a candidate list anyway (`TABLE_SUFFIXES`; no compressed
  files), no larger than the cap. It is read in place, by the candidate-list reader.
- an ``http:``/``https:`` URL whose host is a loopback address literal or ``localhost``: fetched with httpx
  (proxies from the environment ignored), redirects followed here one hop at a time with every hop checked by
  the same rule, the body streamed into the private folder and cut off as soon as it passes the cap.

Everything else is refused. The reasons a peer is told are fixed sentences (`REFUSED_FILE`, `REFUSED_URL`,
`TOO_LARGE`, `FETCH_FAILED`): they never say whether a path exists or what a file holds; the detail goes to the
log on this machine. See docs/threat-model.md.
"""

from __future__ import annotations

import logging
import os
import stat
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urljoin, urlparse

from speco3.netaddr import is_loopback_host

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

#: File names a peer may point at: the candidate-list formats (`speco3.gui.candidates`), uncompressed.
TABLE_SUFFIXES = (".vot", ".votable", ".xml", ".csv", ".ecsv", ".tsv", ".txt", ".fits", ".fit")
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_REDIRECTS = 5
REFUSED_FILE = "not a local table file this application reads (" + ", ".join(TABLE_SUFFIXES) + ", within the size cap)"
REFUSED_URL = "only local files and loopback URLs are read (offline)"
FETCH_FAILED = "the download failed"


class Refused(ValueError):
    """A URL or file this app will not read; the message is safe to send back to the peer."""


def too_large(max_bytes: int) -> str:
    return f"the table is larger than this application accepts over SAMP ({max_bytes / 2**20:g} MB)"


def check_url(url: str) -> str:
    """The URL's scheme (``file``, ``http``, ``https``) when a peer may name it, else `Refused`."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise Refused(REFUSED_URL)
        return scheme
    if scheme in ("http", "https") and is_loopback_host(parsed.hostname):
        return scheme
    raise Refused(REFUSED_URL)


def _table_name(name: str) -> bool:
    return name.lower().endswith(TABLE_SUFFIXES)


def local_table(url: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Path:
    """The file of a ``file:`` URL when a peer may make this app read it (see module doc), else `Refused` with
    the one sentence `REFUSED_FILE` whatever the cause (missing, a directory, a device, another extension, too
    large): the peer learns nothing about what exists."""
    path = Path(unquote(urlparse(url).path))
    try:
        real = path.resolve(strict=True)
        st = os.stat(real)
    except (OSError, RuntimeError) as exc:  # missing, unreadable folder, a symlink loop
        log.info("SAMP: %s refused (%s)", path, exc)
        raise Refused(REFUSED_FILE) from None
    if not (path.is_absolute() and _table_name(path.name) and _table_name(real.name)):
        log.info("SAMP: %s refused (not a table file name)", path)
        raise Refused(REFUSED_FILE)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        log.info("SAMP: %s refused (not a regular file, or %d bytes > %d)", path, st.st_size, max_bytes)
        raise Refused(REFUSED_FILE)
    if not os.access(real, os.R_OK):
        log.info("SAMP: %s refused (not readable)", path)
        raise Refused(REFUSED_FILE)
    return real


def download(url: str, folder: Path, max_bytes: int = DEFAULT_MAX_BYTES, timeout: float = 10.0) -> Path:
    """Fetch a loopback ``http(s):`` URL into ``folder`` (see module doc); the file's path, else `Refused`.

    Redirects are followed here, each hop's target checked by `check_url` before it is requested; the body is
    streamed and the download stops as soon as it passes ``max_bytes`` (a ``Content-Length`` above it is refused
    before the body is read). ``timeout`` bounds each network operation and the whole download."""
    import httpx  # the samp extra's; imported when a peer's URL is fetched

    dest = folder / f"received-{uuid.uuid4().hex[:8]}.vot"
    deadline = time.monotonic() + timeout
    with httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            if check_url(url) == "file":  # a redirect to file: is refused like any other non-loopback target
                raise Refused(REFUSED_URL)
            try:
                with client.stream("GET", url, headers={"Accept-Encoding": "identity"}) as resp:
                    if resp.is_redirect:
                        target = urljoin(url, resp.headers.get("location", ""))
                        log.info("SAMP: %s redirects to %s", url, target)
                        url = target
                        continue
                    if resp.status_code != 200:
                        log.info("SAMP: %s answered HTTP %d", url, resp.status_code)
                        raise Refused(FETCH_FAILED)
                    if resp.headers.get("content-encoding", "identity").lower() != "identity":
                        log.info("SAMP: %s sent a compressed body (%s)", url, resp.headers["content-encoding"])
                        raise Refused(FETCH_FAILED)  # the body is counted as it is stored: no decompression here
                    declared = resp.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > max_bytes:
                        raise Refused(too_large(max_bytes))
                    return _save(resp, dest, max_bytes, deadline)
            except httpx.HTTPError as exc:
                log.info("SAMP: fetching %s failed (%s)", url, exc)
                dest.unlink(missing_ok=True)
                raise Refused(FETCH_FAILED) from None
            except Refused:
                dest.unlink(missing_ok=True)
                raise
            except OSError as exc:  # the private folder: full disk, removed under us
                log.warning("SAMP: cannot store the download of %s (%s)", url, exc)
                dest.unlink(missing_ok=True)
                raise Refused(FETCH_FAILED) from None
        log.info("SAMP: more than %d redirects from %s", MAX_REDIRECTS, url)
        raise Refused(FETCH_FAILED)


def _save(resp: httpx.Response, dest: Path, max_bytes: int, deadline: float) -> Path:
    n = 0
    with open(dest, "xb") as out:
        for chunk in resp.iter_raw(65536):
            n += len(chunk)
            if n > max_bytes:
                raise Refused(too_large(max_bytes))
            if time.monotonic() > deadline:
                log.info("SAMP: download of %s took too long", resp.url)
                raise Refused(FETCH_FAILED)
            out.write(chunk)
    return dest

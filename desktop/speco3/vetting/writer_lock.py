"""One app instance writes a vetting store: `WriterLock`, an OS lock on ``STORE.writer`` that names its holder.

The operating system drops the lock when the holding process ends, however it ends (``kill -9`` included), so a
crashed instance never locks the store out; a live one on this or another host (a shared folder whose file system
supports locks) keeps it, and a second instance is told who (`Holder`) and may browse the store read-only
(`speco3.vetting.session.VettingSession.open_archive`). The command line's runs share a store through claims.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from speco3.vetting.records import now_iso

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl


# -- one writer per store ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Holder:
    """The app instance writing a store (as its lock file names it)."""

    pid: int
    host: str
    since: str

    def describe(self) -> str:
        where = "" if self.host == platform.node() else f" on {self.host}"
        return f"another Spec-o3 (process {self.pid}{where}, since {self.since[:19].replace('T', ' ')} UTC)"


_LOCK_BYTE = 1 << 16  # Windows: the byte locked, past the JSON naming the holder (a locked range cannot be read)


class WriterLock:
    """One app instance writes a store: an OS lock on ``STORE.writer``, which names the holder (pid, host, since).

    The operating system drops the lock when the holding process ends, however it ends (``kill -9`` included), so a
    crashed instance never locks the store out; a live one on this or another host (a shared folder whose file
    system supports locks) keeps it. The command line's runs share a store through claims instead.
    """

    def __init__(self, store_path: Path):
        self.path = store_path.with_name(store_path.name + ".writer")
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> Holder | None:
        """Take the lock (None), or leave it and return who holds it."""
        if self._fd is not None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock(fd)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            return holder
        me = json.dumps({"pid": os.getpid(), "host": platform.node(), "since": now_iso()}).encode()
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, me.ljust(256))
        self._fd = fd
        return None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            _unlock(fd)
            os.close(fd)


def _lock(fd: int) -> None:
    if sys.platform == "win32":
        os.lseek(fd, _LOCK_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _unlock(fd: int) -> None:
    if sys.platform == "win32":
        os.lseek(fd, _LOCK_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _read_holder(fd: int) -> Holder:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        value = json.loads(os.read(fd, 256).decode("utf-8", "replace").strip() or "{}")
    except ValueError:
        value = {}
    if not isinstance(value, dict):
        value = {}
    pid, host, since = value.get("pid"), value.get("host"), value.get("since")
    return Holder(pid if isinstance(pid, int) else 0, str(host or "?"), str(since or "?"))

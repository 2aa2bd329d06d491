"""File helpers of the model store: hashing and copying with progress, atomic JSON writes, a manifest lock.

Progress callbacks are `speco3_base.fileio.Progress`, ``progress(label, done, total)``: here ``label`` names the step
(``"sha256 model.gguf"``), ``done`` and ``total`` count bytes (or steps; ``total`` 0 = unknown).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from speco3_base.fileio import CHUNK, Progress, no_progress, write_text_atomic
from speco3_models.errors import ModelStoreError

logger = logging.getLogger(__name__)

def copy_file(src: Path, dst: Path, progress: Progress | None = None) -> None:
    """Copy ``src`` to ``dst`` through a temporary name in the destination folder, reporting progress."""
    progress = progress or no_progress
    total = src.stat().st_size
    tmp = dst.with_name(f".{dst.name}.part")
    done = 0
    label = f"copy {src.name}"
    progress(label, 0, total)
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while chunk := fin.read(CHUNK):
                fout.write(chunk)
                done += len(chunk)
                progress(label, done, total)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def place_file(src: Path, dst: Path, mode: str, progress: Progress | None = None) -> Path:
    """Put ``src`` at ``dst`` by ``mode`` (``copy``, ``move`` or ``link``: a hard link, else a copy-free reference).

    Returns the path the store should record: ``dst``, or ``src`` itself when ``link`` could not make a hard link
    (different file systems); such files are referenced in place and never deleted by the store.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    if mode == "copy":
        copy_file(src, dst, progress)
        return dst
    if mode == "move":
        try:
            os.replace(src, dst)
        except OSError:  # other file system
            copy_file(src, dst, progress)
            src.unlink()
        return dst
    if mode == "link":
        try:
            os.link(src, dst)
            return dst
        except OSError as exc:
            logger.info("cannot hard-link %s into the store (%s); referencing it in place", src, exc)
            return src.resolve()
    raise ValueError(f"unknown placement mode {mode!r}")


def atomic_write_json(path: Path, data: object) -> None:
    """Write JSON to ``path`` so that a reader sees either the old or the new file, never a partial one."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


@contextlib.contextmanager
def locked(lock_path: Path, timeout: float = 30.0) -> Iterator[None]:
    """Hold an exclusive inter-process lock on ``lock_path`` (flock on POSIX, msvcrt on Windows)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(lock_path, "a+b")  # noqa: SIM115 - closed in finally
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                _lock(fh)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise ModelStoreError(f"the model store is busy (locked by another process: {lock_path})") from None
                time.sleep(0.05)
        yield
    finally:
        with contextlib.suppress(OSError):
            _unlock(fh)
        fh.close()


if sys.platform == "win32":  # pragma: no cover - exercised on Windows CI only
    import msvcrt

    def _lock(fh) -> None:
        fh.seek(0)
        msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)

    def _unlock(fh) -> None:
        fh.seek(0)
        msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _lock(fh) -> None:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock(fh) -> None:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


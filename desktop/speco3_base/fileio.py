"""Atomic file writes, file hashing and the progress callback shared by the store, exports, traces, settings,
the archive index, the vetting batch, the converter and the model store (the bottom layer: imports nothing of ours).

A reader of a file written by `write_atomic` sees either the old or the new content, never a partial file: the
content goes to a temporary file beside the target, is flushed to disk, then renamed over the target.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

FILE_MODE = 0o644  # mkstemp creates 0600; what we write is meant to be read by the user's other tools
CHUNK = 8 << 20


class Progress(Protocol):
    """The one progress callback of Spec-o3: ``progress(label, done, total)``.

    ``label`` names the step or the item just done (``"sha256 model.gguf"``, a file's path in the archive, a
    spectrum's key); ``done`` and ``total`` count bytes or items (``total`` 0 = unknown). A callback may raise to
    cancel the work (the caller then stops and re-raises).
    """

    def __call__(self, label: str, done: int, total: int, /) -> None: ...  # positional: callbacks name them freely


def no_progress(label: str, done: int, total: int) -> None:
    """A progress callback that does nothing."""


def write_atomic(path: str | Path, writer: Callable[[Path], object], *, mode: int | None = None) -> Path:
    """Call ``writer(tmp_path)`` with a temporary file beside ``path``, then move it into place.

    The file keeps the mode of the file it replaces (``FILE_MODE`` for a new file), or gets ``mode`` when given (a
    file holding a secret: 0o600, never readable by others on the way). On any error the temporary file is removed
    and the target is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        writer(tmp_path)
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, mode if mode is not None else path.stat().st_mode & 0o777 if path.exists() else FILE_MODE)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str, *, errors: str = "strict", mode: int | None = None) -> Path:
    """Write UTF-8 text atomically (``errors`` as for `str.encode`; ``mode`` as for `write_atomic`)."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8", errors=errors), mode=mode)


def sha256_file(path: str | os.PathLike[str], progress: Progress | None = None, label: str | None = None) -> str:
    """SHA-256 hex digest of a file, read in 8 MiB chunks; ``progress(label, done_bytes, total_bytes)`` after each.

    ``label`` defaults to ``"sha256 <file name>"``. Raises `OSError` when the file cannot be read (a progress
    callback may raise to cancel).
    """
    progress = progress or no_progress
    label = label or f"sha256 {Path(path).name}"
    digest = hashlib.sha256()
    total = os.stat(path).st_size
    done = 0
    progress(label, 0, total)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            progress(label, done, total)
    return digest.hexdigest()

"""The archive a command reads (``vet``, ``triage``): an archive folder, indexed incrementally (only new or changed
files are read; the index is the app's, `speco3.spectra.ArchiveIndex.for_root`), or an index database of one.

A leaf: it imports no other command module.
"""

from __future__ import annotations

import sys
from pathlib import Path

from speco3.errors import Speco3Error
from speco3.spectra import ArchiveIndex


def open_archive(archive: str | Path) -> ArchiveIndex:
    """The index of ``archive`` (a folder, scanned now with its progress on stderr, or an index database); the caller
    closes it. Raises `Speco3Error` when it is neither."""
    path = Path(archive).expanduser()
    if path.is_dir():
        index = ArchiveIndex.for_root(path)
        tty = sys.stderr.isatty()

        def progress(rel: str, done: int, total: int) -> None:
            if tty:
                print(f"\rindexing {done}/{total} files", end="", file=sys.stderr, flush=True)

        try:
            summary = index.scan(path, progress=progress)
        except BaseException:
            index.close()
            raise
        print(f"{chr(13) if tty else ''}indexed {summary.files_seen} files ({summary.files_read} read, "
              f"{summary.errors} unreadable)", file=sys.stderr)
        return index
    if path.is_file():
        index = ArchiveIndex(path)
        if index.root is None:
            index.close()
            raise Speco3Error(f"{path}: not an archive index (no archive root recorded)")
        return index
    raise Speco3Error(f"{path}: no such archive folder or index")


__all__ = ["open_archive"]

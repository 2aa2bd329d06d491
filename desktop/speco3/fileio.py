"""Atomic file writes, file hashing and the progress callback of the application (defined in
`speco3_base.fileio`, shared with the model store and the converter)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

from speco3_base.fileio import (
    CHUNK,
    FILE_MODE,
    Progress,
    no_progress,
    sha256_file,
    write_atomic,
    write_text_atomic,
)

__all__ = ["CHUNK", "FILE_MODE", "Progress", "contained", "no_progress", "sha256_file", "write_atomic",
           "write_text_atomic"]


def contained(folder: str | Path, name: str) -> Path:
    """``folder/name`` for a ``name`` read from data (a trace, a store, a task file): it must be a relative path
    that stays inside ``folder`` once symbolic links are followed.

    Raises
    ------
    ValueError
        Saying why (absolute, ``..``, or a link that leads out of the folder).
    """
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"{name!r} is not a file name")
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or PureWindowsPath(name).drive:
        raise ValueError(f"{name!r} is an absolute path; only a name inside the folder is accepted")
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        raise ValueError(f"{name!r} leads out of its folder ('..')")
    base = Path(folder).resolve()
    target = (base / name).resolve()
    if not target.is_relative_to(base):
        raise ValueError(f"{name!r} leads out of its folder (a symbolic link to {target})")
    return target

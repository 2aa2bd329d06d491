"""Atomic file writes, file hashing and the progress callback of the application (defined in
`speco3_base.fileio`, shared with the model store and the converter)."""

from __future__ import annotations

from speco3_base.fileio import (
    CHUNK,
    FILE_MODE,
    Progress,
    no_progress,
    sha256_file,
    write_atomic,
    write_text_atomic,
)

__all__ = ["CHUNK", "FILE_MODE", "Progress", "no_progress", "sha256_file", "write_atomic", "write_text_atomic"]

"""Atomic file writes and file hashing of the application (defined in `speco3_base.fileio`, shared with the
model store)."""

from __future__ import annotations

from speco3_base.fileio import CHUNK, FILE_MODE, sha256_file, write_atomic, write_text_atomic

__all__ = ["CHUNK", "FILE_MODE", "sha256_file", "write_atomic", "write_text_atomic"]

"""Error base classes raised below the application (model store, converter) and caught by it.

Every error a user can meet carries a short, specific message that names the thing (file, model) and the reason.
The application's own errors (`speco3.errors`) derive from the same `Speco3Error`.
"""

from __future__ import annotations

from pathlib import Path


class Speco3Error(Exception):
    """Base class of all errors raised on purpose by Spec-o3."""


class ModelFileError(Speco3Error):
    """A model file (GGUF text model or projector) is missing, corrupt or of the wrong kind."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ConversionError(Speco3Error):
    """A checkpoint cannot be converted (unsupported, incomplete or inconsistent)."""

"""Typed errors of the headless core.

Every error a user can meet carries a short, specific message that names the thing
(file, model, task) and the reason. The GUI shows ``str(error)``; tracebacks go to the log.
"""

from __future__ import annotations

from pathlib import Path


class Speco3Error(Exception):
    """Base class of all errors raised on purpose by Spec-o3."""


class SpectrumReadError(Speco3Error):
    """A file could not be read as a spectrum.

    Parameters
    ----------
    path : path-like or str
        The file (or ``FILE#N`` address) that failed.
    reason : str
        What is wrong, in words a user understands.
    """

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ModelFileError(Speco3Error):
    """A model file (GGUF text model or projector) is missing, corrupt or of the wrong kind."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ConversionError(Speco3Error):
    """A checkpoint cannot be converted (unsupported, incomplete or inconsistent)."""


class EngineError(Speco3Error):
    """The inference engine failed (load, evaluation or generation)."""


class ContextFullError(EngineError):
    """The conversation would not fit in the context window (counted in KV cells)."""


class TaskError(Speco3Error):
    """A task definition file is invalid."""


class StoreError(Speco3Error):
    """The vetting store cannot be opened or written."""

"""Typed errors of the headless core (`Speco3Error`, `ModelFileError` and `ConversionError` come from
`speco3_base.errors`, shared with the model store and the converter).

Every error a user can meet carries a short, specific message that names the thing
(file, model, task) and the reason. The GUI shows ``str(error)``; tracebacks go to the log.
"""

from __future__ import annotations

from pathlib import Path

from speco3_base.errors import ConversionError, ModelFileError, Speco3Error

__all__ = ["OUTCOME_ERRORS", "ContextFullError", "ConversionError", "EngineError", "ModelFileError", "Speco3Error",
           "SpectrumReadError", "StoreError", "TaskError"]


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


class EngineError(Speco3Error):
    """The inference engine failed (load, evaluation or generation)."""


class ContextFullError(EngineError):
    """The conversation would not fit in the context window (counted in KV cells)."""


class TaskError(Speco3Error):
    """A task definition file is invalid (``path``: the file, when the error came from one of the task folder's)."""

    path: Path | None = None


class StoreError(Speco3Error):
    """The vetting store cannot be opened or written."""



#: What ends a generation or an episode as an outcome (a slot's `StepResult`, an ``engine_error`` verdict) instead
#: of propagating: our typed errors (the engine's, context full, the model file's, the input's; the model-server
#: client turns every error of its HTTP library into one, `ServerError`) and the operating system's (a file, a
#: socket). Anything else is a bug: it propagates and fails the run (and the test)
#: that meets it, never landing in the store as a verdict.
OUTCOME_ERRORS: tuple[type[Exception], ...] = (Speco3Error, OSError)

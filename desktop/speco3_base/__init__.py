"""What the application, the model store and the converter share, below all three: the error base classes,
atomic file writes and hashing, and the user folders.

Layering (enforced by import-linter, see ``pyproject.toml``): ``speco3`` (the app) → ``speco3_converters`` →
``speco3_models`` → ``speco3_base``; nothing here imports any of the others.
"""

from __future__ import annotations

APP_NAME = "spec-o3"

__all__ = ["APP_NAME"]

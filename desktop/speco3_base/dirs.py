"""User folders (platformdirs) and their overrides.

``SPECO3_DATA_DIR``, ``SPECO3_CONFIG_DIR``, ``SPECO3_CACHE_DIR`` and ``SPECO3_LOG_DIR`` override the platform folders;
tests point them at temporary folders.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from speco3_base import APP_NAME


def _dir(env: str, default: str) -> Path:
    value = os.environ.get(env)
    path = Path(value).expanduser() if value else Path(default)
    return path


def data_dir() -> Path:
    """Folder for models, the demo archive and stores."""
    return _dir("SPECO3_DATA_DIR", platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """Folder for settings, keymaps and user task files."""
    return _dir("SPECO3_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Folder for rebuildable caches (archive indexes, rendered thumbnails)."""
    return _dir("SPECO3_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def log_dir() -> Path:
    """Folder of the rotating log file (``spec-o3.log``) written by the app and the CLI."""
    return _dir("SPECO3_LOG_DIR", platformdirs.user_log_dir(APP_NAME, appauthor=False))


def ensure(path: Path) -> Path:
    """Create ``path`` (a folder) if needed and return it."""
    path.mkdir(parents=True, exist_ok=True)
    return path

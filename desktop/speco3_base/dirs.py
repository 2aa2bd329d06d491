"""User folders (platformdirs) and their overrides.

``SPECO3_DATA_DIR``, ``SPECO3_CONFIG_DIR``, ``SPECO3_CACHE_DIR`` and ``SPECO3_LOG_DIR`` override the platform folders;
tests point them at temporary folders.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import platformdirs

from speco3_base import APP_NAME
from speco3_base.process import process_gone

log = logging.getLogger(__name__)


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


_fallback_lock = threading.Lock()
_fallback: dict[Path, Path] = {}  # cache folder that cannot be written -> this process's temporary one
_notices: list[str] = []  # the message about it, until `take_cache_notice` hands it to the app's status bar
#: The temporary cache folders `writable_cache` makes: the owning process's pid, then `tempfile.mkdtemp`'s 8 random
#: characters (a process killed before its exit handler leaves its folder for the next one to sweep).
TEMP_CACHE_PREFIX = "spec-o3-cache-"
_TEMP_CACHE_NAME = re.compile(re.escape(TEMP_CACHE_PREFIX) + r"([1-9][0-9]{0,9})-[a-z0-9_]{8}")


def writable_cache(sub: str) -> Path:
    """``cache_dir()/sub``, created, when files can be made there; else (a read-only folder or file system, a path
    under a regular file, no permission) the same ``sub`` in a private temporary folder of this process
    (``spec-o3-cache-<pid>-XXXXXXXX``), removed at exit: the work goes on without keeping its cache. One warning per
    process names the cache folder and why. Making it sweeps such folders of killed processes
    (`sweep_temp_caches`).

    Raises
    ------
    OSError
        Only when the temporary folder cannot be made either.
    """
    root = cache_dir()
    wanted = root / sub
    try:
        ensure(wanted)
        with tempfile.NamedTemporaryFile(dir=wanted, prefix=".probe-"):
            pass
        return wanted
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    with _fallback_lock:
        if root not in _fallback:
            sweep_temp_caches(Path(tempfile.gettempdir()))
            # 0700, a fresh name: nobody else's
            folder = Path(tempfile.mkdtemp(prefix=f"{TEMP_CACHE_PREFIX}{os.getpid()}-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _fallback[root] = folder
            notice = (f"cache folder {root} cannot be written ({why}); caching in {folder} for this run only "
                      "(set SPECO3_CACHE_DIR to a writable folder to keep the cache)")
            log.warning("%s", notice)
            _notices.append(notice)
        return ensure(_fallback[root] / sub)


def sweep_temp_caches(parent: Path) -> list[Path]:
    """Remove the temporary cache folders in ``parent`` that killed processes left (`writable_cache` names them
    ``spec-o3-cache-<pid>-XXXXXXXX``; exit removes them, SIGKILL does not): only directories of exactly that name,
    never a symbolic link, owned by this user, whose process is gone (`process_gone`; never this one). Returns those
    removed; a folder that cannot be looked at or removed is left as it is. Nothing on Windows (no owner check)."""
    if not hasattr(os, "getuid"):
        return []
    uid, removed = os.getuid(), []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        match = _TEMP_CACHE_NAME.fullmatch(entry.name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or not process_gone(int(match.group(1))):
            continue
        try:  # rmtree refuses a link swapped in meanwhile and never follows links inside
            shutil.rmtree(entry.path)
        except OSError as exc:
            log.debug("temporary cache folder %s left: %s", entry.path, exc)
            continue
        log.info("removed the temporary cache folder %s of the killed process %s", entry.path, match.group(1))
        removed.append(Path(entry.path))
    return removed


def take_cache_notice() -> str:
    """The warning `writable_cache` gave (once; "" when none or already taken), for the app to show."""
    with _fallback_lock:
        return _notices.pop() if _notices else ""

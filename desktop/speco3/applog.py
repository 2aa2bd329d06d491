"""The log file: a rotating ``spec-o3.log`` in the platform's log folder, written by the app and the CLI.

`setup_logging` adds the file handler (and, outside pytest, the console handler the command line had before)
and writes a header: the version, Python, the platform and llama-cpp-python's version. The engine adds the
llama.cpp backend and devices when it starts, the model files, settings and load plan when it loads; the agent
adds each episode's outcome and timings; every error goes there with its traceback (`log_uncaught`).

What never goes there: spectra contents (nothing logs arrays or pixel data) and keys — `RedactKeys` blanks
anything that looks like an access token (Hugging Face ``hf_…``, ``Bearer …``, ``token=…``, ``api_key=…``,
``user:password@`` in a URL) in every record that reaches the file. Bad log folders never stop the program: it
warns on stderr once and runs without a file.
"""

from __future__ import annotations

import logging
import logging.handlers
import platform
import re
import sys
import threading
from pathlib import Path

from speco3 import __version__
from speco3.config import log_dir

LOG_NAME = "spec-o3.log"
MAX_BYTES = 2 * 1024 * 1024
BACKUPS = 5
FORMAT = "%(asctime)s %(process)d %(threadName)s %(levelname)s %(name)s: %(message)s"

_lock = threading.Lock()
_KEY_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?i)\b((?:api[_-]?key|token|secret|password)\s*[=:]\s*)['\"]?[^\s'\"&,;]{4,}"),
    re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]+(?=@)"),  # user:password@ in a URL (--server)
]


class RedactKeys(logging.Filter):
    """Replace anything that looks like a key or token by ``[redacted]`` (message, arguments and traceback)."""

    @staticmethod
    def redact(text: str) -> str:
        for pat in _KEY_PATTERNS:
            text = pat.sub(lambda m: (m.group(1) + " " if m.lastindex and m.group(1).lower() == "bearer"
                                      else (m.group(1) if m.lastindex else "")) + "[redacted]", text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # a bad format string: keep the record as it is
            return True
        red = self.redact(msg)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if red != msg or record.args:
            record.msg, record.args = red, None
        return True


class _FileHandler(logging.handlers.RotatingFileHandler):
    """Our rotating file handler (recognised by `setup_logging` to replace an earlier one)."""


def log_path() -> Path:
    """Where the current log file is (or would be)."""
    return log_dir() / LOG_NAME


def file_handler() -> _FileHandler | None:
    return next((h for h in logging.getLogger().handlers if isinstance(h, _FileHandler)), None)


def setup_logging(program: str, *, verbose: bool = False, console_level: int | None = None) -> Path | None:
    """Log to the rotating file (INFO; DEBUG with ``verbose``) and to the console at ``console_level``.

    Called by ``spec-o3`` (console: warnings) and ``spec-o3-desktop`` (console: info). Idempotent: a second call
    replaces the file handler (tests point ``SPECO3_LOG_DIR`` elsewhere). Returns the log file, or None when the
    log folder cannot be written (a warning on stderr; the program goes on).
    """
    root = logging.getLogger()
    level = logging.DEBUG if verbose else logging.INFO
    with _lock:
        if console_level is not None and not root.handlers:  # as logging.basicConfig did (pytest has its own)
            console = logging.StreamHandler()
            console.setLevel(logging.DEBUG if verbose else console_level)
            console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            root.addHandler(console)
        old = file_handler()
        if old is not None:
            root.removeHandler(old)
            old.close()
        path = log_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = _FileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
        except OSError as exc:
            print(f"{program}: cannot write the log file {path}: {exc}", file=sys.stderr)
            return None
        handler.setLevel(level)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.addFilter(RedactKeys())
        root.addHandler(handler)
        if root.level == logging.NOTSET or root.level > level:
            root.setLevel(level)
    logging.getLogger("speco3").info("%s %s started: Python %s, %s, llama-cpp-python %s; log %s", program,
                                     __version__, platform.python_version(), platform.platform(),
                                     _llama_version(), path)
    return path


def _llama_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return "not installed"


def log_uncaught(exc_type, exc, tb, where: str = "uncaught exception") -> None:
    """Write an exception that nobody handled to the log with its traceback."""
    logging.getLogger("speco3").critical("%s: %s: %s", where, exc_type.__name__, exc, exc_info=(exc_type, exc, tb))


def install_thread_hook() -> None:
    """Log exceptions that end a thread (then let Python print them as usual)."""
    previous = threading.excepthook

    def hook(args) -> None:
        if args.exc_type is not SystemExit:
            log_uncaught(args.exc_type, args.exc_value, args.exc_traceback,
                         f"uncaught exception in thread {getattr(args.thread, 'name', '?')}")
        previous(args)

    threading.excepthook = hook

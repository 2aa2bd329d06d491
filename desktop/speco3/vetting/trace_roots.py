"""Trusted trace roots: folders outside a store's own folder whose traces the app and the report may read.

A store is untrusted (a copied or hostile one may name ``/etc`` as a trace folder: `VettingStore.trace_folder`);
the user's own configuration is not. When the user's own ``spec-o3 vet --traces DIR`` writes traces outside the
store's folder, or ``spec-o3 merge`` carries a shard's traces into a store kept elsewhere, or the user confirms
"Trust this folder" in the app, that folder is recorded here, in ``config_dir()/trusted-trace-roots.json`` (read
by the app and every command; never in a store). A store copied to another account does not bring it along.

A trusted root is an absolute, existing folder (symbolic links resolved), never ``/``, the home folder or a folder
above it (`check_root`). The file holds at most `MAX_ROOTS` of them (the oldest dropped), is written atomically,
and is read with a size cap; an entry that is damaged or no longer allowed is skipped.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from speco3.agent.trace import TRACE_FILE, TraceError
from speco3.config import config_dir
from speco3.errors import Speco3Error
from speco3_base.fileio import write_text_atomic

log = logging.getLogger(__name__)

#: The file of trusted trace roots in the config folder (a JSON object ``{"roots": [ABSOLUTE PATH, ...]}``).
ROOTS_FILE = "trusted-trace-roots.json"
MAX_ROOTS = 64
MAX_FILE_BYTES = 256 << 10


class RootRefused(Speco3Error):
    """A folder that cannot be a trusted trace root (the message says why)."""


class TraceOutside(TraceError):
    """A stored trace folder lies outside every folder it may be read from; ``folder`` is where it is (resolved)
    and ``suggested`` the folder the app offers to trust (`suggest_root`; None when none can be)."""

    def __init__(self, message: str, folder: Path, suggested: Path | None):
        super().__init__(message)
        self.folder = folder
        self.suggested = suggested


def roots_file() -> Path:
    return config_dir() / ROOTS_FILE


def check_root(path: str | Path) -> Path:
    """``path`` resolved, when it may be a trusted trace root. Raises `RootRefused` naming why not."""
    text = str(path)
    if not text or "\x00" in text:
        raise RootRefused(f"{text!r}: not a folder name")
    raw = Path(text).expanduser()
    if not raw.is_absolute():
        raise RootRefused(f"{text}: a trusted trace folder must be an absolute path")
    resolved = raw.resolve()
    if not resolved.is_dir():
        raise RootRefused(f"{text}: not an existing folder")
    if resolved == Path(resolved.anchor):
        raise RootRefused(f"{text}: the file system's root cannot be a trusted trace folder (every file is in it)")
    home = Path.home().resolve()
    if home.is_relative_to(resolved):
        what = "the home folder" if resolved == home else "a folder above the home folder"
        raise RootRefused(f"{text}: {what} cannot be a trusted trace folder (it holds ~/.ssh and the like); "
                          "name the folder the traces are in")
    return resolved


def _read(path: Path) -> list[str]:
    try:
        if not path.is_file():
            return []
        if path.stat().st_size > MAX_FILE_BYTES:
            log.warning("%s: larger than %d bytes, ignored", path, MAX_FILE_BYTES)
            return []
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable, no trusted trace folders taken from it (%s)", path, exc)
        return []
    roots = raw.get("roots") if isinstance(raw, dict) else None
    return [r for r in roots if isinstance(r, str)][-MAX_ROOTS:] if isinstance(roots, list) else []


def trusted_roots(path: Path | None = None) -> list[Path]:
    """The trusted trace roots of this account's configuration (each re-checked by `check_root`; gone or refused
    ones skipped)."""
    out: list[Path] = []
    for text in _read(path or roots_file()):
        try:
            root = check_root(text)
        except RootRefused:
            continue
        if root not in out:
            out.append(root)
    return out


def trust_root(folder: str | Path, path: Path | None = None) -> Path:
    """Record ``folder`` (checked by `check_root`) as a trusted trace root; returns it resolved. Nothing is written
    when it is inside one already trusted. Raises `RootRefused`, or `OSError` when the file cannot be written."""
    root = check_root(folder)
    path = path or roots_file()
    for _attempt in range(3):  # two commands adding at once: the one whose write was replaced writes again
        kept = _read(path)
        if any(root.is_relative_to(Path(r)) for r in kept if Path(r).is_absolute()):
            return root
        kept = [r for r in kept if r != str(root)][-(MAX_ROOTS - 1):] + [str(root)]
        write_text_atomic(path, json.dumps({"roots": kept}, indent=1, ensure_ascii=False) + "\n")
        if str(root) in _read(path):
            break
    log.info("trusted trace folder recorded: %s", root)
    return root


def suggest_root(folder: Path) -> Path | None:
    """The folder to offer to trust for a refused trace ``folder``: the traces folder ``ROOT`` of the
    ``ROOT/TASK/NAME-HASH`` layout every run writes, else the trace's own folder; None when neither may be trusted
    or the folder holds no trace file."""
    folder = folder.parent if folder.name == TRACE_FILE else folder
    if not (folder / TRACE_FILE).is_file():  # no trace there (``/etc/x``): nothing to offer (its name only looked at)
        return None
    for candidate in (folder.parent.parent, folder):
        try:
            return check_root(candidate)
        except RootRefused:
            continue
    return None


def adopt_traces(folder: str | Path, store: str | Path) -> str:
    """The user's own command writes (``vet --traces``) or carries (``merge``) traces in ``folder`` for the store
    file ``store``: when ``folder`` is outside the store's folder tree and not trusted yet, record it (`trust_root`).
    Returns one line for the command to say ("" when nothing was needed); never raises for a refused folder or an
    unwritable configuration (the line then says the traces will not be shown and why)."""
    where = Path(folder).expanduser().absolute().resolve()
    if where.is_relative_to(Path(store).expanduser().absolute().parent.resolve()):
        return ""
    if any(where.is_relative_to(r) for r in trusted_roots()):
        return ""
    try:
        root = trust_root(where)
    except RootRefused as exc:
        return f"traces in {where} will not be shown by the app or the HTML report: {exc}"
    except OSError as exc:
        return (f"traces in {where} will not be shown by the app or the HTML report: the trusted trace folders "
                f"cannot be recorded in {roots_file()} ({exc.strerror or exc}); export --trace-root {where} reads them")
    return f"traces outside the store's folder: {root} recorded as a trusted trace folder in {roots_file()}"


__all__ = ["MAX_ROOTS", "ROOTS_FILE", "RootRefused", "TraceOutside", "adopt_traces", "check_root", "roots_file",
           "suggest_root", "trust_root", "trusted_roots"]

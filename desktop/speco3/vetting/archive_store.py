"""Which vetting store an archive is vetted in, and whether a store fits an archive (no Qt).

The app keeps a store of its own per archive under its data folder; the night's screening (``spec-o3 vet ARCHIVE
--out r.sqlite``) writes another, wherever the vetter ran it. `store_fit` says whether such a store belongs to an
archive: the spectrum keys it holds verdicts, decisions or notes of (``PATH#N``, absolute paths) against the
archive (``holds``: the archive's index), and the archive folder it names (`ARCHIVE_ROOT_STATE`, set by ``vet``
and the app). `stores_beside` finds the stores that fit an archive in its folder and the folder above it, where a
night's run usually leaves them; `speco3.vetting.session.VettingSession.open_archive` checks the fit of a store the
vetter chose before it writes to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from speco3.errors import StoreError
from speco3.spectra import ArchiveIndex
from speco3.vetting.store import ARCHIVE_ROOT_STATE, VettingStore

log = logging.getLogger(__name__)

#: At most this many ``*.sqlite`` files are looked at in each folder `stores_beside` searches.
BESIDE_LIMIT = 32
#: At most this many of a store's spectrum keys are looked up in the archive (evenly spread over them).
KEYS_CHECKED = 2000
#: The files a store keeps beside it; never offered as stores themselves.
_COMPANIONS = ("-wal", "-shm", "-journal", ".writer")

Holds = Callable[[str], bool]  # store key ``PATH#N`` -> whether the archive holds that spectrum


@dataclass(frozen=True)
class StoreFit:
    """How the store at ``path`` fits the archive ``root``.

    ``named_root``: the archive folder the store names (None: none); ``keys``: spectra it holds verdicts,
    decisions or notes of; ``checked``: how many of those were looked up in the archive (at most `KEYS_CHECKED`);
    ``in_archive``: how many of the checked the archive holds; ``verdicts``, ``decisions``: its model verdicts and
    human decisions (latest per spectrum and task)."""

    path: Path
    root: str
    named_root: str | None
    keys: int
    checked: int
    in_archive: int
    verdicts: int
    decisions: int

    @property
    def names_this_archive(self) -> bool:
        return self.named_root is not None and _same_folder(self.named_root, self.root)

    def problem(self) -> str | None:
        """Why the store does not belong to the archive (None: it does, or it is empty and names no other)."""
        other = f" (it was written for {self.named_root})" if self.named_root and not self.names_this_archive else ""
        if self.keys == 0:
            return f"{self.path} is the store of another archive{other}" if other else None
        if self.in_archive == 0:
            some = f"{self.checked:,} checked" if self.checked < self.keys else "none"
            return (f"{self.path} holds verdicts or decisions of {self.keys:,} spectra, {some} of them in "
                    f"{self.root}{other}")
        return None

    def note(self) -> str | None:
        """A word on a store that fits only in part (some of its spectra are not in this archive), else None."""
        if self.problem() is not None or self.in_archive == self.checked:
            return None
        share = f"{self.checked - self.in_archive:,} of {self.checked:,}"
        return f"{share} spectra of {self.path.name} checked are not in this archive (their rows stay in the store)"

    def describe(self) -> str:
        """One line: the file, what it holds, the archive it names."""
        return (f"{self.path.name}: {self.verdicts:,} model verdicts, {self.decisions:,} decisions"
                + (f", written for {self.named_root}" if self.named_root else ""))


def _same_folder(a: str, b: str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return a == b


def store_fit(path: str | Path, root: str | Path, holds: Holds) -> StoreFit:
    """How the existing store at ``path`` fits the archive ``root`` whose index answers ``holds``; the store is only
    read. Raises `StoreError` when ``path`` is not a readable vetting store."""
    path = Path(path)
    with VettingStore(path, readonly=True) as store:
        named = store.get_state(ARCHIVE_ROOT_STATE)
        keys = store.spectrum_keys()
        verdicts, decisions = len(store.model_verdicts()), len(store.decisions())
    step = max(1, -(-len(keys) // KEYS_CHECKED))
    sample = keys[::step]
    return StoreFit(path, str(root), named if isinstance(named, str) else None, len(keys), len(sample),
                    sum(1 for k in sample if holds(k)), verdicts, decisions)


def archive_keys(index: ArchiveIndex) -> list[str]:
    """The store keys of the spectra a screening of the archive takes unless told otherwise (``spec-o3 vet`` without
    filters, the app's pre-screen of the whole queue): every spectrum of the index, an unreadable one too (it is
    recorded as ``input_error``), but sky fibres and spectra whose every pixel is masked (nothing to vet)."""
    return [entry.address for entry in index.query(usable=True, sort="key")]


def stores_beside(root: str | Path, holds: Holds, exclude: Path | None = None) -> list[StoreFit]:
    """The vetting stores in the archive folder ``root`` and the folder above it that fit it (`StoreFit.problem`
    None) and hold something of it (a night's ``spec-o3 vet … --out r.sqlite``), newest first; ``exclude``: a store
    not to offer (the one open). Files that are not vetting stores are passed over."""
    folder = Path(root)
    found: list[tuple[float, StoreFit]] = []
    seen: set[Path] = set()
    for where in dict.fromkeys((folder, folder.parent)):
        try:
            files = sorted(p for p in where.glob("*.sqlite") if p.is_file())[:BESIDE_LIMIT]
        except OSError as exc:
            log.debug("cannot list %s: %s", where, exc)
            continue
        for p in files:
            real = p.resolve()
            if real in seen or (exclude is not None and real == Path(exclude).resolve()) \
                    or p.name.endswith(_COMPANIONS):
                continue
            seen.add(real)
            try:
                fit = store_fit(p, root, holds)
            except (StoreError, OSError) as exc:  # another application's SQLite file, a damaged one
                log.debug("%s: not offered as a vetting store: %s", p, exc)
                continue
            if fit.problem() is None and (fit.in_archive or fit.names_this_archive):
                found.append((p.stat().st_mtime, fit))
    return [fit for _t, fit in sorted(found, key=lambda t: -t[0])]


__all__ = ["BESIDE_LIMIT", "KEYS_CHECKED", "Holds", "StoreFit", "archive_keys", "store_fit", "stores_beside"]

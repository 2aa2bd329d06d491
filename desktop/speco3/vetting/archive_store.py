"""Which vetting store an archive is vetted in, and whether a store fits an archive (no Qt).

The app keeps a store of its own per archive under its data folder; the night's screening (``spec-o3 vet ARCHIVE
--out r.sqlite``) writes another, wherever the vetter ran it. `store_fit` says whether such a store belongs to an
archive: the spectrum keys it holds verdicts, decisions or notes of (``PATH#N``, absolute paths) against the
archive (``holds``: the archive's index), and the archive folder it names (`ARCHIVE_ROOT_STATE`, set by ``vet``
and the app). `stores_beside` finds the stores that fit an archive in its folder and the folder above it, where a
night's run usually leaves them; `speco3.vetting.session.VettingSession.open_archive` checks the fit of a store the
vetter chose before it writes to it.

An archive moved after its store was made (``mv night1 /data/night1``) no longer fits it: the keys name the old
folder. `plan_relocation` says whether the folder moved (every file the store holds rows of is at the same relative
path under the new folder, with the size, and on request the sha256, the store noted when it screened it) and
`relocate` re-roots the store's keys in one transaction (`VettingStore.relocate_keys`): ``spec-o3 store relocate``
and the app's question when a store names an archive folder that is not there (`moved_store`), one chosen or one
lying beside the moved archive or among the app's own stores (`moved_beside`).
"""

from __future__ import annotations

import glob
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from speco3.errors import StoreError
from speco3.fileio import sha256_file
from speco3.spectra import ArchiveIndex
from speco3.vetting.stopping import plural
from speco3.vetting.store import ARCHIVE_ROOT_STATE, VettingStore
from speco3.vetting.writer_lock import WriterLock

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


def _stores_in(folders: list[tuple[Path, str]], exclude: Path | None) -> list[Path]:
    """The files matching each (folder, glob pattern) that may be vetting stores, at most `BESIDE_LIMIT` a folder,
    each once: not ``exclude`` (the store open) nor a store's companion files."""
    out: list[Path] = []
    seen: set[Path] = set() if exclude is None else {Path(exclude).resolve()}
    for where, pattern in dict.fromkeys(folders):
        try:
            files = sorted(p for p in where.glob(pattern) if p.is_file())[:BESIDE_LIMIT]
        except OSError as exc:
            log.debug("cannot list %s: %s", where, exc)
            continue
        for p in files:
            real = p.resolve()
            if real not in seen and not p.name.endswith(_COMPANIONS):
                seen.add(real)
                out.append(p)
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def stores_beside(root: str | Path, holds: Holds, exclude: Path | None = None) -> list[StoreFit]:
    """The vetting stores in the archive folder ``root`` and the folder above it that fit it (`StoreFit.problem`
    None) and hold something of it (a night's ``spec-o3 vet … --out r.sqlite``), newest first; ``exclude``: a store
    not to offer (the one open). Files that are not vetting stores are passed over. Stores made before the archive
    moved here: `moved_beside`."""
    folder = Path(root)
    found: list[tuple[float, StoreFit]] = []
    for p in _stores_in([(folder, "*.sqlite"), (folder.parent, "*.sqlite")], exclude):
        try:
            fit = store_fit(p, root, holds)
        except (StoreError, OSError) as exc:  # another application's SQLite file, a damaged one
            log.debug("%s: not offered as a vetting store: %s", p, exc)
            continue
        if fit.problem() is None and (fit.in_archive or fit.names_this_archive):
            found.append((_mtime(p), fit))
    return [fit for _t, fit in sorted(found, key=lambda t: -t[0])]


# -- a moved archive ---------------------------------------------------------------------------------------------
#: At most this many missing or changed files are named in a relocation's report (the counts are whole).
NAMED = 5


@dataclass(frozen=True)
class Relocation:
    """What moving a store from the archive folder ``old`` to ``new`` finds (`plan_relocation`).

    ``keys``: the store's spectrum keys under ``old``; ``files``: their files; ``found``: those at the same relative
    path under ``new`` with the size the store noted (and the sha256, when ``hashed``); ``missing``, ``changed``:
    the files not there, and those there with another size or sha256 (up to `NAMED` named in ``examples``);
    ``clashes``: keys the store already holds under ``new``; ``outside``: keys under neither folder (left as they
    are)."""

    old: str
    new: str
    keys: int
    files: int
    found: int
    missing: int
    changed: int
    clashes: int
    outside: int
    hashed: bool = False
    examples: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every file found unchanged and nothing in the way: the archive moved, as a whole."""
        return self.keys > 0 and self.found == self.files and not self.clashes

    def problem(self, allow_missing: bool = False) -> str | None:
        """Why the store is not re-rooted onto ``new`` (None: it may be; ``allow_missing``: files missing there do
        not stop it, changed ones do)."""
        if self.old == self.new:
            return f"the store's spectra are under {self.new} already: nothing to re-root"
        if not self.keys:
            return f"the store holds no spectrum under {self.old}"
        if self.clashes:
            return (f"the store already holds {plural(self.clashes, 'spectrum', 'spectra')} under {self.new} (the "
                    "two would mix): nothing re-rooted")
        if self.changed:
            return (f"{self.changed:,} of the {plural(self.files, 'file')} {'differs' if self.changed == 1 else 'differ'}"
                    f" in {self.new} (size{' or sha256' if self.hashed else ''}): not the same archive, nothing "
                    "re-rooted")
        if self.missing and not allow_missing:
            return (f"{self.missing:,} of the {plural(self.files, 'file')} {'is' if self.missing == 1 else 'are'} "
                    f"not in {self.new}: nothing re-rooted (--allow-missing re-roots every key all the same)")
        if not self.found:
            return (f"the file is not in {self.new}" if self.files == 1 else
                    f"none of the {self.files:,} files is in {self.new}")
        return None

    def describe(self) -> str:
        """One paragraph: what was found where."""
        check = "size and sha256" if self.hashed else "size"
        text = (f"{plural(self.keys, 'spectrum', 'spectra')} in {plural(self.files, 'file')} under {self.old}; in "
                f"{self.new}: {self.found:,} "
                f"found (same relative path, same {check} where the store noted it)")
        if self.missing:
            text += f", {self.missing:,} missing"
        if self.changed:
            text += f", {self.changed:,} changed"
        if self.examples:
            text += " (" + ", ".join(self.examples) + (", …" if self.missing + self.changed > len(self.examples)
                                                       else "") + ")"
        if self.clashes:
            text += f"; the store already holds {plural(self.clashes, 'spectrum', 'spectra')} under {self.new}"
        if self.outside:
            text += (f"; {plural(self.outside, 'spectrum', 'spectra')} under neither folder "
                     f"{'stays as it is' if self.outside == 1 else 'stay as they are'}")
        return text


class RelocationRefused(StoreError):
    """`relocate` refused after looking: ``plan`` is what it found, ``reason`` why it changed nothing (the message
    adds the store and the plan's description)."""

    def __init__(self, path: Path, plan: Relocation, reason: str):
        self.plan = plan
        self.reason = reason
        super().__init__(f"{path}: {reason}\n{plan.describe()}")


def _folder(path: str | Path) -> str:
    """A folder as keys name it: absolute, resolved where it exists, without a trailing separator."""
    p = Path(path).expanduser()
    try:
        p = p.resolve()
    except (OSError, RuntimeError):
        p = p.absolute()
    return str(p)


def plan_relocation(store: VettingStore, old: str | Path, new: str | Path, *, hash_files: bool = False
                    ) -> Relocation:
    """Whether the archive folder ``old`` of ``store``'s keys moved to ``new``: each file the store holds rows of
    is looked for at its relative path under ``new`` and compared with the size (``hash_files``: and the sha256)
    that the store noted for it (`VettingStore.file_stamps`, written when ``vet`` or the app screened it). Only
    reads."""
    old_root, new_root = _folder(old), _folder(new)
    old_prefix, new_prefix = old_root + os.sep, new_root + os.sep
    keys = store.spectrum_keys()
    under = [k for k in keys if k.startswith(old_prefix)]
    clashes = sum(k.startswith(new_prefix) for k in keys)
    files = sorted({k.rpartition("#")[0] or k for k in under})
    stamps = store.file_stamps()
    found = missing = changed = 0
    examples: list[str] = []
    for path in files:
        rel = path[len(old_prefix):]
        moved = Path(new_prefix + rel)
        try:
            size = moved.stat().st_size if moved.is_file() else None
        except OSError:
            size = None
        stamp = stamps.get(path)
        if size is None:
            missing += 1
            why = "missing"
        elif stamp is not None and (size != stamp[0] or (hash_files and _sha256(moved) != stamp[2])):
            changed += 1
            why = "changed"
        else:
            found += 1
            continue
        if len(examples) < NAMED:
            examples.append(f"{rel} {why}")
    return Relocation(old_root, new_root, len(under), len(files), found, missing, changed, clashes,
                      len(keys) - len(under) - clashes, hash_files, examples)


def _sha256(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def moved_store(path: str | Path, root: str | Path) -> Relocation | None:
    """The plan (`plan_relocation`) for the store at ``path`` when it was made before its archive moved to ``root``:
    the archive folder it names is not there, and files of its spectra lie at the same relative paths under
    ``root`` (some at least: whether all, unchanged, `Relocation.problem` says). None for any other store, and for
    a file that is no readable vetting store. Only reads."""
    try:
        with VettingStore(path, readonly=True) as store:
            named = store.get_state(ARCHIVE_ROOT_STATE)
            if not isinstance(named, str) or not named or Path(named).exists():
                return None
            plan = plan_relocation(store, named, root)
    except (StoreError, OSError) as exc:
        log.debug("%s: not a store of a moved archive: %s", path, exc)
        return None
    return plan if plan.found and plan.old != plan.new else None


def moved_beside(root: str | Path, exclude: Path | None = None, own_stores: Path | None = None,
                 remembered: Sequence[Path] = ()) -> list[tuple[Path, Relocation]]:
    """The stores made before the archive moved to ``root`` (`moved_store`) that lie where `stores_beside` looks
    (the archive folder and the folder above it), in ``own_stores`` (the app's folder of its own stores, named
    ``NAME-HASH.sqlite`` after the archive folder: those named as ``root`` is), and among ``remembered`` (stores
    the app was told to vet other archive folders in, wherever they lie), newest first; ``exclude``: a store not
    to offer (the app's own for ``root``)."""
    folder = Path(root)
    where = [(folder, "*.sqlite"), (folder.parent, "*.sqlite")]
    if own_stores is not None:
        where.append((own_stores, f"{glob.escape(folder.name)}-*.sqlite"))
    candidates = {p.resolve(): p for p in _stores_in(where, exclude)}
    for p in remembered:
        if p.is_file() and (exclude is None or p.resolve() != Path(exclude).resolve()):
            candidates.setdefault(p.resolve(), p)
    found = [(p, plan) for p in candidates.values() if (plan := moved_store(p, root)) is not None]
    return sorted(found, key=lambda t: -_mtime(t[0]))


def relocate(store_path: str | Path, old: str | Path, new: str | Path, *, allow_missing: bool = False,
             hash_files: bool = False, dry_run: bool = False) -> tuple[Relocation, dict[str, int]]:
    """Re-root the store at ``store_path`` from the archive folder ``old`` onto ``new`` (`plan_relocation`; keys
    and paths in one transaction, `VettingStore.relocate_keys`), unless the plan has a `Relocation.problem`
    (`RelocationRefused` with the plan: nothing changed) or ``dry_run``. The store must not be in use: an
    app writing it (its writer lock) or a screening holding live claims on it refuses the move. Returns the plan
    and the rows changed per column (empty on a dry run)."""
    path = Path(store_path)
    if not path.is_file():
        raise StoreError(f"{path}: no such vetting store")
    lock = WriterLock(path)
    try:
        holder = lock.acquire()
    except OSError as exc:
        raise StoreError(f"{path}: cannot take its writer lock ({exc.strerror or exc})") from exc
    if holder is not None:
        raise StoreError(f"{path}: being written by {holder.describe()}: close it there first")
    try:
        with VettingStore(path, readonly=dry_run) as store:
            plan = plan_relocation(store, old, new, hash_files=hash_files)
            problem = plan.problem(allow_missing)
            if problem is not None:
                raise RelocationRefused(path, plan, problem)
            if dry_run:
                return plan, {}
            now = time.time()
            live = [h for _k, _w, h, expires in store.claims() if expires > now and not h.gone()]
            if live:
                raise RelocationRefused(path, plan, f"a screening holds claims on it ({live[0]}): let it finish (or "
                                        "stop it) before relocating")
            changed = store.relocate_keys(plan.old + os.sep, plan.new + os.sep, plan.new)
    finally:
        lock.release()
    log.info("%s: relocated from %s to %s: %s", path, plan.old, plan.new, changed)
    return plan, changed


__all__ = ["BESIDE_LIMIT", "KEYS_CHECKED", "NAMED", "Holds", "Relocation", "RelocationRefused", "StoreFit", "archive_keys",
           "moved_beside", "moved_store", "plan_relocation", "relocate", "store_fit", "stores_beside"]

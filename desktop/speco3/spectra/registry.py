"""Format registry: detect a spectrum file's layout from its content and read it.

Each format is an ``(identify, read)`` pair. ``identify(src)`` looks at an opened :class:`Source` (headers,
HDU names, column names, or the text of an ASCII file) and answers True/False; ``read(src)`` returns a
:class:`FileContents` (or a list of spectra). Formats are tried by descending priority; the file name is never
consulted. A file is opened once, whatever the number of spectra it holds.

Addresses ``"FILE#N"`` select the N-th spectrum of a file; ``"FILE#<id>"`` selects by object id (e.g. a DESI
TARGETID) or HDU name when the selector is not a valid position.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from speco3.errors import SpectrumReadError
from speco3.spectra.model import Spectrum
from speco3.spectra.source import Source, SourceLike, open_source

log = logging.getLogger(__name__)
T = TypeVar("T")

Identify = Callable[[Source], bool]
Read = Callable[[Source], "FileContents | list[Spectrum]"]


class NoSpectraError(SpectrumReadError):
    """The file is readable but holds no spectrum (a catalogue, or only unassigned fibres)."""


class CompanionFileError(NoSpectraError):
    """The file is a companion of other files (a DESI redrock catalogue of its coadd): its content is read with
    theirs, and it is never listed or screened as a spectrum of its own.

    This is the one rule for companions: the archive index records such a file as a companion (no spectrum row,
    no error), so ``index``, ``vet``, the GUI table and the batch pre-screen, which all take their spectra from the
    index, never see it. ``format`` is the registry name of its layout, set when the reader raises it.
    """

    format: str = ""


@dataclass
class FileContents:
    """What a reader found in one file.

    Attributes
    ----------
    spectra : list of Spectrum
        The spectra, in address order (``FILE#0``, ``FILE#1``, ...).
    skipped : list of (str, str)
        Entries that were deliberately not returned, as ``(what, reason)``, e.g.
        ``("row 3, TARGETID -1695072", "unassigned fibre (negative TARGETID)")``.
    depends_on : list of str
        Other files whose content went into the spectra (e.g. a DESI redrock file); the archive index
        re-reads this file when one of them changes.
    """

    spectra: list[Spectrum] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    format: str = ""


@dataclass(frozen=True)
class Format:
    name: str
    identify: Identify
    read: Read
    priority: int = 0


_FORMATS: dict[str, Format] = {}
_BUILTINS_LOADED = False
_BUILTINS_LOCK = threading.RLock()


def register_format(name: str, identify: Identify, read: Read, priority: int = 0) -> None:
    """Add (or replace) a format.

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"lamost-lrs"``.
    identify : callable
        ``identify(src: Source) -> bool``. Must be cheap and must not raise for foreign files.
    read : callable
        ``read(src: Source) -> FileContents | list[Spectrum]``. Raises ``SpectrumReadError`` with a reason.
    priority : int
        Higher is tried first. Specific survey layouts use 50-100, generic fallbacks 0-20.
    """
    _FORMATS[name] = Format(name, identify, read, priority)


def _load_builtins() -> None:
    """Register the built-in formats once. Threads that read at once (``vet --concurrency``) wait for the whole
    set: the flag is set only after every format is registered (set first, a second thread saw a half-filled
    registry and called a DESI coadd an unknown layout)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    with _BUILTINS_LOCK:
        if _BUILTINS_LOADED:
            return
        from speco3.spectra.formats import load_all

        load_all(register_format)
        _BUILTINS_LOADED = True


def _ordered() -> list[Format]:
    _load_builtins()
    return sorted(_FORMATS.values(), key=lambda f: -f.priority)


def formats() -> list[str]:
    """Names of the registered formats, in the order they are tried."""
    return [f.name for f in _ordered()]


_ADDRESS = re.compile(r"^(?P<path>.+?)#(?P<sel>[^#/\\]*)$")


def parse_address(s: str | os.PathLike) -> tuple[str, str | None]:
    """Split ``"FILE#N"`` / ``"FILE#<id>"`` into ``(path, selector)``.

    A ``#`` that is part of an existing file's name is kept in the path. Without ``#`` the selector is None.
    """
    text = os.fspath(s)
    m = _ADDRESS.match(text)
    if not m or os.path.exists(text):
        return text, None
    sel = m.group("sel").strip()
    return m.group("path"), (sel or None)


def _detect(src: Source) -> Format:
    for fmt in _ordered():
        try:
            if fmt.identify(src):
                return fmt
        except SpectrumReadError:
            raise
        except Exception as exc:  # a broken identify must not hide other formats
            log.debug("identify %s failed on %s: %s", fmt.name, src.display, exc)
    raise SpectrumReadError(src.display, f"unknown layout: {src.describe()}")


def _with_source(source: SourceLike, fn: Callable[[Source], T]) -> T:
    path, _ = (parse_address(source) if isinstance(source, str | os.PathLike) else (None, None))
    src = open_source(path if path is not None else source)
    try:
        return fn(src)
    finally:
        src.close()


def identify(source: SourceLike) -> str:
    """Name of the format of ``source`` (a path, ``FILE#N`` address or binary file object)."""
    return _with_source(source, lambda src: _detect(src).name)


def read_file(source: SourceLike) -> FileContents:
    """Read every spectrum of a file, with the list of skipped entries and the files it depends on."""

    def run(src: Source) -> FileContents:
        fmt = _detect(src)
        try:
            result = fmt.read(src)
        except CompanionFileError as exc:
            exc.format = fmt.name
            raise
        except SpectrumReadError:
            raise
        except Exception as exc:  # bad input must give a reason, never a traceback
            log.debug("reader %s failed on %s", fmt.name, src.display, exc_info=True)
            trunc = src.truncation()
            reason = trunc or f"{fmt.name} layout could not be read: {type(exc).__name__}: {exc}"
            raise SpectrumReadError(src.display, reason) from exc
        contents = result if isinstance(result, FileContents) else FileContents(spectra=list(result))
        contents.format = fmt.name
        trunc = src.truncation()
        if trunc:
            raise SpectrumReadError(src.display, trunc)
        if not contents.spectra:
            why = "; ".join(f"{what}: {reason}" for what, reason in contents.skipped[:5])
            raise NoSpectraError(src.display, f"no spectra in this {fmt.name} file" + (f" ({why})" if why else ""))
        for i, spec in enumerate(contents.spectra):
            m = spec.meta
            m.index = i
            m.format = fmt.name
            m.file_name = src.name
            m.path = src.path_str
            if len(contents.spectra) > 1:
                m.extra["multi"] = True
            if spec.is_empty:
                note = "empty spectrum: all pixels masked or non-finite"
                m.note = note if not m.note else f"{m.note}; {note}"
        empty = [i for i, spec in enumerate(contents.spectra) if spec.n_pixels == 0]
        if empty:  # no pixels at all is no spectrum (all-masked ones are kept, with the note); others keep #N
            contents.skipped.extend((f"spectrum {i}", "no pixels (zero-length data)") for i in empty)
            contents.spectra = [s for s in contents.spectra if s.n_pixels > 0]
            if not contents.spectra:
                raise NoSpectraError(src.display, f"no spectra in this {fmt.name} file (no pixels: zero-length data)")
        return contents

    return _with_source(source, run)


def read_spectra(source: SourceLike) -> list[Spectrum]:
    """All spectra of a file (path, file object, or address; an address's selector is ignored)."""
    return read_file(source).spectra


def select_spectrum(spectra: list[Spectrum], selector: str, display: str) -> Spectrum:
    if re.fullmatch(r"-?\d+", selector):
        n = int(selector)
        if 0 <= n < len(spectra):
            return spectra[n]
    for spec in spectra:
        if spec.meta.object_id is not None and str(spec.meta.object_id).strip() == selector:
            return spec
    for spec in spectra:
        if spec.meta.hdu is not None and str(spec.meta.hdu).lower() == selector.lower():
            return spec
    raise SpectrumReadError(
        f"{display}#{selector}",
        f"no spectrum '{selector}': the file holds {len(spectra)} spectr{'um' if len(spectra) == 1 else 'a'} (#0..#{len(spectra) - 1})",
    )


def read_spectrum(source: SourceLike, index: int | str | None = None) -> Spectrum:
    """One spectrum of a file.

    Parameters
    ----------
    source : path, str address ``FILE#N`` / ``FILE#<id>``, or binary file object
    index : int or str, optional
        Position or object id; overrides the address's selector. Default: the first spectrum.
    """
    selector: str | None = None
    display = "<file object>"
    if isinstance(source, str | os.PathLike):
        path, selector = parse_address(source)
        display = path
        source = path
    if index is not None:
        selector = str(index)
    spectra = read_spectra(source)
    if selector is None:
        return spectra[0]
    return select_spectrum(spectra, selector, display)


__all__ = [
    "CompanionFileError",
    "FileContents",
    "Format",
    "NoSpectraError",
    "formats",
    "identify",
    "parse_address",
    "read_file",
    "read_spectra",
    "read_spectrum",
    "register_format",
]

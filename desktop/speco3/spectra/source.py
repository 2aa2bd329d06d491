"""Opening a spectrum file once: FITS (plain, gzip, bzip2, tile-compressed) or ASCII/CSV, from a path or a file object.

The kind is decided from the first bytes (``SIMPLE  =`` for FITS, gzip/bzip2 magic numbers, printable text),
never from the file name. FITS files are opened lazily with astropy; readers ask for the headers and HDUs they need.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import logging
import os
import re
import warnings
import zlib
from pathlib import Path
from typing import IO, Any

from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra._header import FastHeader, _parse_value  # noqa: F401 - re-exported (readers, _tables)

log = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b"
BZIP2_MAGIC = b"BZh"
FITS_MAGIC = b"SIMPLE  ="
#: ``fits.open(memmap=...)``; False measured faster for the small files of survey archives (benchmarks/bench_read.py).
MEMMAP = False


class Source:
    """An opened file: either an astropy ``HDUList`` (``hdul``) or decoded ``text``.

    Attributes
    ----------
    display : str
        What error messages name (the path, or ``<file object>``).
    path : Path or None
        The file on disk, when there is one (needed to find sibling files).
    """

    def __init__(self, display: str, path: Path | None, hdul: fits.HDUList | None = None, text: str | None = None):
        self.display = display
        self.path = path
        self.hdul = hdul
        self.text = text
        self._warnings: list[str] = []
        self._names: list[str] | None = None
        self._fixed = False
        self._owned: IO[bytes] | None = None  # the file the HDU list reads lazily from, closed with the source

    def keep_open(self, fh: IO[bytes]) -> None:
        """Close ``fh`` (the file the HDU list was opened on) when the source is closed."""
        self._owned = fh

    # -- identity ------------------------------------------------------------------------------------
    @property
    def name(self) -> str | None:
        return self.path.name if self.path is not None else None

    @property
    def path_str(self) -> str | None:
        return str(self.path) if self.path is not None else None

    @property
    def is_fits(self) -> bool:
        return self.hdul is not None

    # -- lazy HDU access -----------------------------------------------------------------------------
    def hdu(self, key: int | str) -> Any:
        """The HDU at position or with EXTNAME ``key``, or None (never raises for a missing HDU)."""
        if self.hdul is None:
            return None
        cache = self.__dict__.setdefault("_hdus", {})  # identify functions ask for the same HDUs many times
        if key in cache:
            return cache[key]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cache[key] = self.hdul[key]
            except (IndexError, KeyError):
                cache[key] = None
            finally:
                self._note(caught)
        return cache[key]

    @property
    def primary(self) -> FastHeader:
        """Values of the primary header as a plain dict (see :class:`FastHeader`)."""
        return self.header(0)

    def header(self, key: int | str = 0) -> FastHeader:
        """Values of an HDU's header as a :class:`FastHeader` (cached); empty when the HDU is missing."""
        cache = self.__dict__.setdefault("_headers", {})
        if key not in cache:
            h = self.hdu(key)
            cache[key] = FastHeader.from_hdu(h) if h is not None else FastHeader()
        return cache[key]

    def count(self) -> int:
        """Number of HDUs (reads every header)."""
        return len(self.names())

    def names(self) -> list[str]:
        """Upper-case EXTNAME of every HDU ('' when unnamed); reads every header once."""
        if self._names is None:
            if self.hdul is None:
                self._names = []
            else:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    self.hdul.readall() if hasattr(self.hdul, "readall") else len(self.hdul)
                    self._note(caught)
                self._names = [str(h.name or "").upper() for h in self.hdul]
        return self._names

    def silentfix(self) -> None:
        """Repair malformed header cards in place (``hdul.verify('silentfix')``), once."""
        if self.hdul is not None and not self._fixed:
            self._fixed = True
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    self.hdul.verify("silentfix+ignore")
                except Exception as exc:  # verification problems that cannot be fixed stay for the reader
                    log.debug("verify failed on %s: %s", self.display, exc)
                self._note(caught)

    def data(self, key: int | str) -> Any:
        """Data of an HDU; raises SpectrumReadError naming the HDU when it is missing or unreadable."""
        h = self.hdu(key)
        if h is None:
            raise SpectrumReadError(self.display, f"HDU {key!r} is missing")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return h.data
            except (ValueError, OSError, TypeError) as exc:
                self._note(caught)
                trunc = self.truncation()
                raise SpectrumReadError(self.display, trunc or f"HDU {key!r} data cannot be read: {exc}") from exc
            finally:
                self._note(caught)

    # -- diagnostics ---------------------------------------------------------------------------------
    def _note(self, caught: list) -> None:
        self._warnings.extend(str(w.message) for w in caught)

    def truncation(self) -> str | None:
        """A 'truncated file' reason when astropy warned about it, else None."""
        for msg in self._warnings:
            if "truncated" in msg.lower():
                return f"truncated file ({msg.strip()})"
        return None

    def describe(self) -> str:
        """Short list of the HDUs found, for 'unknown layout' messages."""
        if self.hdul is None:
            first = (self.text or "").strip().splitlines()[:1]
            return f"text file, first line {first[0][:60]!r}" if first else "empty text file"
        parts = []
        with contextlib.suppress(Exception):  # listing is best effort
            self.names()
        i = 0
        try:  # iterating loads the next HDU lazily: a damaged one ends the listing, never the error report
            for i, h in enumerate(self.hdul):
                if i >= 12:
                    parts.append("... more")
                    break
                try:
                    parts.append(_describe_hdu(i, h))
                except Exception as exc:  # a damaged header (unparsable card, unknown TFORM, missing NAXISn)
                    parts.append(f"{i} damaged header ({type(exc).__name__}: {str(exc)[:60]})")
        except Exception as exc:
            parts.append(f"HDU {i + 1 if parts else 0} unreadable ({type(exc).__name__}: {str(exc)[:60]})")
        return "HDUs found: " + "; ".join(parts) if parts else "no HDUs"

    def close(self) -> None:
        if self.hdul is not None:
            with contextlib.suppress(Exception), warnings.catch_warnings():  # must not mask the real error
                warnings.simplefilter("ignore")
                self.hdul.close()
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()


def _describe_hdu(i: int, h: Any) -> str:
    hdr = h.header
    nax = int(hdr.get("NAXIS", 0) or 0)
    name = repr(str(h.name)) if h.name else "unnamed"
    if isinstance(h, fits.BinTableHDU | fits.TableHDU):
        names = [str(n) for n in h.columns.names]
        cols = ",".join(names[:6]) + (",..." if len(names) > 6 else "")
        return f"{i} {name} table {hdr.get('NAXIS2', 0)} rows [{cols}]"
    if nax:
        shape = "x".join(str(hdr.get(f"NAXIS{k}")) for k in range(nax, 0, -1))
        return f"{i} {name} image {shape}"
    return f"{i} {name} header only"


#: FITS limits on NAXIS and TFIELDS (standard 4.0, §4.4.1 and §7.3.1); astropy loops over every claimed one.
MAX_AXES = 999
_BLOCK, _CARD = 2880, 80
_COUNT_CARD = re.compile(rb"^(NAXIS\d{0,3}|TFIELDS|BITPIX|PCOUNT|GCOUNT) *= *([+-]?\d+) *(?:/.*)?$")


def check_header_counts(fh: Any, display: str, max_hdus: int = 1000, max_header_bytes: int = 64 * _BLOCK) -> str | None:
    """Refuse a FITS file whose headers claim a NAXIS or TFIELDS outside 0..999 or a negative size, before astropy.

    astropy builds its axis and column lists with a Python loop over the claimed count, so a damaged card such as
    ``NAXIS = 99999999`` keeps it busy for minutes, and a negative ``NAXISn`` or ``PCOUNT`` makes it walk the same
    headers again and again. Only the header blocks are read (the data is skipped by
    seeking). The file position is restored.

    Returns
    -------
    str or None
        A "truncated" note when the file ends before the data its headers declare (astropy only notices when a
        reader touches the damaged HDU, so a half-copied file could otherwise pass as complete), else None.

    Raises
    ------
    SpectrumReadError
        Naming the HDU and the card.
    """
    start = fh.tell()
    try:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        pos = 0
        for n in range(max_hdus):
            if pos + _BLOCK > size:
                return None
            values: dict[bytes, int] = {}
            header_end = None
            block_pos = pos
            while header_end is None:
                if block_pos - pos >= max_header_bytes:
                    return None
                fh.seek(block_pos)
                block = fh.read(_BLOCK)
                if len(block) < _BLOCK:  # the file ends inside a header
                    return f"File may have been truncated: the header of HDU {n} ends early (file size {size})"
                for k in range(0, _BLOCK, _CARD):
                    card = block[k : k + _CARD]
                    if card[:1] not in b"NTBPGE":  # cheap filter: only END and the counting keywords matter
                        continue
                    if card[:8] == b"END     ":
                        header_end = block_pos + _BLOCK
                        break
                    m = _COUNT_CARD.match(card.rstrip())
                    if m and m.group(1) not in values:
                        values[m.group(1)] = int(m.group(2))
                block_pos += _BLOCK
            for key in (b"NAXIS", b"TFIELDS"):
                v = values.get(key)
                if v is not None and not 0 <= v <= MAX_AXES:
                    raise SpectrumReadError(
                        display, f"damaged header in HDU {n}: {key.decode()} = {v} (FITS allows 0..{MAX_AXES})")
            naxis = values.get(b"NAXIS", 0)
            nelem = 1 if naxis else 0
            for a in range(1, naxis + 1):
                v = values.get(b"NAXIS%d" % a, 0)
                if v < 0:  # a negative size sends astropy's HDU walk backwards, over and over
                    raise SpectrumReadError(display, f"damaged header in HDU {n}: NAXIS{a} = {v} (negative)")
                nelem *= v
            if values.get(b"PCOUNT", 0) < 0:
                raise SpectrumReadError(display, f"damaged header in HDU {n}: PCOUNT = {values[b'PCOUNT']} (negative)")
            data = abs(values.get(b"BITPIX", 8)) // 8 * max(values.get(b"GCOUNT", 1), 1) * (
                max(values.get(b"PCOUNT", 0), 0) + nelem) if naxis else 0
            if header_end + data > size:
                return (f"File may have been truncated: HDU {n} declares {data} data bytes ending at byte "
                        f"{header_end + data}, the file has {size}")
            pos = header_end + -(-data // _BLOCK) * _BLOCK
    except (OSError, ValueError):  # unseekable or closed: astropy will say what is wrong
        return None
    finally:
        with contextlib.suppress(OSError, ValueError):
            fh.seek(start)
    return None


def _sniff_text(raw: bytes) -> str | None:
    if not raw or b"\x00" in raw[:4096]:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    sample = text[:4096]
    printable = sum(c.isprintable() or c in "\r\n\t" for c in sample)
    return text if printable >= 0.97 * len(sample) else None


def _from_bytes(raw: bytes, display: str, path: Path | None) -> Source:
    head = raw[:16]
    if head.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise SpectrumReadError(display, f"corrupt or truncated gzip stream: {exc}") from exc
        return _from_bytes(raw, display, path)
    if head.startswith(BZIP2_MAGIC):
        try:
            raw = bz2.decompress(raw)
        except (OSError, EOFError, ValueError) as exc:
            raise SpectrumReadError(display, f"corrupt or truncated bzip2 stream: {exc}") from exc
        return _from_bytes(raw, display, path)
    if raw.startswith(FITS_MAGIC):
        return _open_fits(io.BytesIO(raw), display, path)
    return _text_source(raw, display, path)


def _text_source(raw: bytes, display: str, path: Path | None) -> Source:
    if not raw:
        raise SpectrumReadError(display, "empty file")
    text = _sniff_text(raw)
    if text is None:
        raise SpectrumReadError(display, f"not a FITS file and not text (starts with {raw[:16]!r})")
    return Source(display, path, text=text)


def _open_fits(target: Any, display: str, path: Path | None) -> Source:
    truncated = check_header_counts(target, display)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            hdul = fits.open(target, memmap=MEMMAP, lazy_load_hdus=True)
        except Exception as exc:  # astropy raises many kinds for damaged files
            raise SpectrumReadError(display, f"corrupt FITS file: {exc}") from exc
    src = Source(display, path, hdul=hdul)
    src._note(caught)
    if truncated:
        src._warnings.append(truncated)
    try:
        _ = hdul[0].header
    except Exception as exc:
        src.close()
        raise SpectrumReadError(display, f"corrupt FITS primary header: {exc}") from exc
    return src


#: What a reader opens: a path (``str`` or path-like; `speco3.spectra.registry` also takes ``FILE#N``) or a binary
#: file object.
SourceLike = str | os.PathLike[str] | IO[bytes]


def open_source(source: SourceLike) -> Source:
    """Open a path or binary file object once; raise SpectrumReadError for missing, empty or non-spectrum files."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        display = str(path)
        if not path.exists():
            raise SpectrumReadError(display, "file not found")
        if path.is_dir():
            raise SpectrumReadError(display, "is a folder, not a file")
        try:  # the file is opened once: sniffed, then handed to astropy or read whole
            fh = open(path, "rb")  # noqa: SIM115 - owned by the Source, closed by Source.close()
        except OSError as exc:
            raise SpectrumReadError(display, f"cannot open: {exc.strerror or exc}") from exc
        try:
            head = fh.read(16)
            if not head:
                raise SpectrumReadError(display, "empty file (0 bytes)")
            if head.startswith(FITS_MAGIC):
                fh.seek(0)
                src = _open_fits(fh, display, path.resolve())
                src.keep_open(fh)
                return src
            raw = head + fh.read()
        except BaseException:
            fh.close()
            raise
        fh.close()
        return _from_bytes(raw, display, path.resolve())
    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        display = str(name) if isinstance(name, str) else "<file object>"
        try:
            raw = source.read()
        except OSError as exc:
            raise SpectrumReadError(display, f"cannot read file object: {exc}") from exc
        if isinstance(raw, str):
            raw = raw.encode("utf-8")
        p = Path(name).resolve() if isinstance(name, str) and os.path.exists(name) else None
        return _from_bytes(raw, display, p)
    raise SpectrumReadError(repr(source)[:80], f"unsupported source type {type(source).__name__}")

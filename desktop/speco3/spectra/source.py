"""Opening a spectrum file once: FITS (plain, gzip, bzip2, tile-compressed) or ASCII/CSV, from a path or a file object.

The kind is decided from the first bytes (``SIMPLE  =`` for FITS, gzip/bzip2 magic numbers, printable text),
never from the file name. FITS files are opened lazily with astropy; readers ask for the headers and HDUs they need.
Reading is bounded (`ReadLimits`): one layer of compression, decompressed no further than the FITS headers
declare (plus a margin) and never past a ceiling, so that a decompression bomb fails after a chunk, not gigabytes.
"""

from __future__ import annotations

import bz2
import contextlib
import io
import logging
import os
import re
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra._header import FastHeader, _parse_value  # noqa: F401 - re-exported (readers, _tables)

if TYPE_CHECKING:
    from astropy.io.fits.hdu.base import (
        _BaseHDU,  # every HDU class's base (astropy ships no type information)
    )
    from typing_extensions import Buffer

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
    def hdu(self, key: int | str) -> Any:  # _BaseHDU | None; readers rely on identify() having found it (docs/incoming/types3.md)
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


def _describe_hdu(i: int, h: _BaseHDU) -> str:
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
_COUNT_CARD = re.compile(rb"^(Z?NAXIS\d{0,3}|TFIELDS|Z?BITPIX|PCOUNT|GCOUNT) *= *([+-]?\d+) *(?:/.*)?$")


@dataclass(frozen=True)
class ReadLimits:
    """How much a file may expand to when it is read: the bounds on decompression.

    Attributes
    ----------
    ceiling : int
        Bytes a compressed file may decompress to, and bytes one HDU may declare for its (tile-compressed or
        decompressed) data, whatever its header says. ``SPECO3_MAX_DECOMPRESSED_MB`` sets it (default 1024 MB);
        the archive index divides it between its worker processes, so that parallel reads stay within it as a whole.
    margin : int
        Bytes a decompressed FITS file may hold past the end of the content its headers declare (padding).
    """

    ceiling: int = 1 << 30
    margin: int = 1 << 20

    @property
    def text_ceiling(self) -> int:
        """Bytes of a text (ASCII/CSV) spectrum: parsing costs several times its size, so a quarter of the ceiling."""
        return self.ceiling // 4

    @classmethod
    def from_env(cls) -> ReadLimits:
        text = os.environ.get(LIMIT_ENV, "").strip()
        if not text:
            return cls()
        try:
            mb = float(text)
        except ValueError:
            log.warning("%s=%r is not a number of MB; using the default", LIMIT_ENV, text)
            return cls()
        return cls(ceiling=max(1, int(mb * (1 << 20))))


#: Environment variable of `ReadLimits.ceiling`, in MB.
LIMIT_ENV = "SPECO3_MAX_DECOMPRESSED_MB"
_limits: ReadLimits | None = None


def read_limits() -> ReadLimits:
    """The bounds in force in this process (`set_read_limits`, else from the environment)."""
    global _limits
    if _limits is None:
        _limits = ReadLimits.from_env()
    return _limits


def set_read_limits(limits: ReadLimits | None) -> None:
    """Set the bounds of this process (None: back to the environment's); the archive index's workers call it."""
    global _limits
    _limits = limits


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.0f} MB" if n >= 1 << 20 else f"{n} bytes"


def _header_cards(block: bytes, values: dict[bytes, int]) -> bool:
    """Collect the counting cards (NAXISn, BITPIX, ...) of one header block into ``values``; True at END."""
    for k in range(0, _BLOCK, _CARD):
        card = block[k : k + _CARD]
        if card[:1] not in b"NTBPGEZ":  # cheap filter: only END and the counting keywords matter
            continue
        if card[:8] == b"END     ":
            return True
        m = _COUNT_CARD.match(card.rstrip())
        if m and m.group(1) not in values:
            values[m.group(1)] = int(m.group(2))
    return False


def _declared_data(values: dict[bytes, int], display: str, n: int, limits: ReadLimits) -> int:
    """Data bytes an HDU's header declares; raises for counts FITS does not allow and for sizes over the ceiling."""
    for key in (b"NAXIS", b"TFIELDS", b"ZNAXIS"):
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
    # a tile-compressed image expands to ZNAXIS1 x ZNAXIS2 x ... pixels of ZBITPIX when its data is read
    znaxis = values.get(b"ZNAXIS", 0)
    image = abs(values.get(b"ZBITPIX", 8)) // 8 if znaxis else 0
    for a in range(1, znaxis + 1):
        image *= max(values.get(b"ZNAXIS%d" % a, 0), 0)
    biggest = max(data, image)
    if biggest > limits.ceiling:
        what = "tile-compressed image" if image > data else "data"
        raise SpectrumReadError(
            display, f"HDU {n} declares {_mb(biggest)} of {what}, over the {_mb(limits.ceiling)} read limit "
                     f"(a damaged header or a decompression bomb; {LIMIT_ENV} raises the limit)")
    return data


def check_header_counts(fh: IO[bytes], display: str, max_hdus: int = 1000, max_header_bytes: int = 64 * _BLOCK) -> str | None:
    """Refuse a FITS file whose headers claim a NAXIS or TFIELDS outside 0..999, a negative size, or data over the
    read limit (`ReadLimits.ceiling`), before astropy.

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
    limits = read_limits()
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
                if _header_cards(block, values):
                    header_end = block_pos + _BLOCK
                block_pos += _BLOCK
            data = _declared_data(values, display, n, limits)
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


class _FitsExtent:
    """Follows the HDUs of a FITS stream as it is decompressed: where the content its headers declare ends."""

    def __init__(self, display: str, limits: ReadLimits):
        self.display, self.limits = display, limits
        self.pos = 0  # start of the next header
        self.hdus = 0
        self.end: int | None = None  # set once a block that starts no HDU follows the last one

    def feed(self, buf: bytearray) -> None:
        """Walk the headers that ``buf`` now holds completely."""
        while self.end is None and self.pos + _BLOCK <= len(buf):
            if self.pos and buf[self.pos : self.pos + 9] != b"XTENSION=":  # no further HDU: the content ends here
                self.end = self.pos
                return
            values: dict[bytes, int] = {}
            block_pos = self.pos
            while True:
                if block_pos + _BLOCK > len(buf):
                    return  # the header is not all decompressed yet
                if block_pos - self.pos >= 64 * _BLOCK:
                    raise SpectrumReadError(self.display, f"header of HDU {self.hdus} has no END card in its first "
                                                          f"{64 * _BLOCK} bytes")
                if _header_cards(bytes(buf[block_pos : block_pos + _BLOCK]), values):
                    break
                block_pos += _BLOCK
            data = _declared_data(values, self.display, self.hdus, self.limits)
            self.pos = block_pos + _BLOCK + -(-data // _BLOCK) * _BLOCK
            self.hdus += 1

    def allowed(self) -> int:
        """Bytes the stream may decompress to, given the headers walked so far."""
        if self.end is not None:
            return min(self.end + self.limits.margin, self.limits.ceiling)
        return min(max(self.pos, _BLOCK) + self.limits.margin, self.limits.ceiling) if self.pos else self.limits.ceiling


_CHUNK = 1 << 20


def inflate(fh: IO[bytes], kind: str, display: str, limits: ReadLimits | None = None) -> bytes:
    """Decompress a gzip or bzip2 stream (every member of it) from ``fh``, within the read limits.

    The output is checked as it grows, so that a decompression bomb (a small file that expands to gigabytes)
    fails after at most one chunk past the limit: a FITS stream may expand to what its headers declare plus
    `ReadLimits.margin`, no HDU may declare more than `ReadLimits.ceiling`, any other content to
    `ReadLimits.text_ceiling`. One layer only: compressed data inside compressed data is refused.
    """
    limits = limits or read_limits()
    out = bytearray()
    extent: _FitsExtent | None = None
    try:
        for chunk in _inflated_chunks(fh, kind, display):
            out += chunk
            if extent is None and len(out) >= 16:
                if out.startswith(GZIP_MAGIC) or out.startswith(BZIP2_MAGIC):
                    raise SpectrumReadError(display, "compressed data inside compressed data: only one layer of "
                                                     "compression is read (decompress the file once yourself)")
                if out.startswith(FITS_MAGIC):
                    extent = _FitsExtent(display, limits)
            if extent is not None:
                extent.feed(out)
                allowed = extent.allowed()
                if len(out) > allowed:
                    declared = extent.end if extent.end is not None else extent.pos
                    raise SpectrumReadError(
                        display, f"{kind} stream expands past the {_mb(declared)} its FITS headers declare (more "
                                 f"than {_mb(allowed)} decompressed): a decompression bomb or a damaged file")
            elif len(out) > limits.text_ceiling:
                raise SpectrumReadError(display, f"{kind} stream expands to more than {_mb(limits.text_ceiling)} "
                                                 f"of non-FITS data: over the read limit ({LIMIT_ENV} raises it)")
    except (zlib.error, OSError, EOFError, ValueError) as exc:
        raise SpectrumReadError(display, f"corrupt or truncated {kind} stream: {exc}") from exc
    return bytes(out)


def _inflated_chunks(fh: IO[bytes], kind: str, display: str) -> Iterator[bytes]:
    """Decompressed pieces of at most `_CHUNK` bytes, member after member (concatenated gzip or bzip2 streams)."""
    magic = GZIP_MAGIC if kind == "gzip" else BZIP2_MAGIC
    data = fh.read(_CHUNK)
    while True:
        dec: Any = zlib.decompressobj(16 + zlib.MAX_WBITS) if kind == "gzip" else bz2.BZ2Decompressor()
        while not dec.eof:
            if kind == "gzip" or dec.needs_input:
                if not data:
                    data = fh.read(_CHUNK)
                    if not data:
                        raise SpectrumReadError(display, f"corrupt or truncated {kind} stream: it ends before its "
                                                         "end-of-stream marker")
                if kind == "gzip":
                    chunk = dec.decompress(data, _CHUNK)
                    data = dec.unconsumed_tail
                else:
                    chunk, data = dec.decompress(data, max_length=_CHUNK), b""
            else:  # bzip2 holds more output for the input it has
                chunk = dec.decompress(b"", max_length=_CHUNK)
            yield chunk
        data = dec.unused_data
        while not data or not data.strip(b"\x00"):  # nothing more, or zero padding after the last member
            data = fh.read(_CHUNK)
            if not data:
                return
        data = data.lstrip(b"\x00") if not data.startswith(magic[:1]) else data
        if not data.startswith(magic[: len(data)]):
            raise SpectrumReadError(display, f"corrupt or truncated {kind} stream: other data after its end")


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


def _from_stream(fh: IO[bytes], head: bytes, display: str, path: Path | None) -> Source:
    """A source from a stream positioned at its start whose first bytes are ``head``: compressed content is
    decompressed once, within the read limits (`inflate`); other content is read up to the text limit."""
    for kind, magic in (("gzip", GZIP_MAGIC), ("bzip2", BZIP2_MAGIC)):
        if head.startswith(magic):
            raw = inflate(fh, kind, display)
            if raw.startswith(FITS_MAGIC):
                return _open_fits(io.BytesIO(raw), display, path)
            return _text_source(raw, display, path)
    if head.startswith(FITS_MAGIC):  # a caller's stream, read whole (a file on disk is opened lazily instead)
        raw = fh.read(read_limits().ceiling + 1)
        if len(raw) > read_limits().ceiling:
            raise SpectrumReadError(display, f"FITS stream larger than the {_mb(read_limits().ceiling)} read limit")
        return _open_fits(io.BytesIO(raw), display, path)
    limit = read_limits().text_ceiling
    raw = fh.read(min(limit + 1, 1 << 16))
    if len(raw) == 1 << 16 and _sniff_text(raw) is not None:  # text so far (binary junk is refused unread)
        raw += fh.read(limit + 1 - len(raw))
    if len(raw) > limit:
        raise SpectrumReadError(display, f"not a FITS file, and larger than the {_mb(limit)} read limit of a text "
                                         f"file (starts with {raw[:16]!r})")
    return _text_source(raw, display, path)


class _Prefixed(io.RawIOBase):
    """A caller's binary stream with its first bytes, already read to sniff the kind, put back in front."""

    def __init__(self, head: bytes, rest: IO[bytes]):
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(view), len(self._head))
            view[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


def _text_source(raw: bytes, display: str, path: Path | None) -> Source:
    if not raw:
        raise SpectrumReadError(display, "empty file")
    text = _sniff_text(raw)
    if text is None:
        raise SpectrumReadError(display, f"not a FITS file and not text (starts with {raw[:16]!r})")
    return Source(display, path, text=text)


def _open_fits(target: IO[bytes], display: str, path: Path | None) -> Source:
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
            fh.seek(0)
            if head.startswith(FITS_MAGIC):  # astropy reads it lazily from the file
                src = _open_fits(fh, display, path.resolve())
                src.keep_open(fh)
                return src
        except BaseException:
            fh.close()
            raise
        with fh:
            return _from_stream(fh, head, display, path.resolve())
    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        display = str(name) if isinstance(name, str) else "<file object>"
        p = Path(name).resolve() if isinstance(name, str) and os.path.exists(name) else None
        try:
            head = source.read(16)
            if isinstance(head, str):  # a text stream: read whole, up to the text limit
                text = head + source.read(read_limits().text_ceiling + 1 - len(head))
                return _from_stream(io.BytesIO(text.encode("utf-8")), text[:16].encode("utf-8"), display, p)
            return _from_stream(io.BufferedReader(_Prefixed(head, source)), head, display, p)
        except OSError as exc:
            raise SpectrumReadError(display, f"cannot read file object: {exc}") from exc
    raise SpectrumReadError(repr(source)[:80], f"unsupported source type {type(source).__name__}")

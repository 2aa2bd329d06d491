"""Seeded FITS mutator for the robustness suite and the fuzz benchmark.

Each case is a (name, kind, bytes) triple derived from a real file in ``tests/data/spectra``: truncation, bit flips in
headers and data, lying NAXISn / BITPIX / TFORM cards, broken CONTINUE cards, NaN / inf / zero-length arrays, wrong
column types and gzip corruption. The same seed gives the same cases.
"""

from __future__ import annotations

import gzip
import io
import random
import re
import signal
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BLOCK = 2880
CARD = 80

KINDS = (
    "truncate",
    "bitflip_header",
    "bitflip_data",
    "lie_naxis",
    "lie_bitpix",
    "lie_tform",
    "broken_continue",
    "nan_inf",
    "zero_length",
    "wrong_column_type",
    "gzip_corrupt",
)


@dataclass
class Case:
    name: str
    kind: str
    data: bytes
    suffix: str  # ".fits" or ".fits.gz"
    source: Path | None = None  # the unmutated file


def source_files(spectra_dir: Path) -> list[Path]:
    files = []
    for sub in ("lamost", "sdss", "desi", "generic", "other"):
        files += sorted((spectra_dir / sub).glob("*.fits*"))
    return files


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def _header_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) byte spans of each header (ending after the END card's block)."""
    spans = []
    pos = 0
    n = len(data)
    while pos < n and len(spans) < 64:
        end = None
        for block_start in range(pos, n, BLOCK):
            block = data[block_start : block_start + BLOCK]
            for i in range(0, len(block), CARD):
                if block[i : i + 8] == b"END     ":
                    end = block_start + BLOCK
                    break
            if end is not None:
                break
        if end is None:
            break
        spans.append((pos, end))
        header = data[pos:end]
        size = _data_size(header)
        pos = end + ((size + BLOCK - 1) // BLOCK) * BLOCK
    return spans


def _card_value(header: bytes, key: str) -> int | None:
    m = re.search(rb"(?m)" + key.encode().ljust(8) + rb"= *(-?\d+)", header)
    return int(m.group(1)) if m else None


def _data_size(header: bytes) -> int:
    cards = [header[i : i + CARD] for i in range(0, len(header), CARD)]
    text = b"".join(c for c in cards)
    bitpix = _card_value(text, "BITPIX") or 8
    naxis = _card_value(text, "NAXIS") or 0
    if naxis == 0:
        return 0
    size = 1
    for i in range(1, naxis + 1):
        size *= _card_value(text, f"NAXIS{i}") or 0
    pcount = _card_value(text, "PCOUNT") or 0
    gcount = _card_value(text, "GCOUNT") or 1
    return abs(bitpix) // 8 * gcount * (pcount + size)


def _replace_card(data: bytes, key: str, new_value: str, rng: random.Random) -> bytes | None:
    pattern = re.compile(rb"(" + re.escape(key.encode()).ljust(8) + rb")= {1,30}[^/]{0,60}")
    hits = [m for m in re.finditer(rb"[A-Z0-9_ -]{8}= ", data) if m.start() % CARD == 0 and pattern.match(data, m.start())]
    if not hits:
        return None
    m = rng.choice(hits)
    card = (key.ljust(8) + "= " + new_value.rjust(20)).encode("ascii")[:CARD].ljust(CARD)
    return data[: m.start()] + card + data[m.start() + CARD :]


def set_card(data: bytes, key: str, new_value: str, occurrence: int = 0) -> bytes:
    """Replace the ``occurrence``-th card ``key`` (0: the first, i.e. the primary header's) with ``new_value``."""
    hits = [m.start() for m in re.finditer(re.escape(key.encode()).ljust(8) + rb"= ", data) if m.start() % CARD == 0]
    pos = hits[occurrence]
    card = (key.ljust(8) + "= " + new_value.rjust(20)).encode("ascii")[:CARD].ljust(CARD)
    return data[:pos] + card + data[pos + CARD :]


def _flip(data: bytes, lo: int, hi: int, rng: random.Random, n: int) -> bytes:
    buf = bytearray(data)
    if hi <= lo:
        return bytes(buf)
    for _ in range(n):
        i = rng.randrange(lo, hi)
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf)


def _structural(path: Path, kind: str, rng: random.Random) -> bytes | None:
    """Mutations through astropy: NaN/inf, zero-length arrays, wrong column types."""
    from astropy.io import fits

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            hdul = fits.open(io.BytesIO(_raw(path)), memmap=False)
            hdul.verify("silentfix")
            hdus = [h for h in hdul if h.data is not None]
        except Exception:
            return None
        if not hdus:
            return None
        hdu = rng.choice(hdus)
        try:
            if isinstance(hdu, fits.BinTableHDU):
                cols = hdu.columns
                col = rng.choice(cols.names)
                if kind == "nan_inf":
                    arr = np.asarray(hdu.data[col])
                    if arr.dtype.kind == "f":
                        flat = arr.reshape(-1)
                        idx = rng.sample(range(flat.size), k=min(flat.size, max(1, flat.size // 3)))
                        flat[idx] = rng.choice([np.nan, np.inf, -np.inf])
                        hdu.data[col] = arr
                    else:
                        return None
                elif kind == "zero_length":
                    hdul[hdul.index(hdu)] = fits.BinTableHDU.from_columns(cols, nrows=0, header=hdu.header)
                elif kind == "wrong_column_type":
                    new = []
                    for c in cols:
                        if c.name == col:
                            new.append(fits.Column(name=c.name, format="20A", array=np.array(["x"] * len(hdu.data))))
                        else:
                            new.append(c)
                    idx = hdul.index(hdu)
                    hdul[idx] = fits.BinTableHDU.from_columns(new, header=hdu.header)
            else:
                idx = hdul.index(hdu)
                if kind == "nan_inf":
                    arr = np.array(hdu.data, dtype=np.float32 if hdu.data.dtype.kind != "f" else hdu.data.dtype)
                    flat = arr.reshape(-1)
                    k = rng.choice([1, flat.size // 10 + 1, flat.size])
                    flat[rng.sample(range(flat.size), k=min(k, flat.size))] = rng.choice([np.nan, np.inf, -np.inf])
                    hdu.data = arr
                elif kind == "zero_length":
                    hdu.data = np.zeros((0,), dtype=np.float32)
                elif kind == "wrong_column_type":
                    hdu.data = (np.asarray(hdu.data) * 0).astype(np.int16) if hdu.data.size else hdu.data
                hdul[idx] = hdu
            out = io.BytesIO()
            hdul.writeto(out, output_verify="silentfix")
            return out.getvalue()
        except Exception:
            return None


def generate(spectra_dir: Path, count: int, seed: int = 0) -> Iterator[Case]:
    """Yield ``count`` mutated files, cycling through kinds and source files."""
    rng = random.Random(seed)
    files = source_files(spectra_dir)
    raws: dict[Path, bytes] = {}
    produced = 0
    attempt = 0
    while produced < count and attempt < count * 5:
        kind = KINDS[attempt % len(KINDS)]
        path = files[rng.randrange(len(files))]
        attempt += 1
        raw = raws.get(path)
        if raw is None:
            raw = raws[path] = _raw(path)
        spans = _header_spans(raw)
        data: bytes | None = None
        suffix = ".fits"
        if kind == "truncate":
            data = raw[: rng.randrange(0, len(raw))]
        elif kind == "bitflip_header" and spans:
            lo, hi = rng.choice(spans)
            data = _flip(raw, lo, hi, rng, rng.choice([1, 3, 20]))
        elif kind == "bitflip_data":
            lo = spans[0][1] if spans else 0
            data = _flip(raw, lo, len(raw), rng, rng.choice([1, 10, 200]))
        elif kind == "lie_naxis":
            key = rng.choice(["NAXIS", "NAXIS1", "NAXIS2"])
            data = _replace_card(raw, key, str(rng.choice([-1, 0, 1, 7, 2**31 - 1, 99999999])), rng)
        elif kind == "lie_bitpix":
            data = _replace_card(raw, "BITPIX", str(rng.choice([-64, -32, 8, 16, 32, 64, 12, 0])), rng)
        elif kind == "lie_tform":
            key = f"TFORM{rng.randrange(1, 8)}"
            data = _replace_card(raw, key, "'" + rng.choice(["1E", "4000E", "2D", "Q", "1000000J", "ZZ", "A"]) + "'", rng)
        elif kind == "broken_continue" and spans:
            lo, hi = rng.choice(spans)
            pos = lo + CARD * rng.randrange(1, max(2, (hi - lo) // CARD - 1))
            bogus = rng.choice([b"CONTINUE  'unterminated", b"CONTINUE  &'&'&'", b"CONTINUE  = 12", b"CONTINUE"]).ljust(CARD)
            data = raw[:pos] + bogus + raw[pos + CARD :]
        elif kind in ("nan_inf", "zero_length", "wrong_column_type"):
            data = _structural(path, kind, rng)
        elif kind == "gzip_corrupt":
            packed = bytearray(gzip.compress(raw, compresslevel=1, mtime=0))  # mtime=0: same seed, same bytes
            mode = rng.choice(["truncate", "flip", "crc"])
            if mode == "truncate":
                packed = packed[: rng.randrange(10, len(packed))]
            elif mode == "flip":
                for _ in range(rng.choice([1, 5])):
                    i = rng.randrange(10, len(packed))
                    packed[i] ^= 1 << rng.randrange(8)
            else:
                packed[-8] ^= 0xFF
            data, suffix = bytes(packed), ".fits.gz"
        if data is None:
            continue
        produced += 1
        yield Case(name=f"{produced:05d}-{kind}-{path.name}", kind=kind, data=data, suffix=suffix, source=path)


class CaseTimeout(BaseException):
    """Raised by the SIGALRM handler. A BaseException, so that a reader's ``except Exception`` cannot swallow it."""


def check_spectrum(spec) -> str | None:
    """Why a returned spectrum breaks the `Spectrum` contract, or None when it is valid.

    Shapes must agree (wavelength, flux, ivar, mask are 1D of one length), the wavelength must be float64, its
    finite values ascending (non-decreasing), and every good pixel (unmasked, finite flux) must have a finite
    wavelength. The spectrum must name its file (``meta.path``).
    """
    wl, flux = np.asarray(spec.wavelength), np.asarray(spec.flux)
    if wl.ndim != 1 or flux.shape != wl.shape:
        return f"shapes wavelength {wl.shape} flux {flux.shape}"
    if wl.dtype != np.float64:
        return f"wavelength dtype {wl.dtype}"
    for name in ("ivar", "mask"):
        arr = getattr(spec, name)
        if arr is not None and np.asarray(arr).shape != wl.shape:
            return f"{name} shape {np.asarray(arr).shape} != {wl.shape}"
    finite = wl[np.isfinite(wl)]
    if finite.size > 1 and np.any(np.diff(finite) < 0):
        return "wavelength not ascending"
    good = spec.good
    if good.shape != wl.shape or not np.all(np.isfinite(wl[good])):
        return "good pixels without a finite wavelength"
    if not spec.meta.path:
        return "meta.path is empty"
    return None


def run_case(case: Case, folder: Path, read, expected_error, timeout_s: float = 2.0, hard_factor: float = 5.0,
             keep_spectra: bool = False) -> dict:
    """Read one case with ``read(path)``; classify the result. Never raises (except KeyboardInterrupt).

    Outcomes: ``ok`` (valid spectra), ``error`` (``expected_error``), ``invalid_spectrum`` (a spectrum breaking
    the contract, see `check_spectrum`), ``crash`` (any other exception), ``slow`` (ok or error after more than
    ``timeout_s``) and ``hang`` (interrupted by SIGALRM after ``timeout_s * hard_factor``). ``error`` results
    record the exception class (``error_type``) and whether the message names the file (``named_file``);
    ``ok`` results hold the spectra (``spectra``) when ``keep_spectra`` is true.
    """
    path = folder / (case.name.replace("/", "_") + case.suffix)
    path.write_bytes(case.data)

    def _alarm(signum, frame):
        raise CaseTimeout()

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s * hard_factor)
    t0 = time.perf_counter()
    result: dict = {"case": case.name, "kind": case.kind}
    try:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                spectra = read(path)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        result["outcome"] = "ok"
        result["n_spectra"] = len(spectra)
        if keep_spectra:
            result["spectra"] = spectra
        for spec in spectra:
            why = check_spectrum(spec)
            if why:
                result["outcome"] = "invalid_spectrum"
                result["error"] = why
                break
    except CaseTimeout:
        result["outcome"] = "hang"
    except expected_error as exc:
        result["outcome"] = "error"
        result["error_type"] = type(exc).__name__
        result["error"] = str(exc)[:200]
        result["reason"] = getattr(exc, "reason", str(exc))[:200]
        result["named_file"] = str(path) in str(exc) or path.name in str(exc)
    except Exception as exc:  # noqa: BLE001 - that is what we are measuring
        result["outcome"] = "crash"
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        result["seconds"] = time.perf_counter() - t0
        path.unlink(missing_ok=True)
    if result["outcome"] in ("ok", "error") and result["seconds"] > timeout_s:
        result["outcome"] = "slow"
    return result

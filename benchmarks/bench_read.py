"""Read benchmark: speco3 readers vs bare astropy.io.fits access of the same arrays vs specutils.

Median milliseconds per file for each format, measured in one process with the implementations interleaved
(so that caches, CPU frequency and other load affect all alike); min_ms (best of the repetitions) is
printed beside the median because a shared machine's load makes medians noisy. The bare-astropy floor opens the file and touches the
arrays a reader needs (flux, ivar or error, wavelength or its log, mask) plus the class/z cards or columns;
it builds no Spectrum and does no unit or grid work. Goal: ours ≤ 1.15 × floor.

Run: ``.venv/bin/python benchmarks/bench_read.py [--reps 15] [--data PATH]``; prints JSON. ``--quick``: 1 rep.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path
import numpy as np
from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra import read_spectra
from speco3.spectra import source as source_mod
from speco3_testkit.testdata import DATA

REPO = Path(__file__).resolve().parents[1]
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("formats", "memmap_ours_median_ms", "worst_ratio_ours_vs_astropy", "goal_met")


def bare_lamost_new(p):
    with fits.open(p, memmap=False) as h:
        hdr = h[0].header
        _ = (hdr["CLASS"], hdr["Z"], hdr["OBSID"])
        d = h[1].data
        return [np.array(d[c][0]) for c in ("FLUX", "IVAR", "WAVELENGTH", "ANDMASK")]


def bare_lamost_old(p):
    with fits.open(p, memmap=False) as h:
        hdr = h[0].header
        _ = (hdr["CLASS"], hdr["Z"], hdr["OBSID"])
        return np.array(h[0].data)


def bare_sdss(p):
    with fits.open(p, memmap=False) as h:
        d = h[1].data
        out = [np.array(d[c]) for c in ("flux", "ivar", "loglam", "and_mask")]
        s = h[2].data
        _ = (s["CLASS"][0], s["Z"][0], s["PLUG_RA"][0])
        return out


def bare_desi(p):
    with fits.open(p, memmap=False) as h:
        out = [np.array(h["FIBERMAP"].data["TARGETID"])]
        for a in "BRZ":
            out += [np.array(h[f"{a}_{k}"].data) for k in ("WAVELENGTH", "FLUX", "IVAR", "MASK")]
        return out


def bare_mrs(p):
    with fits.open(p, memmap=False) as h:
        out = []
        for hdu in h[1:]:
            d = hdu.data
            out += [np.array(d[c]) for c in ("FLUX", "IVAR", "LOGLAM")]
        return out


def bare_image(p):
    """Flux image and its error companion (UM184_nF + UM184_nE), as our reader reads both."""
    out = []
    for f in (p, p.with_name(p.name.replace("_nF", "_nE"))):
        with fits.open(f, memmap=False) as h:
            hdr = h[0].header
            _ = (hdr["CRVAL1"], hdr.get("CDELT1"), hdr.get("CRPIX1"))
            out.append(np.array(h[0].data))
    return out


CASES = {
    "lamost-lrs": ("lamost", "spec-55859-*_sp01-00[0-9].fits.gz", bare_lamost_new, None),
    "lamost-lrs-old": ("lamost", "spec-*-0[0-9][0-9]*dr7.fits.gz", bare_lamost_old, None),
    "lamost-mrs": ("lamost", "med-*.fits*", bare_mrs, None),
    "sdss-spec": ("sdss", "spec-*.fits", bare_sdss, "SDSS-III/IV spec"),
    "desi": ("desi", "coadd-*.fits", bare_desi, "DESI coadd"),
    "generic-image": ("generic", "UM184_nF.fits", bare_image, None),
}


def specutils_reader(fmt: str):
    try:
        from specutils import SpectrumList
    except ImportError:  # pragma: no cover - optional
        return None
    return lambda p: SpectrumList.read(str(p), format=fmt)


def time_once(fn, path) -> float:
    t = time.perf_counter()
    fn(path)
    return (time.perf_counter() - t) * 1000.0


def run(shared: Path, reps: int) -> dict:
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    results: dict[str, dict] = {}
    for name, (folder, pattern, bare, su_fmt) in CASES.items():
        files = sorted((shared / "spectra" / folder).glob(pattern))
        if not files:
            continue
        impls = {"ours": read_spectra, "astropy_bare": bare}
        if su_fmt:
            su = specutils_reader(su_fmt)
            if su is not None:
                impls["specutils"] = su
        for fn in impls.values():  # warm-up (imports, redrock cache)
            for f in files:
                fn(f)
        times: dict[str, list[float]] = {k: [] for k in impls}
        for _ in range(reps):
            for f in files:
                for k, fn in impls.items():
                    times[k].append(time_once(fn, f))
        med = {k: round(statistics.median(v), 3) for k, v in times.items()}
        best = {k: round(min(v), 3) for k, v in times.items()}
        entry = {"files": len(files), "median_ms": med, "min_ms": best,
                 "ratio_ours_vs_astropy": round(med["ours"] / med["astropy_bare"], 3),
                 "ratio_ours_vs_astropy_min": round(best["ours"] / best["astropy_bare"], 3)}
        if "specutils" in med:
            entry["ratio_specutils_vs_ours"] = round(med["specutils"] / med["ours"], 3)
        results[name] = entry
    return results


def memmap_comparison(shared: Path, reps: int) -> dict:
    """Median ms of our reader with fits.open(memmap=False) and memmap=True (the choice in source.MEMMAP)."""
    files = sorted((shared / "spectra" / "sdss").glob("spec-*.fits")) + sorted(
        (shared / "spectra" / "desi").glob("coadd-*.fits"))
    out = {}
    saved = source_mod.MEMMAP
    try:
        for flag in (False, True):
            source_mod.MEMMAP = flag
            ts, failures = [], set()
            for _ in range(reps):
                for f in files:
                    try:
                        ts.append(time_once(read_spectra, f))
                    except SpectrumReadError as exc:
                        failures.add(f"{f.name}: {exc.reason[:90]}")
            out[f"memmap={flag}"] = {"median_ms": round(statistics.median(ts), 3) if ts else None,
                                     "failures": sorted(failures)}
    finally:
        source_mod.MEMMAP = saved
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--data", default=str(DATA), help="folder holding spectra/ (tests/data)")
    ap.add_argument("--quick", action="store_true", help="1 repetition per file (after the warm-up)")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps = 1
    shared = Path(args.data)
    if not (shared / "spectra").is_dir():
        print(json.dumps({"error": f"spectra not found under {shared}"}))
        return 1
    t0 = time.perf_counter()
    formats = run(shared, args.reps)
    worst = max(v["ratio_ours_vs_astropy"] for v in formats.values())
    report = {
        "benchmark": "read",
        "reps": args.reps,
        "formats": formats,
        "memmap_ours_median_ms": memmap_comparison(shared, 1 if args.quick else max(3, args.reps // 3)),
        "worst_ratio_ours_vs_astropy": worst,
        "goal_ratio": 1.15,
        "goal_met": worst <= 1.15,
        "seconds": round(time.perf_counter() - t0, 1),
        "python": sys.version.split()[0],
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Index benchmark: scan a generated 10,000-file LAMOST-like archive, then rescan it unchanged.

The archive (in a temporary folder, removed afterwards) holds gzip-compressed LAMOST LRS files in the new layout
(one-row COADD table, 3909 pixels), written as copies of 100 generated variants (different OBSIDs, classes,
redshifts, S/N and noise) spread over 100 sub-folders. Goals: full index ≤ 60 s for 10k files on 2 workers,
unchanged rescan ≤ 2 s. A one-file reference read in the same process gives the per-file cost for comparison.

Run: ``.venv/bin/python benchmarks/bench_index.py [--files 10000] [--workers 2]``; prints JSON. ``--quick``: 200
files of 20 variants and a 2,000-row paging index (the ``paging_100k`` figures then cover 2,000 rows).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from astropy.io import fits

from speco3.spectra import ArchiveIndex, read_spectra

CLASSES = [("STAR", "G5", 0.0), ("STAR", "K3", 0.0), ("STAR", "M2", 0.0), ("GALAXY", "", 0.08), ("QSO", "", 1.3)]
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("files", "full_scan_s", "files_per_s", "unchanged_rescan_s", "paging_100k",
             "reference_single_read_ms", "goal_met")


def lamost_like(i: int, rng: np.random.Generator) -> bytes:
    """Gzipped bytes of a LAMOST LRS (new layout) file for variant ``i``."""
    n = 3909
    c0, c1 = 3.5682, 1e-4
    wave = (10 ** (c0 + c1 * np.arange(n))).astype(np.float32)
    cls, sub, z = CLASSES[i % len(CLASSES)]
    snr = float(rng.uniform(2, 120))
    cont = 1000 * np.exp(-(((wave - 6000.0) / 3000.0) ** 2))
    flux = (cont + rng.normal(0, 1000 / snr, n)).astype(np.float32)
    ivar = np.full(n, (snr / 1000) ** 2, dtype=np.float32)
    ivar[rng.integers(0, n, 20)] = 0
    hdr = fits.Header()
    for k, v in {"TELESCOP": "LAMOST", "DATA_V": "LAMOST DR9", "OBSID": 900000 + i, "RA": float(rng.uniform(0, 360)),
                 "DEC": float(rng.uniform(-10, 60)), "CLASS": cls, "SUBCLASS": sub, "Z": z + float(rng.normal(0, 1e-4)),
                 "SNRG": snr, "VACUUM": True, "COEFF0": c0, "COEFF1": c1, "CTYPE1": "LINEAR", "CRVAL1": c0,
                 "CD1_1": c1, "DC-FLAG": 1, "WFITTYPE": "LOG-LINEAR", "NORM": 0}.items():
        hdr[k] = v
    cols = [fits.Column(name, f"{n}E", array=arr[None, :]) for name, arr in (
        ("FLUX", flux), ("IVAR", ivar), ("WAVELENGTH", wave), ("ANDMASK", np.zeros(n, np.float32)),
        ("ORMASK", np.zeros(n, np.float32)), ("NORMALIZATION", np.full(n, -9999, np.float32)))]
    buf = io.BytesIO()
    fits.HDUList([fits.PrimaryHDU(header=hdr), fits.BinTableHDU.from_columns(cols, name="COADD")]).writeto(buf)
    return gzip.compress(buf.getvalue(), compresslevel=6)


def make_archive(root: Path, n_files: int, n_variants: int = 100) -> float:
    rng = np.random.default_rng(7)
    variants = [lamost_like(i, rng) for i in range(n_variants)]
    t = time.perf_counter()
    for k in range(n_files):
        folder = root / f"plan{k % 100:03d}"
        if k < 100:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"spec-60000-PLAN{k % 100:03d}_sp{k // 1000 + 1:02d}-{k % 1000:03d}.fits.gz").write_bytes(
            variants[k % n_variants])
    return time.perf_counter() - t


def paging_100k(db: Path, n_rows: int = 100_000) -> dict:
    """Time the GUI's access pattern on an index of ``n_rows`` synthetic entries: count, filtered count, and
    pages of 100 rows deep in the table for several sort orders (the index is filled through its own writer)."""
    from speco3.spectra.index import ScanSummary

    rng = np.random.default_rng(3)
    index = ArchiveIndex(db)
    found, batch = {}, []
    summary = ScanSummary(root="synthetic")
    for i in range(n_rows):
        rel = f"plan{i % 300:03d}/spec-{i:07d}.fits.gz"
        found[rel] = (50_000, 1_700_000_000_000_000_000 + i)
        cls, sub, z = CLASSES[i % len(CLASSES)]
        batch.append({"rel": rel, "format": "lamost-lrs", "skipped": [], "depends": [], "error": None,
                      "error_kind": None, "rows": [{
                          "idx": 0, "format": "lamost-lrs", "survey": "LAMOST", "data_release": "LAMOST DR9",
                          "object_id": str(900000 + i), "ra": float(rng.uniform(0, 360)), "dec": 10.0,
                          "redshift": z + float(rng.normal(0, 1e-3)), "redshift_source": "LAMOST 1D pipeline",
                          "cls": cls, "subclass": sub, "snr": float(rng.uniform(1, 200)), "hdu": "COADD",
                          "row": 0, "note": None, "n_pixels": 3909, "wmin": 3700.0, "wmax": 9099.0,
                          "masked_fraction": 0.01, "flux_unit": "", "medium": "vacuum"}]})
        if len(batch) == 5000:
            index._write(batch, found, summary)
            batch = []
    if batch:
        index._write(batch, found, summary)
    timings = {}

    def timed(label, fn):
        t = time.perf_counter()
        fn()
        timings[label] = round((time.perf_counter() - t) * 1000, 2)

    timed("count_all_ms", index.count)
    timed("count_cls_snr_ms", lambda: index.count(cls="STAR", snr_min=50))
    timed("count_text_ms", lambda: index.count(text="9512"))
    for sort in ("file_name", "redshift", "snr"):
        timed(f"page_offset_90000_by_{sort}_ms", lambda s=sort: index.query(sort=s, limit=100, offset=90_000))
    timed("page_filtered_by_snr_desc_ms", lambda: index.query(cls="QSO", sort="snr", descending=True, limit=100,
                                                              offset=10_000))
    index.close()
    return {"rows": n_rows, **timings}


def _cpu_seconds() -> float:
    """User+system CPU time of this process and its reaped children (the scan's worker processes).

    On a shared machine the wall time depends on other users' load; CPU seconds divided by the number of
    workers estimates the wall time on an otherwise idle machine with that many cores.
    """
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", help="build the archive in this folder and keep it")
    ap.add_argument("--quick", action="store_true", help="200 files, a 2,000-row paging index")
    args = ap.parse_args(argv)
    if args.quick:
        args.files = 200
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="speco3-bench-index-"))
    try:
        root = tmp / "archive"
        write_s = make_archive(root, args.files, n_variants=20 if args.quick else 100)
        size = sum(f.stat().st_size for f in root.rglob("*.gz"))
        one = next(root.rglob("*.gz"))
        read_spectra(one)
        t = time.perf_counter()
        for _ in range(20):
            read_spectra(one)
        per_file_ms = (time.perf_counter() - t) / 20 * 1000
        index = ArchiveIndex(tmp / "index.sqlite")
        cpu0 = _cpu_seconds()
        t = time.perf_counter()
        first = index.scan(root, workers=args.workers)
        full_s = time.perf_counter() - t
        cpu_s = _cpu_seconds() - cpu0
        t = time.perf_counter()
        again = index.scan(root, workers=args.workers)
        rescan_s = time.perf_counter() - t
        touched = sorted(root.rglob("*.gz"))[:10]
        for f in touched:
            st = f.stat()
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        t = time.perf_counter()
        partial = index.scan(root, workers=args.workers)
        partial_s = time.perf_counter() - t
        t = time.perf_counter()
        n_total = index.count()
        page = index.query(sort="snr", descending=True, limit=100, offset=n_total // 2)
        filtered = index.count(cls="STAR", snr_min=50)
        query_ms = (time.perf_counter() - t) * 1000
        index.close()
        paging = paging_100k(tmp / "paging.sqlite", 2_000 if args.quick else 100_000)
        report = {
            "benchmark": "index",
            "files": args.files,
            "archive_mb": round(size / 1e6, 1),
            "write_archive_s": round(write_s, 2),
            "workers": args.workers,
            "full_scan_s": round(full_s, 2),
            "files_per_s": round(first.files_read / full_s, 1),
            "full_scan_cpu_s": round(cpu_s, 2),
            "full_scan_unloaded_estimate_s": round(cpu_s / args.workers, 2),
            "spectra_indexed": first.spectra_written,
            "errors": first.errors,
            "unchanged_rescan_s": round(rescan_s, 3),
            "unchanged_rescan_files_read": again.files_read,
            "touched_10_rescan_s": round(partial_s, 3),
            "touched_10_files_read": partial.files_read,
            "query_count_page_filter_ms": round(query_ms, 2),
            "page_rows": len(page),
            "filtered_count": filtered,
            "paging_100k": paging,
            "reference_single_read_ms": round(per_file_ms, 3),
            "reference_serial_estimate_s": round(per_file_ms * args.files / 1000, 2),
            "goal_full_scan_s": 60, "goal_rescan_s": 2,
            "goal_met": full_s <= 60 and rescan_s <= 2,
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        }
        print(json.dumps(report, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Desktop-app figures: spectrum switch with and without prefetch, a 100,000-row archive table, viewer redraw.

Run: ``.venv/bin/python benchmarks/bench_gui.py [--quick]`` (offscreen Qt, temporary folders). Prints JSON.
``--quick``: 4 switches each way and a 2,000-row table.

* ``switch_ms``: next/previous in the main window on the demo archive (LAMOST, 3909 px, gzip) — median and p90
  with the prefetch cache warm (the design target is ≤ 50 ms) against the reference of the same switch reading
  the file synchronously (cache cleared before each switch).
* ``table``: a real `ArchiveIndex` with 100,000 rows (rows inserted in bulk into its SQLite file): time to open
  the table model (count + first page), to fetch one more page, to filter, to sort, against the reference of
  materialising every row at once.
* ``viewer_ms``: `SpectrumViewer.set_spectrum` for one demo spectrum.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REQUIRES = ("PySide6",)
#: Headline keys of the printed JSON (the README's benchmark table lists them).
JSON_KEYS = ("switch_ms", "table", "viewer_ms")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
TMP = Path(tempfile.mkdtemp(prefix="speco3-bench-gui-"))
for _name in ("DATA", "CONFIG", "CACHE"):
    os.environ[f"SPECO3_{_name}_DIR"] = str(TMP / _name.lower())


def _pump(app, seconds: float = 0.0) -> None:
    end = time.perf_counter() + seconds
    while True:
        app.processEvents()
        if time.perf_counter() >= end:
            return
        time.sleep(0.005)


def bench_switch(app, n: int = 18) -> dict:
    from speco3.gui.main_window import MainWindow
    from speco3.gui.settings import AppSettings

    app.setProperty("speco3_no_dialogs", True)
    w = MainWindow(settings=AppSettings(vetter="bench"))
    w.show()
    w.open_demo()
    t0 = time.perf_counter()
    while w.vetting.spectrum is None and time.perf_counter() - t0 < 60:
        _pump(app, 0.02)
    warm, cold = [], []
    for _ in range(n):
        w.vetting.cache.wait_idle()
        t = time.perf_counter()
        w.vetting.step(1)
        app.processEvents()
        warm.append((time.perf_counter() - t) * 1000)
    for _ in range(n):
        w.vetting.cache.wait_idle()
        w.vetting.cache.clear()
        t = time.perf_counter()
        w.vetting.step(-1)
        app.processEvents()
        cold.append((time.perf_counter() - t) * 1000)
    w.close()
    med_w, med_c = statistics.median(warm), statistics.median(cold)
    return {"prefetched_median_ms": round(med_w, 1), "prefetched_p90_ms": round(sorted(warm)[int(0.9 * len(warm))], 1),
            "reference_sync_read_median_ms": round(med_c, 1), "ratio_reference_over_prefetched": round(med_c / med_w, 2),
            "switches": len(warm)}


def bench_table(app, n_rows: int = 100_000) -> dict:
    from speco3.gui.archive_model import ArchiveTableModel, Filters
    from speco3.spectra.index import COLUMNS, ArchiveIndex

    root = TMP / "big"
    root.mkdir()
    index = ArchiveIndex.for_root(root)
    rows = []
    for i in range(n_rows):
        rel = f"sub{i // 1000:03d}/spec-{i:06d}.fits.gz"
        values = {"key": f"{rel}#0", "rel": rel, "idx": 0, "format": "lamost-lrs", "survey": "LAMOST",
                  "object_id": str(700000000 + i), "redshift": (i % 5000) * 1e-4, "cls": ("STAR", "GALAXY", "QSO")[i % 3],
                  "subclass": "G2", "snr": float(i % 200) / 2, "file_name": f"spec-{i:06d}.fits.gz", "n_pixels": 3909,
                  "has_error": 0}
        rows.append(tuple(values.get(c) for c in COLUMNS))
    with index._lock:  # bulk insert for the benchmark only (scanning 100,000 files is not what is measured)
        index._db.executemany(f"INSERT INTO spectra ({','.join(COLUMNS)}) VALUES ({','.join('?' * len(COLUMNS))})",
                              rows)
        index._db.commit()
    model = ArchiveTableModel()
    t = time.perf_counter()
    model.set_index(index)
    open_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    model.fetchMore()
    page_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    model.set_filters(Filters(cls="QSO", snr_min=50))
    filter_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    model.set_filters(Filters())
    model.sort(4)
    sort_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    everything = index.query()
    all_ms = (time.perf_counter() - t) * 1000
    index.close()
    return {"rows": len(everything), "open_ms": round(open_ms, 1), "next_page_ms": round(page_ms, 1),
            "filter_ms": round(filter_ms, 1), "sort_by_z_ms": round(sort_ms, 1),
            "reference_materialise_all_ms": round(all_ms, 1), "ratio_reference_over_open": round(all_ms / open_ms, 1)}


def bench_viewer(app) -> dict:
    from speco3.demo import write_demo_archive
    from speco3.gui.viewer import SpectrumViewer
    from speco3.spectra import read_spectrum

    paths = write_demo_archive(TMP / "demo-viewer")
    spectra = [read_spectrum(p) for p in paths]
    v = SpectrumViewer()
    v.resize(1000, 500)
    v.show()
    times = []
    for s in spectra:
        t = time.perf_counter()
        v.set_spectrum(s)
        app.processEvents()
        times.append((time.perf_counter() - t) * 1000)
    v.close()
    return {"set_spectrum_median_ms": round(statistics.median(times), 1), "n": len(times)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 switches each way, a 2,000-row table")
    args = ap.parse_args(argv)
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    try:
        out = {"switch_ms": bench_switch(app, 4 if args.quick else 18),
               "table": bench_table(app, 2_000 if args.quick else 100_000), "viewer_ms": bench_viewer(app),
               "machine": {"cpus": os.cpu_count(), "platform": sys.platform}}
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

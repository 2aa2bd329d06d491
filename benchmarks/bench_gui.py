"""Desktop-app figures: spectrum switch (4,000 and 20,000 pixels), a 100,000-row archive table, viewer redraw.

Run: ``.venv/bin/python benchmarks/bench_gui.py [--quick]`` (offscreen Qt, temporary folders). Prints JSON.
``--quick``: 4 switches each way and a 2,000-row table.

* ``switch_ms`` (4k) and ``switch_20k_ms``: next/previous in the main window (1400 × 900) — median and p90 with
  the prefetch cache warm (the goals: ≤ 16 ms for 4,000 pixels, ≤ 40 ms for 20,000) against the reference of the
  same switch reading the file synchronously (cache cleared before each switch). A **switch** is timed from the
  ``step(±1)`` call (what the key press calls) until the plot's new frame is painted: ``step`` and one
  ``processEvents`` (queued signals, layout and the window's paint); when the event loop has not painted the plot
  by then, ``viewport().repaint()`` paints it inside the timing. ``plot_paints_per_switch`` counts the paint events
  of the plot's viewport (a frame drawn twice shows as 2); ``prefetched_gui_thread_cpu_median_ms`` is the GUI
  thread's CPU time for the same switches (on a loaded machine the wall clock also counts waiting for a core). The 4k spectra are the demo archive (LAMOST LRS, 3909
  px, gzip); the 20k ones are copies of a real Keck ESI spectrum (PHL 957, 21,059 px) and of its error spectrum
  (``tests/data/spectra/generic``), alternating in the queue.
* ``table``: a real `ArchiveIndex` with 100,000 rows (rows inserted in bulk into its SQLite file): time to open
  the table model (count + first page), to fetch one more page, to filter, to sort, against the reference of
  materialising every row at once.
* ``viewer_ms``: `SpectrumViewer.set_spectrum` for one demo spectrum, without the paint.
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

import _kit  # noqa: F401 - puts the test kit on sys.path

from speco3_testkit.qtprobe import PaintCounter

REQUIRES = ("PySide6",)
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("switch_ms", "switch_20k_ms", "table", "viewer_ms")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
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


def _highres_archive() -> Path:
    """Copies of a real 21,059-pixel spectrum and its error spectrum (Keck ESI, PHL 957): the index lists both files
    of each pair, so the queue alternates flux and error spectra, and every switch changes the y-range as between
    different spectra (the flux file reads its errors from the other; the error file reads as a spectrum)."""
    src = ROOT / "tests" / "data" / "spectra" / "generic"
    folder = TMP / "highres"
    for i in range(10):  # 20 spectra, as the demo archive: room for 18 steps each way
        sub = folder / f"copy{i}"
        sub.mkdir(parents=True)
        for name in ("PH957_f.fits", "PH957_e.fits"):
            shutil.copyfile(src / name, sub / name)
    return folder


def _switch(app, w, delta: int, painted: PaintCounter) -> tuple[float, float, int]:
    """One switch: from ``step(delta)`` until the plot's new frame is painted.

    Returns wall-clock ms, the GUI thread's CPU ms (what the switch itself costs, less sensitive to other load on
    the machine) and the number of paint events of the plot's viewport.
    """
    before, row = painted.n, w.vetting.row
    t, c = time.perf_counter(), time.thread_time()
    w.vetting.step(delta)
    if w.vetting.row != row + delta:
        raise RuntimeError(f"step({delta}) from row {row} did not switch (queue too short?)")
    app.processEvents()  # queued signals, layout, then the window's update request: the paint
    if painted.n == before:  # the event loop has not painted the plot yet: paint it now, inside the timing
        w.viewer.plot.viewport().repaint()
    return (time.perf_counter() - t) * 1000, (time.thread_time() - c) * 1000, painted.n - before


def bench_switch(app, n: int = 18, folder: Path | None = None) -> dict:
    from speco3.gui.main_window import MainWindow
    from speco3.gui.settings import AppSettings

    app.setProperty("speco3_no_dialogs", True)
    w = MainWindow(settings=AppSettings(vetter="bench"))
    w.resize(1400, 900)
    w.show()
    w.open_demo() if folder is None else w.open_archive(folder)
    t0 = time.perf_counter()
    while w.vetting.spectrum is None and time.perf_counter() - t0 < 60:
        _pump(app, 0.02)
    _pump(app, 0.2)
    painted = PaintCounter(w.viewer.plot.viewport())
    pixels = w.vetting.spectrum.n_pixels
    warm, cpu, cold, paints = [], [], [], []
    for i in range(2 * n):  # forward, then back: every switch is to a spectrum not shown the moment before
        w.vetting.cache.wait_idle()
        ms, cpu_ms, k = _switch(app, w, 1 if i < n else -1, painted)
        warm.append(ms)
        cpu.append(cpu_ms)
        paints.append(k)
    for _ in range(n):
        w.vetting.cache.wait_idle()
        w.vetting.cache.clear()
        cold.append(_switch(app, w, 1, painted)[0])
    plot = w.viewer.plot.viewport().size()
    w.close()
    med_w, med_c = statistics.median(warm), statistics.median(cold)
    return {"pixels": pixels, "plot_px": [plot.width(), plot.height()],
            "prefetched_median_ms": round(med_w, 1), "prefetched_p90_ms": round(_p90(warm), 1),
            "prefetched_gui_thread_cpu_median_ms": round(statistics.median(cpu), 1),
            "reference_sync_read_median_ms": round(med_c, 1), "ratio_reference_over_prefetched": round(med_c / med_w, 2),
            "plot_paints_per_switch": statistics.median(paints), "switches": len(warm)}


def _p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * len(values))]


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
        n = 4 if args.quick else 18
        out = {"switch_ms": bench_switch(app, n),
               "switch_20k_ms": bench_switch(app, n, _highres_archive()),
               "table": bench_table(app, 2_000 if args.quick else 100_000), "viewer_ms": bench_viewer(app),
               "machine": {"cpus": os.cpu_count(), "platform": sys.platform}}
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Evaluation-loop overhead: items per minute with the scripted engine against a tiny-model run on the same items.

Run: ``.venv/bin/python benchmarks/bench_evaluate.py [N_ITEMS]`` (needs the shared spectra, llama-cpp-python and the
converter's tiny model; ``SPECO3_TINY_GGUF=text.gguf,mmproj.gguf`` reuses a built pair). Prints JSON. Both runs go
through `speco3.evaluate.run.evaluate_items` with the real renderer and a fresh run store; the scripted run is
everything but the model (parquet rows → Spectrum, full view and zoom renders, image preparation, store writes,
render similarity), and its time must stay below 5 % of the tiny-model run's.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "evaluate")]

SPECTRA = ["lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz", "lamost/spec-55859-F5902_sp01-001.fits.gz",
           "sdss/spec-0266-51602-0107.fits", "lamost/spec-58397-EG014118N254444M01_sp03-031.fits"]
LIMIT_SHARE = 0.05


def _run(items, engine, render, store_path):
    from speco3.evaluate.run import evaluate_items
    from speco3.vetting import VettingStore

    with VettingStore(store_path) as store:
        t0 = time.perf_counter()
        res = evaluate_items(items, store, engine, render)
        return time.perf_counter() - t0, res


def main() -> int:
    from benchkit import rows_from_spectra, write_bench
    from scripts import scripted_engine

    from speco3.engine.base import EngineSettings
    from speco3.engine.llama import LlamaMtmdEngine
    from speco3.evaluate.bench import BenchFile
    from speco3.evaluate.run import bench_items
    from speco3.render import render_view
    from speco3.spectra import read_spectrum

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    shared = Path(os.environ.get("SPECO3_SHARED", REPO.parent / "shared"))
    spectra = [read_spectrum(shared / "spectra" / rel) for rel in SPECTRA]
    labels = [(("cv", "wd", "carbon")[i % 3], "YES" if i % 2 else "NO") for i in range(n)]

    def render(view):
        return render_view(view).png

    from speco3.spectra.view import View

    render(View(spectra[0], None))  # Qt and font set-up once per process, outside both timings
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        items = bench_items(BenchFile(write_bench(tmp / "b.parquet", rows_from_spectra(spectra, labels))).items())
        scripted_s, scripted = _run(items, scripted_engine(), render, tmp / "scripted.sqlite")
        override = os.environ.get("SPECO3_TINY_GGUF")
        if override:
            text, mmproj = override.split(",")
        else:
            from speco3_converters.testing import tiny_gguf_pair

            text, mmproj = tiny_gguf_pair(tmp / "tiny", quant="Q8_0")
        settings = EngineSettings(n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False)  # defaults otherwise
        engine = LlamaMtmdEngine(text, mmproj, settings, warmup=False)
        engine.load()
        try:
            tiny_s, tiny = _run(items, engine, render, tmp / "tiny.sqlite")
        finally:
            engine.close()
    share = scripted_s / tiny_s
    print(json.dumps({
        "items": n,
        "scripted": {"seconds": round(scripted_s, 2), "items_per_min": round(60 * n / scripted_s, 1),
                     "outcomes": scripted.outcomes},
        "tiny_model": {"seconds": round(tiny_s, 2), "items_per_min": round(60 * n / tiny_s, 2),
                       "outcomes": tiny.outcomes, "settings": "n_ctx 16384, 2048 tokens/turn, 8 turns, CPU 2 threads"},
        "overhead_share": round(share, 4), "limit": LIMIT_SHARE, "ok": share < LIMIT_SHARE,
    }, indent=1))
    return 0 if share < LIMIT_SHARE else 1


if __name__ == "__main__":
    sys.exit(main())

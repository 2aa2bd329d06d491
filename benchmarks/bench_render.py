"""Render benchmark: pyqtgraph renderer vs the matplotlib training renderer, same process, same views.

Usage::

    .venv/bin/python benchmarks/bench_render.py [--repeat N] [--file FITS] [--quick]

Renders zoom windows (and the full view) of a 3909-pixel LAMOST spectrum — the real shared file when present,
a synthetic spectrum of the same grid otherwise — with :func:`speco3.render.render_view` and with the
matplotlib reference (``benchmarks/mpl_reference.py``), and prints JSON with median milliseconds per render,
the speed-up, and whether both give images of the same size and token grid. Goal: ≥ 8× faster, ≤ 20 ms per zoom.
``--quick``: two zoom windows, one timed render each.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import _kit  # noqa: E402, F401 - puts the test kit on sys.path
import mpl_reference  # noqa: E402
from PIL import Image  # noqa: E402

from speco3.render import init_qt, render_view  # noqa: E402
from speco3.render.geometry import token_grid  # noqa: E402
from speco3.spectra.model import Spectrum, SpectrumMeta  # noqa: E402
from speco3.spectra.view import View  # noqa: E402
from speco3_testkit.testdata import SPECTRA  # noqa: E402

log = logging.getLogger("bench_render")

DEFAULT_FILE = SPECTRA / "lamost" / "spec-60591-LN042429N340750BM01_sp01-001.fits.gz"
REQUIRES = ("PySide6", "matplotlib")
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("ours_median_ms_per_zoom", "mpl_median_ms_per_zoom", "speedup", "all_same_token_grid", "views")
ZOOMS = [(6500, 6600), (4800, 4920), (6540, 6580), (4000, 4600), (5000, 6600), (8400, 8700), (3900, 4000), (5150, 5200)]


def load_spectrum(path: Path) -> tuple[Spectrum, str]:
    """The benchmark spectrum and a description of where it came from."""
    if path.is_file():
        from speco3.spectra import read_spectrum

        return read_spectrum(str(path)), f"file {path.name}"
    rng = np.random.default_rng(0)
    wave = 10 ** (3.5682 + 1e-4 * np.arange(3909))
    flux = 400 + 100 * np.sin(wave / 700.0) + rng.normal(0, 8, wave.size)
    return Spectrum(wave, flux, meta=SpectrumMeta(file_name="synthetic.fits", redshift=0.0)), "synthetic 3909 px"


def time_calls(fn, repeat: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="timed renders per view and renderer (default 7)")
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE, help="LAMOST file (default: the shared 3909-px file)")
    ap.add_argument("--quick", action="store_true", help="two zoom windows, one timed render each")
    args = ap.parse_args(argv)
    zooms = ZOOMS[:2] if args.quick else ZOOMS
    if args.quick:
        args.repeat = 1
    init_qt()
    spectrum, source = load_spectrum(args.file)

    ours_ms: list[float] = []
    mpl_ms: list[float] = []
    views = []
    for rng in [None, *zooms]:
        view = View(spectrum, wavelength_range=rng)
        a = time_calls(lambda v=view: render_view(v), args.repeat)
        b = time_calls(lambda v=view: mpl_reference.render_view_mpl(v), args.repeat)
        ours = render_view(view)
        with Image.open(io.BytesIO(mpl_reference.render_view_mpl(view))) as im:
            mpl_size = im.size
        if rng is not None:
            ours_ms.extend(a)
            mpl_ms.extend(b)
        views.append(
            {
                "range": list(rng) if rng else "full",
                "points": ours.n_points,
                "ours_ms": round(statistics.median(a), 2),
                "mpl_ms": round(statistics.median(b), 2),
                "ours_px": [ours.width, ours.height],
                "mpl_px": list(mpl_size),
                "same_token_grid": token_grid(ours.width, ours.height) == token_grid(*mpl_size),
            }
        )
    ours_med = statistics.median(ours_ms)
    mpl_med = statistics.median(mpl_ms)
    result = {
        "benchmark": "render zoom windows: pyqtgraph (speco3.render) vs matplotlib training renderer",
        "spectrum": source,
        "pixels": spectrum.n_pixels,
        "repeat": args.repeat,
        "zoom_windows": len(zooms),
        "ours_median_ms_per_zoom": round(ours_med, 2),
        "mpl_median_ms_per_zoom": round(mpl_med, 2),
        "speedup": round(mpl_med / ours_med, 2),
        "goal_speedup_8x": mpl_med / ours_med >= 8.0,
        "goal_under_20ms": ours_med <= 20.0,
        "all_same_token_grid": all(v["same_token_grid"] for v in views),
        "views": views,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

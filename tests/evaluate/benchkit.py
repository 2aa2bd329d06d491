"""Benchmark rows from real spectra with known labels (the writer is `speco3.evaluate.benchwrite`), and the
Pillow renderer of the test kit wherever it lives."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from speco3.evaluate.benchwrite import bench_row, bench_schema, write_bench  # noqa: F401 - re-exported
from speco3_testkit.spectra import pillow_render  # noqa: F401 - re-exported

REAL = ["lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz", "lamost/spec-55859-F5902_sp01-001.fits.gz",
        "sdss/spec-0266-51602-0107.fits", "lamost/spec-58397-EG014118N254444M01_sp03-031.fits"]
# (task, truth) of the benchmark rows: every task, both labels
LABELS = [("cv", "YES"), ("cv", "NO"), ("carbon", "YES"), ("carbon", "NO"), ("wd", "NO"), ("wd", "YES"),
          ("cv", "NO"), ("ss", "YES"), ("gm", "NO"), ("cv", "YES"), ("carbon", "NO"), ("wd", "NO")]

SCHEMA = bench_schema()


def png_of(width: int = 792, height: int = 472, seed: int = 0) -> bytes:
    pixels = np.full((height, width, 3), 255, np.uint8)
    rng = np.random.default_rng(seed)
    pixels[rng.integers(0, height, 500), rng.integers(0, width, 500)] = (0, 0, 200)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def row(task: str, truth: str, name: str, wavelength, flux, redshift: float = 0.0, image: bytes | None = None,
        index: int = 0) -> dict:
    """One benchmark row; a synthetic first image unless ``image`` is given."""
    return bench_row(task, truth, name, wavelength, flux, redshift, image if image is not None else png_of(seed=index),
                     index=index)


def rows_from_spectra(spectra, labels: list[tuple[str, str]], images: list[bytes] | None = None) -> list[dict]:
    """Rows from real `Spectrum` objects with known (task, truth) labels, cycling over the spectra."""
    out = []
    for i, (task, truth) in enumerate(labels):
        s = spectra[i % len(spectra)]
        good = np.flatnonzero(s.good)[i:]  # each row its own cut, so each row's image differs
        out.append(row(task, truth, f"{s.name}-{i}", s.wavelength[good], s.flux[good], s.meta.redshift or 0.0,
                       images[i % len(images)] if images else None, index=i))
    return out

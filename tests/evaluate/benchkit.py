"""Writes SpecVI-Bench-format parquet files with the benchmark's exact nested schema (from real spectra)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

REAL = ["lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz", "lamost/spec-55859-F5902_sp01-001.fits.gz",
        "sdss/spec-0266-51602-0107.fits", "lamost/spec-58397-EG014118N254444M01_sp03-031.fits"]
# (task, truth) of the benchmark rows: every task, both labels
LABELS = [("cv", "YES"), ("cv", "NO"), ("carbon", "YES"), ("carbon", "NO"), ("wd", "NO"), ("wd", "YES"),
          ("cv", "NO"), ("ss", "YES"), ("gm", "NO"), ("cv", "YES"), ("carbon", "NO"), ("wd", "NO")]

CREATE_KWARGS = pa.struct([
    pa.field("flux", pa.list_(pa.float64())),
    pa.field("redshift", pa.float64()),
    pa.field("wavelength", pa.list_(pa.float64())),
])
SCHEMA = pa.schema([
    pa.field("data_source", pa.string()),
    pa.field("prompt", pa.list_(pa.struct([pa.field("content", pa.string()), pa.field("role", pa.string())]))),
    pa.field("images", pa.list_(pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())]))),
    pa.field("ability", pa.string()),
    pa.field("reward_model", pa.struct([pa.field("ground_truth", pa.string()), pa.field("style", pa.string())])),
    pa.field("extra_info", pa.struct([
        pa.field("index", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("split", pa.string()),
        pa.field("tools_kwargs", pa.struct([
            pa.field("spectral_visualization_tool", pa.struct([pa.field("create_kwargs", CREATE_KWARGS)])),
        ])),
    ])),
])


def png_of(width: int = 792, height: int = 472, seed: int = 0) -> bytes:
    pixels = np.full((height, width, 3), 255, np.uint8)
    rng = np.random.default_rng(seed)
    pixels[rng.integers(0, height, 500), rng.integers(0, width, 500)] = (0, 0, 200)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def row(task: str, truth: str, name: str, wavelength, flux, redshift: float = 0.0, image: bytes | None = None,
        index: int = 0) -> dict:
    """One benchmark row as the parquet holds it."""
    return {
        "data_source": task,
        "prompt": [{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": f"<image>\nAnalyze the provided spectrum ({task})."}],
        "images": [{"bytes": image if image is not None else png_of(seed=index), "path": f"{name}.png"}],
        "ability": "spectral_classification",
        "reward_model": {"ground_truth": truth, "style": "rule"},
        "extra_info": {"index": index, "name": name, "split": "test", "tools_kwargs": {
            "spectral_visualization_tool": {"create_kwargs": {
                "wavelength": [float(v) for v in wavelength], "flux": [float(v) for v in flux],
                "redshift": float(redshift)}}}},
    }


def write_bench(path: Path, rows: list[dict], schema: pa.Schema = SCHEMA) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def rows_from_spectra(spectra, labels: list[tuple[str, str]], images: list[bytes] | None = None) -> list[dict]:
    """Rows from real `Spectrum` objects with known (task, truth) labels, cycling over the spectra."""
    out = []
    for i, (task, truth) in enumerate(labels):
        s = spectra[i % len(spectra)]
        good = np.flatnonzero(s.good)[i:]  # each row its own cut, so each row's image differs
        out.append(row(task, truth, f"{s.name}-{i}", s.wavelength[good], s.flux[good], s.meta.redshift or 0.0,
                       images[i % len(images)] if images else None, index=i))
    return out

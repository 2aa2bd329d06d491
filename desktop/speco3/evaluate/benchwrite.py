"""Writing SpecVI-Bench-format parquet files (the exact nested schema `speco3.evaluate.bench` reads).

For test and benchmark fixtures made from real spectra, and for observers who turn their own labelled spectra into
a file that ``spec-o3 evaluate`` (and other SpecVI-Bench tooling) reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def bench_schema():
    """The Arrow schema of a SpecVI-Bench file (column order and nesting as the release ships them)."""
    import pyarrow as pa

    create_kwargs = pa.struct([pa.field("flux", pa.list_(pa.float64())), pa.field("redshift", pa.float64()),
                               pa.field("wavelength", pa.list_(pa.float64()))])
    return pa.schema([
        pa.field("data_source", pa.string()),
        pa.field("prompt", pa.list_(pa.struct([pa.field("content", pa.string()), pa.field("role", pa.string())]))),
        pa.field("images", pa.list_(pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())]))),
        pa.field("ability", pa.string()),
        pa.field("reward_model", pa.struct([pa.field("ground_truth", pa.string()), pa.field("style", pa.string())])),
        pa.field("extra_info", pa.struct([
            pa.field("index", pa.int64()), pa.field("name", pa.string()), pa.field("split", pa.string()),
            pa.field("tools_kwargs", pa.struct([
                pa.field("spectral_visualization_tool", pa.struct([pa.field("create_kwargs", create_kwargs)]))])),
        ])),
    ])


def bench_row(task: str, truth: str, name: str, wavelength: Sequence[float], flux: Sequence[float],
              redshift: float = 0.0, image: bytes | None = None, prompt: str = "", index: int = 0,
              split: str = "test") -> dict:
    """One row as the file holds it; ``image`` is the first image (PNG bytes) the model is shown, if any."""
    return {
        "data_source": task,
        "prompt": [{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": prompt or f"<image>\nAnalyze the provided spectrum ({task})."}],
        "images": [{"bytes": image, "path": f"{name}.png"}] if image is not None else [],
        "ability": "spectral_classification",
        "reward_model": {"ground_truth": truth, "style": "rule"},
        "extra_info": {"index": index, "name": name, "split": split, "tools_kwargs": {
            "spectral_visualization_tool": {"create_kwargs": {
                "wavelength": [float(v) for v in wavelength], "flux": [float(v) for v in flux],
                "redshift": float(redshift)}}}},
    }


def write_bench(path: str | Path, rows: list[dict], schema=None) -> Path:
    """Write ``rows`` (from `bench_row`) as a parquet file with `bench_schema` (or ``schema``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema if schema is not None else bench_schema()), path)
    return path

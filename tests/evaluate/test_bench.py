"""SpecVI-Bench parquet reading: the exact nested schema, clear errors naming the column, per-item failures."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from benchkit import LABELS, SCHEMA, png_of, row, write_bench

from speco3.evaluate.bench import BenchFile, BenchFormatError


def test_rows_become_spectra_with_labels(bench_path, real_spectra):
    bench = BenchFile(bench_path)
    items = list(bench.items())
    assert len(items) == len(LABELS) == len(bench)
    assert [(i.task, i.truth) for i in items] == LABELS
    first = items[0]
    assert first.error is None and first.image is not None and first.image[:4] == b"\x89PNG"
    s = first.spectrum()
    src = real_spectra[0]
    assert np.array_equal(s.flux, src.flux[src.good])  # row 0: no cut
    assert s.meta.redshift == (src.meta.redshift or 0.0)
    assert "cv" in first.prompt and first.key == "specvi#0:" + first.name


def test_tasks_and_limit_select_items(bench_path):
    bench = BenchFile(bench_path)
    assert {i.task for i in bench.items(tasks=["wd"])} == {"wd"}
    limited = list(bench.items(limit=1))
    assert sorted(i.task for i in limited) == ["carbon", "cv", "gm", "ss", "wd"]


def test_a_missing_column_is_named(tmp_path):
    schema = pa.schema([f for f in SCHEMA if f.name != "reward_model"])
    r = row("cv", "YES", "a", [1.0, 2.0], [3.0, 4.0])
    r.pop("reward_model")
    path = write_bench(tmp_path / "b.parquet", [r], schema)
    with pytest.raises(BenchFormatError, match="missing column 'reward_model.ground_truth'"):
        BenchFile(path)


def test_a_missing_nested_field_is_named(tmp_path):
    kwargs = pa.struct([pa.field("flux", pa.list_(pa.float64())), pa.field("redshift", pa.float64())])
    schema = pa.schema([f if f.name != "extra_info" else pa.field("extra_info", pa.struct([
        pa.field("name", pa.string()), pa.field("tools_kwargs", pa.struct([pa.field(
            "spectral_visualization_tool", pa.struct([pa.field("create_kwargs", kwargs)]))]))])) for f in SCHEMA])
    r = row("cv", "YES", "a", [1.0, 2.0], [3.0, 4.0])
    del r["extra_info"]["tools_kwargs"]["spectral_visualization_tool"]["create_kwargs"]["wavelength"]
    path = write_bench(tmp_path / "b.parquet", [r], schema)
    with pytest.raises(BenchFormatError, match=r"create_kwargs\.wavelength"):
        BenchFile(path)


def test_a_wrong_type_is_named(tmp_path):
    kwargs = pa.struct([pa.field("flux", pa.list_(pa.string())), pa.field("redshift", pa.float64()),
                        pa.field("wavelength", pa.list_(pa.float64()))])
    schema = pa.schema([f if f.name != "extra_info" else pa.field("extra_info", pa.struct([
        pa.field("index", pa.int64()), pa.field("name", pa.string()), pa.field("split", pa.string()),
        pa.field("tools_kwargs", pa.struct([pa.field(
            "spectral_visualization_tool", pa.struct([pa.field("create_kwargs", kwargs)]))]))])) for f in SCHEMA])
    r = row("cv", "YES", "a", [1.0, 2.0], [3.0, 4.0])
    r["extra_info"]["tools_kwargs"]["spectral_visualization_tool"]["create_kwargs"]["flux"] = ["x", "y"]
    path = write_bench(tmp_path / "b.parquet", [r], schema)
    with pytest.raises(BenchFormatError, match=r"create_kwargs\.flux' has type list<.*string.*>, expected list<number>"):
        BenchFile(path)


def test_not_parquet_and_missing_file(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 but not really")
    with pytest.raises(BenchFormatError, match="not a readable parquet file"):
        BenchFile(bad)
    with pytest.raises(BenchFormatError, match="no such file"):
        BenchFile(tmp_path / "none.parquet")


def test_bad_rows_become_item_errors(tmp_path):
    wl = np.linspace(4000, 8000, 50)
    rows = [row("cv", "YES", "empty", [], []),
            row("cv", "NO", "nan", wl, np.full(50, np.nan)),
            row("cv", "NO", "short", wl, wl[:10]),
            row("xx", "NO", "task", wl, wl),
            row("cv", "MAYBE", "label", wl, wl),
            row("cv", "yes", "ok", wl, np.where(wl > 5000, np.nan, 1.0), image=png_of(10, 10))]
    items = list(BenchFile(write_bench(tmp_path / "b.parquet", rows)).items())
    errors = [i.error for i in items]
    assert "empty" in errors[0] and "finite" in errors[1] and "50 values but flux has 10" in errors[2]
    assert "data_source 'xx'" in errors[3] and "'MAYBE'" in errors[4]
    assert errors[5] is None and items[5].truth == "YES"  # partly NaN is fine: the renderer drops them
    with pytest.raises(ValueError, match="empty"):
        items[0].spectrum()

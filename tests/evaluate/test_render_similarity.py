"""Our full view against the image a benchmark ships, on real data: the training routine's reference renders."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from benchkit import row, write_bench

from speco3.cli import main
from speco3.evaluate.similarity import render_similarity, same_size_class

pytestmark = pytest.mark.gui  # the real renderer (pyqtgraph offscreen)

A = "spec-60591-LN042429N340750BM01_sp01-001"
B = "spec-58397-EG014118N254444M01_sp03-031"


def _bench_row(spectra_dir, stem: str, shipped: bytes, i: int) -> dict:
    from speco3.spectra import read_spectrum

    s = read_spectrum(next((spectra_dir / "lamost").glob(stem + "*")))
    ok = np.isfinite(s.flux) & np.isfinite(s.wavelength)
    return row("cv", "NO", stem, s.wavelength[ok], s.flux[ok], s.meta.redshift or 0.0, shipped, index=i)


def test_drift_shows_on_real_renders(spectra_dir, tmp_path, capsys):
    refs = spectra_dir.parent / "reference-renders"  # beside the spectra, wherever the test data lives
    a, b = (refs / f"{A}_full.png").read_bytes(), (refs / f"{B}_full.png").read_bytes()
    # rows 0 and 1 ship their own reference render, row 2 ships another spectrum's (a drifted renderer)
    bench = write_bench(tmp_path / "b.parquet", [_bench_row(spectra_dir, A, a, 0), _bench_row(spectra_dir, B, b, 1),
                                                 _bench_row(spectra_dir, A, b, 2)])
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["<answer>\\boxed{NO}</answer>"]), encoding="utf-8")
    assert main(["evaluate", str(bench), "--scripted", str(script), "--out", str(tmp_path / "o"), "--json"]) == 0
    capsys.readouterr()
    with open(tmp_path / "o" / "items.csv", newline="") as fh:
        sims = {r["key"].split(":")[0]: r for r in csv.DictReader(fh)}
    assert all(r["same_size_class"] == "True" and r["render_width"] == "792" for r in sims.values())
    assert float(sims["specvi#0"]["render_similarity"]) > 0.95
    assert float(sims["specvi#1"]["render_similarity"]) > 0.95
    assert float(sims["specvi#2"]["render_similarity"]) < 0.8


def test_similarity_figures():
    from benchkit import png_of

    one = png_of(792, 472, seed=1)
    assert render_similarity(one, one)["render_similarity"] == pytest.approx(1.0)
    assert abs(render_similarity(one, png_of(792, 472, seed=2))["render_similarity"]) < 0.2
    small = render_similarity(png_of(596, 352, seed=1), one)
    assert small["same_size_class"] is False and small["render_width"] == 596
    assert "render_error" in render_similarity(b"junk", one)
    assert same_size_class((800, 470), (792, 472)) and not same_size_class((700, 472), (792, 472))

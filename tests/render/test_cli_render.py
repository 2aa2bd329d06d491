"""``spec-o3 render``: writes the PNG (and the model-size image), reports the token grid, fails cleanly."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from speco3.cli import main

pytestmark = pytest.mark.gui

LAMOST = "lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz"


def test_render_zoom_with_model_size(spectra_dir, tmp_path, capsys):
    out = tmp_path / "sub" / "zoom.png"
    rc = main(["render", str(spectra_dir / LAMOST), "--range", "6500", "6600", "-o", str(out), "--model-size"])
    assert rc == 0
    with Image.open(out) as im:
        assert im.size == (596, 352)
    model = tmp_path / "sub" / "zoom.model.png"
    with Image.open(model) as im:
        assert im.size == (588, 364)  # smart_resize → 21 × 13 tokens
    text = capsys.readouterr().out
    assert "596x352" in text and "token grid 21x13 = 273 image tokens" in text


def test_render_full_json_observed_title(spectra_dir, tmp_path, capsys):
    out = tmp_path / "full.png"
    rc = main(["render", str(spectra_dir / LAMOST), "--observed", "--title", "My star", "-o", str(out), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["width"] == 792 and summary["height"] == 472
    assert summary["frame"] == "observed" and summary["points"] == 3909
    assert out.read_bytes().startswith(b"\x89PNG")


def test_render_bad_range_and_missing_file(spectra_dir, tmp_path, capsys):
    assert main(["render", str(spectra_dir / LAMOST), "--range", "6600", "6500", "-o", str(tmp_path / "a.png")]) == 1
    assert "A < B" in capsys.readouterr().err
    assert main(["render", str(tmp_path / "missing.fits"), "-o", str(tmp_path / "b.png")]) == 1
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()


def test_render_empty_window_still_writes(spectra_dir, tmp_path):
    out = tmp_path / "empty.png"
    assert main(["render", str(spectra_dir / LAMOST), "--range", "100", "200", "-o", str(out)]) == 0
    assert out.stat().st_size > 1000

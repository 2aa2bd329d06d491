"""``spec-o3 info`` and ``spec-o3 index``."""

from __future__ import annotations

import json

from speco3.cli import main


def test_info_text_blocks(spectra_path, capsys):
    path = spectra_path("desi/coadd-5-169-thru20210419.fits")
    assert main(["info", str(path), str(spectra_path("sdss/spec-1931-53358-0251.fits"))]) == 0
    out = capsys.readouterr().out
    assert out.count("[desi]") == 2 and "[sdss-spec]" in out
    assert "skipped row 0, TARGETID -1695072: unassigned fibre" in out
    assert "QSO BROADLINE" in out and "1.18846" in out
    assert "3800.1 - 7350.2 Å (vacuum)" in out
    assert "pixels          2866" in out


def test_info_json_and_address(spectra_path, capsys):
    path = spectra_path("lamost/med-58625-TD192102N424113K01_sp12-076.fits.gz")
    assert main(["info", "--json", f"{path}#1"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert len(recs) == 1
    r = recs[0]
    assert (r["index"], r["hdu"], r["format"], r["object_id"]) == (1, "COADD_R", "lamost-mrs", "744812076")
    assert r["n_pixels"] > 3000 and 6200 < r["wavelength_min"] < r["wavelength_max"] < 6900
    assert 0 <= r["masked_fraction"] < 0.1 and r["has_ivar"] is True


def test_info_bad_file_exit_status(spectra_path, tmp_path, capsys):
    bad = tmp_path / "x.fits"
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["info", str(bad), str(spectra_path("generic/UVES.fits"))]) == 1
    out = capsys.readouterr().out
    assert f"{bad}: cannot read: not a FITS file" in out and "[generic-image]" in out


def test_index_command(small_archive, tmp_path, capsys):
    db = tmp_path / "cli.sqlite"
    assert main(["index", str(small_archive), "--db", str(db), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert "scanned 7 files" in captured.out and "7 read" in captured.out
    assert "6 spectra in 7 files; 0 files unreadable" in captured.out
    assert "1 companion files read with their spectra (e.g. DESI redrock): desi/redrock-4-80613" in captured.out
    assert "unreadable files" not in captured.out
    assert "indexing" in captured.err  # progress on stderr
    assert main(["index", str(small_archive), "--db", str(db), "--cls", "STAR", "--sort", "snr", "--desc"]) == 0
    out = capsys.readouterr().out
    assert "0 read, 7 unchanged" in out and "4 matching entries" in out
    lines = [ln for ln in out.splitlines() if "lamost/" in ln]
    assert lines[0].strip().startswith("lamost/spec-58397-EG014118N254444M01_sp03-031.fits#0")
    assert main(["index", str(small_archive), "--db", str(db), "--no-scan", "--json", "--list", "--errors"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["spectra"] == 6 and len(data["entries"]) == 6
    assert data["errors"] == [] and data["summary"]["companions"] == 1

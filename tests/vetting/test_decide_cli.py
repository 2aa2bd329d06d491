"""``spec-o3 decide``: a decision with evidence windows from the command line, refused inputs write nothing; the
exports carry the evidence."""

from __future__ import annotations

import json

import numpy as np
import pytest
from astropy.table import Table

from speco3.cli import main
from speco3.spectra import ArchiveIndex
from speco3.vetting import Decision, Evidence, ModelVerdict, VettingStore
from speco3.vetting.export import export, export_rows
from speco3.vetting.report import write_report
from speco3_testkit.spectra import write_csv_spectrum


@pytest.fixture
def spectrum_file(tmp_path):
    return write_csv_spectrum(tmp_path / "archive", 1)  # 3700-9100 Å, Hα emission


def test_decide_stores_the_windows_in_order_with_the_app_key_and_the_model_verdict_seen(tmp_path, spectrum_file,
                                                                                        monkeypatch, capsys):
    store_path = tmp_path / "s.sqlite"
    index = ArchiveIndex(tmp_path / "index.sqlite")
    index.scan(spectrum_file.parent)
    (entry,) = index.query()
    index.close()
    app_key = f"{entry.path}#{entry.index}"  # the key the app and `spec-o3 vet` store this spectrum under
    with VettingStore(store_path) as s:
        s.record_model_verdict(ModelVerdict(app_key, "cv", "NO", "NO", model_id="m1", prompt_version="p"))
        seen = s.record_model_verdict(ModelVerdict(app_key, "cv", "YES", "YES", model_id="m2", prompt_version="p"))
    monkeypatch.chdir(spectrum_file.parent)  # a relative FILE resolves to the same key
    monkeypatch.setenv("LOGNAME", "ana")
    code = main(["decide", str(store_path), f"{spectrum_file.name}#0", "--task", "cv", "--verdict", "yes",
                 "--evidence", "6540-6590:Hα emission, 4840-4880:Hβ", "--evidence", "4670-4700",
                 "--flag", "interesting", "--comment", "broad Balmer"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "YES" in out and "6540-6590:Hα emission; 4840-4880:Hβ; 4670-4700" in out and "m2" in out
    with VettingStore(store_path, readonly=True) as s:
        d = s.decision(app_key, "cv")
        assert d.evidence == [Evidence(6540, 6590, "Hα emission"), Evidence(4840, 4880, "Hβ"), Evidence(4670, 4700)]
        assert (d.decision, d.flags, d.comment, d.vetter) == ("YES", ["interesting"], "broad Balmer", "ana")
        assert (d.model_verdict_seen, d.model_verdict_id) == ("YES", seen)
        info = s.spectrum_info(app_key)
        assert info.path == entry.path and info.file_sha256 and len(info.file_sha256) == 64


def test_unsure_without_evidence_as_json_with_a_vetter(tmp_path, spectrum_file, capsys):
    store_path = tmp_path / "s.sqlite"
    assert main(["decide", str(store_path), str(spectrum_file), "--task", "cv", "--verdict", "UNSURE", "--json",
                 "--vetter", "Bo"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["decision"] == "UNSURE" and printed["evidence"] == [] and printed["vetter"] == "Bo"
    assert printed["model_verdict_seen"] is None
    with VettingStore(store_path, readonly=True) as s:
        (d,) = s.decisions("cv")
        assert d.evidence == [] and d.id == printed["id"]


@pytest.mark.parametrize("case, words", [
    ("corrupt", ["bad.fits"]),
    ("bad index", ["no spectrum '3'", "#0..#0"]),
    ("outside", ["100-200", "3700-9100"]),
    ("malformed", ["6600-6500", "below the end"]),
    ("unknown task", ["unknown task 'nope'", "cv"]),
])
def test_refused_input_exits_2_and_writes_nothing(tmp_path, spectrum_file, capsys, case, words):
    store_path = tmp_path / "s.sqlite"
    bad = tmp_path / "bad.fits"
    bad.write_bytes(b"SIMPLE  =  garbage" + b"\0" * 100)
    address, task, extra = {"corrupt": (str(bad), "cv", []), "bad index": (f"{spectrum_file}#3", "cv", []),
                            "outside": (str(spectrum_file), "cv", ["--evidence", "6500-6600,100-200:blue"]),
                            "malformed": (str(spectrum_file), "cv", ["--evidence", "6600-6500"]),
                            "unknown task": (str(spectrum_file), "nope", [])}[case]
    assert main(["decide", str(store_path), address, "--task", task, "--verdict", "NO", *extra]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "Traceback" not in err
    assert not store_path.exists()  # nothing written, not even an empty store


def test_a_window_overlapping_the_edge_is_kept(tmp_path, spectrum_file):
    store_path = tmp_path / "s.sqlite"
    assert main(["decide", str(store_path), str(spectrum_file), "--task", "cv", "--verdict", "NO",
                 "--evidence", "9000-9500:red end"]) == 0
    with VettingStore(store_path, readonly=True) as s:
        assert s.decisions()[0].evidence == [Evidence(9000, 9500, "red end")]


def test_exports_carry_the_evidence(filled_store, tmp_path):
    key = "/data/spec00.fits#0"
    windows = [Evidence(6540, 6590, "Hα"), Evidence(4840, 4880, "Hβ")]
    filled_store.record_decision(Decision(key, "cv", "YES", evidence=windows, vetter="Ana"))
    filled_store.save_annotation("/data/spec01.fits#0", "cv", [], "", evidence=[Evidence(4670, 4700)])  # no decision
    rows = {r["spectrum_key"]: r for r in export_rows(filled_store, "cv")}
    assert rows[key]["evidence"] == "6540-6590:Hα; 4840-4880:Hβ" and rows[key]["evidence_windows"] == windows
    assert rows["/data/spec01.fits#0"]["evidence"] == "4670-4700"
    for name, fmt in [("out.csv", "ascii.csv"), ("out.vot", "votable"), ("out.fits", "fits")]:
        t = Table.read(export(filled_store, tmp_path / name, task="cv"), format=fmt)
        by_key = {r["spectrum_key"]: r for r in t}
        want = "6540-6590:Hα; 4840-4880:Hβ" if fmt != "fits" else "6540-6590:H\\u03b1; 4840-4880:H\\u03b2"
        assert str(by_key[key]["evidence"]) == want
    html = write_report(filled_store, tmp_path / "r.html", task="cv").read_text()
    assert "6540–6590 Å · Hα" in html and "4670–4700 Å" in html


def test_merged_stores_keep_the_evidence(tmp_path):
    from speco3.vetting.merge import merge_stores

    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    with VettingStore(a) as s:
        s.record_decision(Decision("x#0", "cv", "YES", evidence=[Evidence(6540, 6590, "Hα")], vetter="Ana"))
        s.save_annotation("y#0", "cv", [], "", evidence=[Evidence(1, 2)])
    with VettingStore(b) as s:
        s.save_annotation("y#0", "cv", [], "", evidence=[Evidence(1, 3, "later")])  # only the evidence differs
    report = merge_stores(tmp_path / "all.sqlite", [a, b])
    assert report.written and report.notes_replaced == 1
    with VettingStore(tmp_path / "all.sqlite", readonly=True) as s:
        assert s.decision("x#0", "cv").evidence == [Evidence(6540, 6590, "Hα")]
        assert s.annotation("y#0", "cv").evidence == [Evidence(1, 3, "later")]


def test_decide_takes_the_vetter_name_the_app_has_set(tmp_path, spectrum_file, monkeypatch, capsys):
    """One person is one vetter: with a name set in the app's Settings, ``decide`` records it, not the login name
    (``--vetter`` still wins); the app reads the same setting."""
    from speco3.config import config_dir
    from speco3.gui.settings import AppSettings

    monkeypatch.setenv("LOGNAME", "root")
    store_path = tmp_path / "s.sqlite"
    settings = AppSettings(vetter="Ana Lopez")
    settings.save()
    assert (config_dir() / "desktop.json").is_file()
    assert main(["decide", str(store_path), str(spectrum_file), "--task", "cv", "--verdict", "YES"]) == 0
    assert main(["decide", str(store_path), str(spectrum_file), "--task", "wd", "--verdict", "NO",
                 "--vetter", "Bo"]) == 0
    capsys.readouterr()
    with VettingStore(store_path, readonly=True) as s:
        assert [d.vetter for d in s.decisions()] == ["Ana Lopez", "Bo"]
    assert AppSettings.load().vetter_name() == "Ana Lopez"
    (config_dir() / "desktop.json").write_text("{broken", encoding="utf-8")  # unreadable: the login name
    assert main(["decide", str(store_path), str(spectrum_file), "--task", "cv", "--verdict", "NO", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vetter"] == "root"


def test_decide_warns_when_a_label_names_a_line_outside_its_window_at_the_spectrums_z(tmp_path, capsys):
    """Evidence windows are observed-frame: at z = 0.308 Hα is at 8587 Å, so "6540-6590:Hα" (its rest wavelength)
    is stored with a warning naming where the line is; a window at the observed wavelength, or a label naming no
    line of the task, gives none."""
    from astropy.io import fits

    from speco3.agent.tasks import get_task
    from speco3.vetting.records import label_warnings

    qso = tmp_path / "qso.fits"  # a 1-D spectrum, 3800-9200 Å, with its catalogue redshift in the header
    hdu = fits.PrimaryHDU(np.full(2700, 10.0, dtype=np.float32))
    hdu.header.update(CRVAL1=3800.0, CDELT1=2.0, CRPIX1=1.0, CUNIT1="Angstrom", CTYPE1="WAVE", REDSHIFT=0.308)
    hdu.writeto(qso)
    store_path = tmp_path / "s.sqlite"
    assert main(["decide", str(store_path), str(qso), "--task", "cv", "--verdict", "YES",
                 "--evidence", "6540-6590:Hα,8560-8610:Halpha,5000-5100:continuum"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "evidence window 6540-6590:Hα: the label names Hα at 8587 Å" in err
    assert "observed frame" in err
    with VettingStore(store_path, readonly=True) as s:
        assert len(s.decisions()[0].evidence) == 3  # stored as given
    lines = get_task("cv").lines
    assert label_warnings([Evidence(4660, 4700, "He II 4686")], lines, 0.0) == []
    assert label_warnings([Evidence(4660, 4700, "He I")], lines, 0.0)  # no He I line lies in 4660-4700
    assert label_warnings([Evidence(5860, 5890, "he i emission")], lines, 0.0) == []  # He I 5876 does
    assert label_warnings([Evidence(6540, 6590, "Hα")], lines, None) == []

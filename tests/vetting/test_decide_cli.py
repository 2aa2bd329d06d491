"""``spec-o3 decide``: a decision with evidence windows from the command line, refused inputs write nothing; the
exports carry the evidence."""

from __future__ import annotations

import json

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
        want = "6540-6590:Hα; 4840-4880:Hβ" if fmt != "fits" else "6540-6590:Halpha; 4840-4880:Hbeta"  # transliterated (#44)
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

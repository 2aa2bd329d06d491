"""Every kind of VOTable the app writes passes STILTS' ``votlint`` (Debian ``stilts``) with no error and no warning.

Kinds: the vetting export (decided, undecided and notes-only rows; K=1 and K>1 verdict columns; non-ASCII text),
the table sent over SAMP from a store (``samp send-table``) and from the app's queue, the SAMP spectrum copies of
several surveys' files, and the demo's candidate list. They are written by `speco3.votable` (variable-length
strings, nulls as empty cells); before it, astropy's ``arraysize="1"`` columns drew "deprecated since VOTable 1.3"
and "Empty character value is questionable" warnings.
"""

from __future__ import annotations

import subprocess

import pytest

import javapeers

pytestmark = pytest.mark.java
SPECTRA = ("lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz", "desi/coadd-4-80613-thru20210324.fits#0",
           "generic/UVES.fits", "generic/XShooter_XQ100.fits.gz", "generic/NGC4151sic2a.fits")


def votlint(path, tmp_path) -> list[str]:
    """votlint's messages about ``path`` (all but its own INFO lines), after checking it really read the file."""
    exe = javapeers.require("stilts")
    home = tmp_path / "stilts-home"
    home.mkdir(exist_ok=True)
    proc = subprocess.run([exe, "votlint", "ucd=true", "unit=true", f"votable={path}"], capture_output=True,
                          text=True, timeout=120, env=javapeers.java_env(home))
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines()
             if ln.strip() and not ln.startswith("Picked up JAVA_TOOL_OPTIONS")]
    assert proc.returncode == 0, lines
    return lines


def _store(path):
    from speco3.vetting import Decision, ModelVerdict, SpectrumInfo, VettingStore

    store = VettingStore(path)
    rows = [  # (verdict, outcome, K fold, decision, notes)
        ("YES", "YES", {}, "YES", None),
        ("NO", "NO", {"rollouts": 4, "p_yes": 0.25, "p_yes_token": 0.31, "agreement": 0.75, "abstained": False,
                      "format_failures": 0, "outcomes": ["NO", "NO", "YES", "NO"]}, None, None),
        (None, "format_error", {"rollouts": 4, "p_yes": None, "agreement": None, "abstained": True,
                                "format_failures": 4, "outcomes": ["format_error"] * 4}, "UNSURE", None),
        (None, None, {}, None, (["bad_sky"], "Hβ looks odd — é")),  # notes only, no verdict, no decision
    ]
    for i, (verdict, outcome, fold, decision, notes) in enumerate(rows):
        key = f"/archive/s{i}.fits#0"
        store.record_spectrum(SpectrumInfo(key, f"s{i}.fits", ra=10.0 + i, dec=-5.0, survey="lamost" if i else None))
        if outcome:
            store.record_model_verdict(ModelVerdict(key, "cv", verdict, outcome, "m", **fold))
        if decision:
            store.record_decision(Decision(key, "cv", decision, vetter="t", comment="é α" if i else ""))
        if notes:
            store.save_annotation(key, "cv", notes[0], notes[1], vetter="t")
    return store


def test_export_and_samp_store_table_lint_clean(tmp_path):
    from astropy.table import Table

    from speco3.interop.files import write_table_votable
    from speco3.interop.tables import store_table
    from speco3.vetting.export import export

    with _store(tmp_path / "results.sqlite") as store:
        export(store, tmp_path / "export.vot")
        table, keys = store_table(store)
        write_table_votable(table, tmp_path / "sent.vot", "spec-o3 results")
    for name in ("export.vot", "sent.vot"):
        assert votlint(tmp_path / name, tmp_path) == [], name
    back = Table.read(tmp_path / "export.vot", format="votable")
    assert len(back) == 4 and back["comment"][3] == "Hβ looks odd — é"
    assert list(back["rollouts"].mask) == [True, False, False, True] and back["rollouts"][1] == 4
    # STIL (TOPCAT's table library) reads the empty cells as nulls: the undecided rows, the missing K
    assert nulls(tmp_path / "export.vot", "decision", tmp_path) == 2
    assert nulls(tmp_path / "export.vot", "rollouts", tmp_path) == 2
    assert nulls(tmp_path / "export.vot", "model_verdict", tmp_path) == 2  # format error, notes only


def nulls(path, column: str, tmp_path) -> int:
    """Rows where STILTS reads ``column`` as null."""
    home = tmp_path / "stilts-home"
    home.mkdir(exist_ok=True)
    proc = subprocess.run([javapeers.require("stilts"), "tpipe", f"in={path}", f"cmd=select NULL_{column}",
                           "omode=count"], capture_output=True, text=True, timeout=120, env=javapeers.java_env(home))
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split("rows:")[1].split()[0])


def test_samp_queue_table_and_spectrum_copies_lint_clean(tmp_path, spectra_dir):
    from speco3.demo import write_demo_archive
    from speco3.interop.files import write_spectrum, write_table_votable
    from speco3.interop.tables import queue_table
    from speco3.spectra import read_spectrum
    from speco3.spectra.index import ArchiveIndex

    root = write_demo_archive(tmp_path / "demo")[0].parent
    assert votlint(root / "candidates.vot", tmp_path) == []
    with ArchiveIndex.for_root(root) as index:
        index.scan(root)
        entries = index.query()
    with _store(tmp_path / "results.sqlite") as store:
        table, keys = queue_table(entries, store, "cv", lambda e: e.key)
    write_table_votable(table, tmp_path / "queue.vot", "spec-o3 queue")
    assert len(keys) == 20 and votlint(tmp_path / "queue.vot", tmp_path) == []
    for name in SPECTRA:
        spec = read_spectrum(f"{spectra_dir}/{name}")
        path = write_spectrum(spec, tmp_path, "votable")
        assert votlint(path, tmp_path) == [], name

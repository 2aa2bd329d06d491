"""Resumable batch screening, and the ``spec-o3 vet`` / ``inspect`` / ``export`` commands with ``--scripted``."""

from __future__ import annotations

import json
import os
import signal
import threading

import numpy as np
import pytest
from astropy.table import Table
from vetting_helpers import NO, YES, ZOOM, items, pillow_render

from speco3.agent import Trace, get_task
from speco3.cli import main as cli_main
from speco3.cli import options as cli_options
from speco3.engine.base import ModelInfo
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import EngineError
from speco3.vetting import VettingStore
from speco3.vetting.schedulers import vet_batch
from speco3.vetting.screening import VetItem
from speco3_testkit.spectra import pillow_render as _pillow_render


def main(argv: list[str], render=_pillow_render) -> int:
    """The CLI with the small Pillow renderer, passed in as `speco3.cli.main` takes it."""
    return cli_main(argv, render=render)



def test_batch_cancel_then_resume_without_duplicates(tmp_path, render):
    store = VettingStore(tmp_path / "r.sqlite")
    task = get_task("cv")
    cancel = threading.Event()
    tokens = [0]

    def on_token(_rollout, _piece):
        tokens[0] += 1
        if tokens[0] == 40:  # inside the 3rd spectrum's first turn (each run streams 16 pieces)
            cancel.set()

    engine = ScriptedEngine([NO])
    first = vet_batch(items(6), store, engine, task, render, cancel=cancel, on_token=on_token)
    assert first.cancelled and first.done == 2 and len(store.model_verdicts("cv", latest=False)) == 2
    second = vet_batch(items(6), store, ScriptedEngine([NO]), task, render)
    assert not second.cancelled and (second.done, second.skipped) == (4, 2)
    rows = store.model_verdicts("cv", latest=False)
    assert len(rows) == 6 and len({r.spectrum_key for r in rows}) == 6
    third = vet_batch(items(6), store, ScriptedEngine([NO]), task, render)
    assert (third.done, third.skipped) == (0, 6)
    # Another model (or prompt version) is a different run: everything is screened again.
    other = ScriptedEngine([YES], info=ModelInfo(model_id="other-model", quant="Q4_K_M"))
    fourth = vet_batch(items(6), store, other, task, render)
    assert fourth.done == 6 and store.latest_model_verdict("/data/spec00.fits#0", "cv").model_id == "other-model"
    store.close()


def test_engine_errors_are_retried_and_unreadable_recorded(tmp_path, render):
    store = VettingStore(tmp_path / "r.sqlite")
    task = get_task("cv")
    broken = ScriptedEngine([EngineError("out of memory")])
    bad = VetItem("/data/bad.fits#0", load=lambda: (_ for _ in ()).throw(OSError("truncated file")), path=None)
    res = vet_batch([*items(2), bad], store, broken, task, render)
    assert res.outcomes == {"engine_error": 2, "input_error": 1} and res.failed == 3
    assert "truncated file" in store.latest_model_verdict("/data/bad.fits#0", "cv").detail
    res = vet_batch([*items(2), bad], store, ScriptedEngine([YES]), task, render)
    assert (res.done, res.skipped) == (2, 1) and res.outcomes == {"YES": 2}
    store.close()


def test_batch_records_everything(tmp_path, render):
    store = VettingStore(tmp_path / "r.sqlite")
    engine = ScriptedEngine([ZOOM, YES], info=ModelInfo("spec-o3-7b", "Q4_K_M", "a" * 64, "b" * 64))
    spec_file = tmp_path / "s.fits"
    spec_file.write_bytes(b"pretend FITS bytes")
    item = items(1)[0]
    item.path = str(spec_file)
    vet_batch([item], store, engine, get_task("cv"), render, trace_root=tmp_path / "tr")
    v = store.latest_model_verdict(item.key, "cv")
    assert (v.verdict, v.outcome, v.model_id, v.quant, v.text_sha256, v.mmproj_sha256) == (
        "YES", "YES", "spec-o3-7b", "Q4_K_M", "a" * 64, "b" * 64)
    import hashlib

    assert v.file_sha256 == hashlib.sha256(b"pretend FITS bytes").hexdigest()
    assert v.prompt_version == get_task("cv").prompt_version and v.turns == 2 and v.zooms == 1 and v.tokens > 10
    assert v.engine_settings["n_ctx"] == 16384 and v.seconds > 0 and v.app_version
    trace = Trace.load(v.trace_dir)
    assert trace.verdict == "YES" and trace.spectrum["key"] == item.key and trace.model["model_id"] == "spec-o3-7b"
    store.close()


# -- CLI -----------------------------------------------------------------------------------------------------
def _archive(folder, n=6):
    folder.mkdir()
    wl = np.linspace(3700, 9100, 600)
    for i in range(n):
        flux = 10 + (5 if i % 2 else 0) * np.exp(-((wl - 6564.6) / 8) ** 2) + 0.01 * i
        np.savetxt(folder / f"s{i:02d}.csv", np.c_[wl, flux], delimiter=",", header="wavelength,flux", comments="")
    return folder


def _script(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"scripts": [[ZOOM, YES], [NO]]}), encoding="utf-8")
    return path


def test_vet_cli_interrupted_then_resumed(tmp_path, monkeypatch, capsys):
    arch = _archive(tmp_path / "arch")
    db = tmp_path / "results.sqlite"
    calls = [0]

    def interrupting_render():
        def render(view):
            calls[0] += 1
            if calls[0] == 5:  # Ctrl-C while the 3rd or 4th spectrum is being set up
                os.kill(os.getpid(), signal.SIGINT)
            return pillow_render(view)
        return render

    argv = ["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(_script(tmp_path))]
    assert main(argv, render=interrupting_render()) == 130
    with VettingStore(db, readonly=True) as s:
        n_first = len(s.model_verdicts("cv", latest=False))
    assert 1 <= n_first < 6
    capsys.readouterr()
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["skipped"] == n_first and summary["done"] == 6 - n_first
    with VettingStore(db, readonly=True) as s:
        rows = s.model_verdicts("cv", latest=False)
        assert len(rows) == 6 and len({r.spectrum_key for r in rows}) == 6
        assert {r.verdict for r in rows} == {"YES", "NO"} and all(os.path.isdir(r.trace_dir) for r in rows)
        assert all(r.spectrum_key.startswith(str(arch.resolve())) for r in rows)
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skipped"] == 6

    out = tmp_path / "export"
    assert main(["export", str(db), "--csv", str(out / "r.csv"), "--votable", str(out / "r.vot"),
                 "--fits", str(out / "r.fits"), "--html", str(out / "r.html")]) == 0
    assert len(Table.read(out / "r.csv", format="ascii.csv")) == 6
    assert len(Table.read(out / "r.fits")) == 6 and len(Table.read(out / "r.vot", format="votable")) == 6
    html = (out / "r.html").read_text(encoding="utf-8")
    assert all(f"s{i:02d}.csv" in html for i in range(6))


def test_vet_cli_on_a_desi_folder_reads_the_redrock_file_with_its_coadd(spectra_dir, tmp_path, monkeypatch, capsys):
    """A coadd with its redrock file: the catalogue is a companion, not a spectrum; nothing fails."""
    import shutil

    arch = tmp_path / "desi"
    arch.mkdir()
    for name in ("coadd-4-80613-thru20210324.fits", "redrock-4-80613-thru20210324.fits"):
        shutil.copy(spectra_dir / "desi" / name, arch / name)
    monkeypatch.setenv("SPECO3_CACHE_DIR", str(tmp_path / "cache"))
    db = tmp_path / "r.sqlite"
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(_script(tmp_path))]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["done"] == summary["total"] > 0
    assert "input_error" not in summary["outcomes"]
    with VettingStore(db, readonly=True) as s:
        rows = s.model_verdicts("cv", latest=False)
    assert len(rows) == summary["total"] and all("coadd-4-80613" in r.spectrum_key for r in rows)
    from speco3.spectra import ArchiveIndex

    with ArchiveIndex.for_root(arch) as ix:
        coadd = ix.query(sort="key")
    assert len(coadd) == len(rows) and all(e.redshift_source == "redrock" and e.redshift is not None for e in coadd)


def test_vet_cli_errors(tmp_path, capsys, monkeypatch):
    assert main(["vet", str(tmp_path / "nope"), "--task", "cv", "--out", str(tmp_path / "r.sqlite"),
                 "--scripted", str(_script(tmp_path))]) == 1
    assert "no such archive" in capsys.readouterr().err
    arch = _archive(tmp_path / "arch", 1)
    assert main(["vet", str(arch), "--task", "nope", "--out", str(tmp_path / "r.sqlite")]) == 1
    assert "unknown task 'nope'" in capsys.readouterr().err
    assert main(["vet", str(arch), "--task", "cv", "--out", str(tmp_path / "r.sqlite"), "--text", "a.gguf"]) == 1
    assert "--text and --mmproj go together" in capsys.readouterr().err
    # a model that cannot be opened: an error, and no empty store left behind (an existing store stays)
    assert main(["vet", str(arch), "--task", "cv", "--out", str(tmp_path / "m.sqlite"), "--text",
                 str(tmp_path / "no.gguf"), "--mmproj", str(tmp_path / "no-mmproj.gguf")]) == 1
    assert "no.gguf: file not found" in capsys.readouterr().err
    assert not any(p.name.startswith("m.sqlite") for p in tmp_path.iterdir())
    assert main(["export", str(tmp_path / "r.sqlite")]) == 1
    assert "nothing to export" in capsys.readouterr().err


def test_inspect_cli_on_a_real_lamost_file(spectra_dir, tmp_path, monkeypatch, capsys):
    script = tmp_path / "s.json"
    script.write_text(json.dumps([ZOOM, YES]), encoding="utf-8")
    out = tmp_path / "trace"
    f = spectra_dir / "lamost" / "spec-58397-EG014118N254444M01_sp03-031.fits"
    assert main(["inspect", str(f), "--task", "cv", "--scripted", str(script), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Check Hα." in text and "Emission at Hα." in text and "Verdict: YES" in text
    assert "Generated spectral visualization focused on wavelength range (6500, 6600) Å for Hα <b>." in text
    assert sorted(p.name for p in out.iterdir()) == ["00-full.png", "01-zoom-6500-6600.png", "prompt.txt", "trace.json"]
    trace = Trace.load(out)
    assert trace.verdict == "YES" and trace.spectrum["survey"] and trace.task_id == "cv"


def test_inspect_cli_without_verdict(tmp_path, monkeypatch, capsys):
    arch = _archive(tmp_path / "arch", 1)
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["<think>hmm</think> I am not sure."]), encoding="utf-8")
    assert main(["inspect", str(arch / "s00.csv"), "--task", "wd", "--scripted", str(script),
                 "--out", str(tmp_path / "t"), "--quiet"]) == 3
    assert "No verdict: format_error" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["[", "[]", '{"outputs": "x"}'])
def test_scripted_file_errors(tmp_path, monkeypatch, capsys, bad):
    arch = _archive(tmp_path / "arch", 1)
    script = tmp_path / "s.json"
    script.write_text(bad, encoding="utf-8")
    assert main(["inspect", str(arch / "s00.csv"), "--task", "cv", "--scripted", str(script)]) == 1
    assert str(script) in capsys.readouterr().err


def test_model_digests_for_explicit_files(tmp_path):
    import hashlib

    text, mmproj = tmp_path / "t.gguf", tmp_path / "m.gguf"
    text.write_bytes(b"text model")
    mmproj.write_bytes(b"projector")
    info = ModelInfo(model_id="x", text_path=str(text), mmproj_path=str(mmproj))
    cli_options.fill_model_digests(info)
    assert info.text_sha256 == hashlib.sha256(b"text model").hexdigest()
    assert info.mmproj_sha256 == hashlib.sha256(b"projector").hexdigest()
    from speco3.config import cache_dir

    assert len(json.loads((cache_dir() / "model-sha256.json").read_text())) == 2
    kept = ModelInfo(model_id="y", text_sha256="given", text_path=str(text))
    cli_options.fill_model_digests(kept)
    assert kept.text_sha256 == "given"

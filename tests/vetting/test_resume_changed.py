"""Resumed screening re-runs spectra whose file changed (size/mtime stamp, then sha256), and only those."""

from __future__ import annotations

import json
import os
import time

import numpy as np
from vetting_helpers import make_spectrum, pillow_render

from speco3.agent import get_task
from speco3.cli import main as cli_main
from speco3.engine.scripted import ScriptedEngine
from speco3.vetting import VettingStore
from speco3.vetting.schedulers import vet_batch
from speco3.vetting.screening import FileCheck, VetItem
from speco3_testkit.spectra import pillow_render as _pillow_render

NO = "<think>Flat.</think><answer>\\boxed{NO}</answer> No emission."
YES = "<think>Emission at Hα.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."
OLD = time.time() - 3600  # mtimes well before any stamp: stamps are trusted


def main(argv: list[str], render=_pillow_render) -> int:
    """The CLI with the small Pillow renderer, passed in as `speco3.cli.main` takes it."""
    return cli_main(argv, render=render)



def _files(folder, n=4):
    folder.mkdir()
    out = []
    for i in range(n):
        path = folder / f"f{i}.dat"
        path.write_bytes(bytes([65 + i]) * 100)
        os.utime(path, (OLD, OLD))
        spec = make_spectrum(name=path.name, seed=i)
        out.append(VetItem(key=f"{path}#0", load=lambda s=spec: s, path=str(path), name=path.name))
    return out


def test_resume_reruns_changed_files_only(tmp_path):
    items = _files(tmp_path / "a")
    store = VettingStore(tmp_path / "r.sqlite")
    task = get_task("cv")
    first = vet_batch(items, store, ScriptedEngine([NO]), task, pillow_render)
    assert first.done == 4 and len(store.file_stamps()) == 4
    p1, p2, p3 = (tmp_path / "a" / f"f{i}.dat" for i in (1, 2, 3))
    p1.write_bytes(b"Z" * 100)  # same size, new content and a new mtime: hashed, differs, screened again
    os.utime(p1, (OLD + 10, OLD + 10))
    os.utime(p2, (OLD + 20, OLD + 20))  # touched: same content
    p3.write_bytes(b"Y" * 100)  # rewritten but size and mtime kept: invisible to the stamp (documented limit)
    os.utime(p3, (OLD, OLD))
    second = vet_batch(items, store, ScriptedEngine([YES]), task, pillow_render)
    assert (second.done, second.changed, second.skipped) == (1, 1, 3)
    latest = {v.spectrum_key: v for v in store.model_verdicts("cv")}
    assert latest[items[1].key].verdict == "YES" and latest[items[2].key].verdict == "NO"
    assert len(store.model_verdicts("cv", latest=False)) == 5
    # the touched file was hashed once and re-stamped: the next resume reads no file at all
    check = FileCheck(store)
    assert all(check.digest(it.path) for it in items) and check.hashed == 0
    third = vet_batch(items, store, ScriptedEngine([YES]), task, pillow_render)
    assert (third.done, third.skipped) == (0, 4)
    store.close()


def test_recent_mtime_is_not_trusted(tmp_path):
    """A file modified within RACY_NS of its stamp is hashed again even with the same size and mtime."""
    items = _files(tmp_path / "a", n=1)
    path = items[0].path
    os.utime(path, None)  # modified now
    store = VettingStore(tmp_path / "r.sqlite")
    vet_batch(items, store, ScriptedEngine([NO]), get_task("cv"), pillow_render)
    st = os.stat(path)
    with open(path, "r+b") as fh:  # same-size rewrite within the same tick
        fh.write(b"Q")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    res = vet_batch(items, store, ScriptedEngine([YES]), get_task("cv"), pillow_render)
    assert (res.done, res.changed) == (1, 1)
    store.close()


def test_vet_cli_rescreens_an_edited_spectrum(tmp_path, monkeypatch, capsys):
    arch = tmp_path / "arch"
    arch.mkdir()
    wl = np.linspace(3700, 9100, 600)
    for i in range(4):
        np.savetxt(arch / f"s{i}.csv", np.c_[wl, 10 + 0.01 * i + 0 * wl], delimiter=",", header="wavelength,flux",
                   comments="")
        os.utime(arch / f"s{i}.csv", (OLD, OLD))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[NO]]}), encoding="utf-8")
    argv = ["vet", str(arch), "--task", "cv", "--out", str(tmp_path / "r.sqlite"), "--scripted", str(script)]
    assert main(argv) == 0
    capsys.readouterr()
    np.savetxt(arch / "s2.csv", np.c_[wl, 20 + 0 * wl], delimiter=",", header="wavelength,flux", comments="")
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["done"], summary["changed"], summary["skipped"]) == (1, 1, 3)
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skipped"] == 4

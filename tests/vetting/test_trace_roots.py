"""Trusted trace folders (docs/threat-model.md): the user's own ``vet --traces DIR`` and ``merge`` record the folder
of traces they write outside the store's folder in the user's configuration, so the report (and the app) shows
them; the same store under another account's configuration still refuses them; ``export --trace-root DIR`` reads
them there; ``/``, the home folder and relative or missing folders are never trusted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from vetting_helpers import NO, YES, ZOOM

from speco3.agent import TraceError
from speco3.cli import main as cli_main
from speco3.vetting import VettingStore
from speco3.vetting.trace_roots import (
    MAX_ROOTS,
    RootRefused,
    TraceOutside,
    check_root,
    roots_file,
    trust_root,
    trusted_roots,
)
from speco3_testkit.spectra import pillow_render

REFUSED = "not shown: trace folder outside the store"


def main(argv: list[str]) -> int:
    return cli_main(argv, render=pillow_render)


def _archive(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True)
    wl = np.linspace(3700, 9100, 600)
    for i in range(n):
        flux = 10 + (5 if i % 2 else 0) * np.exp(-((wl - 6564.6) / 8) ** 2) + 0.01 * i
        np.savetxt(folder / f"s{i:02d}.csv", np.c_[wl, flux], delimiter=",", header="wavelength,flux", comments="")
    return folder


def _vet(archive: Path, store: Path, tmp_path: Path, *extra: str) -> int:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[ZOOM, YES], [NO]]}), encoding="utf-8")
    return main(["vet", str(archive), "--task", "cv", "--out", str(store), "--scripted", str(script), *extra])


def _report(store_path: Path, out: Path, *extra: str) -> str:
    assert main(["export", str(store_path), "--html", str(out), "--force", *extra]) == 0
    return out.read_text(encoding="utf-8")


def _fresh_config(monkeypatch, tmp_path: Path, name: str) -> None:
    """Another account: its own config (and home) folder, without this one's trusted trace folders."""
    monkeypatch.setenv("SPECO3_CONFIG_DIR", str(tmp_path / name / "config"))
    monkeypatch.setenv("HOME", str(tmp_path / name / "home"))
    (tmp_path / name / "home").mkdir(parents=True)


def test_vet_traces_outside_are_shown_here_refused_elsewhere_and_read_with_trace_root(tmp_path, monkeypatch,
                                                                                      capsys):
    arch = _archive(tmp_path / "arch")
    night = tmp_path / "night"
    night.mkdir()
    scratch = tmp_path / "scratch" / "traces"  # not below the store's folder
    assert _vet(arch, night / "r.sqlite", tmp_path, "--traces", str(scratch)) == 0
    err = capsys.readouterr().err
    assert f"{scratch.resolve()} recorded as a trusted trace folder" in err
    assert trusted_roots() == [scratch.resolve()]
    with VettingStore(night / "r.sqlite", readonly=True) as s:
        rows = s.model_verdicts("cv")
        assert len(rows) == 3 and all(Path(r.trace_dir).is_relative_to(scratch) for r in rows)
        assert {s.load_trace(r.trace_dir).verdict for r in rows} == {"YES", "NO"}
    html = _report(night / "r.sqlite", tmp_path / "report.html")
    assert REFUSED not in html and "data:image/png;base64," in html
    # a second run into the same folder records nothing new
    assert _vet(arch, night / "r.sqlite", tmp_path, "--traces", str(scratch), "--no-resume") == 0
    assert "recorded as a trusted" not in capsys.readouterr().err and trusted_roots() == [scratch.resolve()]

    # the store copied to another account: its configuration trusts nothing, the traces are refused
    copied = tmp_path / "copy" / "r.sqlite"
    copied.parent.mkdir()
    shutil.copy(night / "r.sqlite", copied)
    _fresh_config(monkeypatch, tmp_path, "other")
    assert trusted_roots() == []
    with VettingStore(copied, readonly=True) as s:
        for r in s.model_verdicts("cv"):
            with pytest.raises(TraceOutside, match=REFUSED) as info:
                s.load_trace(r.trace_dir)
            assert info.value.suggested == scratch.resolve()  # ROOT of ROOT/TASK/NAME-HASH
    html = _report(copied, tmp_path / "report2.html")
    assert html.count(REFUSED) == 3
    # that account names the folder for one report: read, and nothing recorded
    html = _report(copied, tmp_path / "report3.html", "--trace-root", str(scratch))
    assert REFUSED not in html and trusted_roots() == [] and not roots_file().exists()


def test_a_merged_store_kept_elsewhere_shows_its_shards_traces(tmp_path, capsys, monkeypatch):
    arch = _archive(tmp_path / "arch", 4)
    shards = tmp_path / "runs"
    shards.mkdir()
    stores = [shards / f"part{i}.sqlite" for i in range(2)]
    for i, store in enumerate(stores):
        assert _vet(arch, store, tmp_path, "--shard", f"{i}/2") == 0
    assert trusted_roots() == []  # the default traces folder is beside each store: nothing to record
    out = tmp_path / "kept" / "all.sqlite"  # not a folder above the shards
    out.parent.mkdir()
    capsys.readouterr()
    assert main(["merge", str(out), *map(str, stores)]) == 0
    err = capsys.readouterr().err
    expected = {(shards / f"part{i}_traces").resolve() for i in range(2)}
    assert set(trusted_roots()) == expected and err.count("recorded as a trusted trace folder") == 2
    with VettingStore(out, readonly=True) as s:
        assert len({s.load_trace(r.trace_dir).verdict for r in s.model_verdicts("cv")}) == 2
    # the merged store on another account: refused there
    _fresh_config(monkeypatch, tmp_path, "other")
    with VettingStore(out, readonly=True) as s, pytest.raises(TraceError, match=REFUSED):
        s.load_trace(s.model_verdicts("cv")[0].trace_dir)


def test_root_home_relative_and_missing_folders_are_never_trusted(tmp_path, capsys, monkeypatch):
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for bad, why in (("/", "root"), (str(Path.home()), "the home folder"),
                     (str(Path.home().parent), "above the home folder"), ("relative/dir", "absolute path"),
                     (str(tmp_path / "gone"), "not an existing folder"), ("", "not a folder")):
        with pytest.raises(RootRefused, match=why):
            trust_root(bad)
    assert not roots_file().exists()
    assert main(["export", "x.sqlite", "--html", str(tmp_path / "r.html"), "--trace-root", "/"]) != 0
    assert "--trace-root /: the file system's root" in capsys.readouterr().err
    # `vet --traces ~`: the run goes on, and says its traces will not be shown
    arch = _archive(tmp_path / "arch", 1)
    assert _vet(arch, tmp_path / "night" / "r.sqlite", tmp_path, "--traces", str(home)) == 0
    assert "will not be shown by the app or the HTML report" in capsys.readouterr().err
    assert trusted_roots() == []


def test_the_list_is_bounded_and_a_hand_edited_file_is_checked(tmp_path):
    folders = [tmp_path / f"t{i}" for i in range(MAX_ROOTS + 6)]
    for f in folders:
        f.mkdir()
        trust_root(f)
    assert trusted_roots() == [f.resolve() for f in folders[-MAX_ROOTS:]]  # the oldest dropped
    trust_root(folders[-1] / ".")  # inside one trusted already: nothing added
    assert len(json.loads(roots_file().read_text())["roots"]) == MAX_ROOTS
    roots_file().write_text(json.dumps({"roots": ["/", str(Path.home()), "rel", 7, str(folders[0])]}))
    assert trusted_roots() == [folders[0].resolve()]
    roots_file().write_text("{broken")
    assert trusted_roots() == []
    assert check_root(str(folders[1])) == folders[1].resolve()

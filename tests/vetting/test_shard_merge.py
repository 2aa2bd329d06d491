"""``vet --shard I/N`` splits an archive deterministically; ``spec-o3 merge`` joins the stores (issue #14)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3

import numpy as np
import pytest
from vetting_helpers import NO, YES, items, pillow_render

from speco3.agent import get_task
from speco3.cli import main as cli_main
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import StoreError
from speco3.vetting import Decision, VettingStore
from speco3.vetting.merge import merge_stores
from speco3.vetting.schedulers import vet_batch
from speco3.vetting.screening import in_shard, parse_shard
from speco3_testkit.spectra import pillow_render as _pillow_render


def main(argv: list[str], render=_pillow_render) -> int:
    """The CLI with the small Pillow renderer, passed in as `speco3.cli.main` takes it."""
    return cli_main(argv, render=render)



def test_shards_partition_any_key_set_the_same_way_everywhere():
    keys = [f"lamost/{p}/spec-{i:05d}.fits.gz#0" for p in ("a", "b") for i in range(600)]
    for n in (1, 2, 7):
        shards = [{k for k in keys if in_shard(k, (i, n))} for i in range(n)]
        assert set().union(*shards) == set(keys) and sum(map(len, shards)) == len(keys)  # no overlap, no gap
        assert min(map(len, shards)) > 0.7 * len(keys) / n  # roughly even
    # the share of a key does not depend on which other keys are listed, or in what order
    part = {k for k in reversed(keys[::3]) if in_shard(k, (2, 7))}
    assert part == {k for k in keys if in_shard(k, (2, 7))} & set(keys[::3])
    assert parse_shard("3/8") == (3, 8) and parse_shard(" 0 / 1 ") == (0, 1)
    for bad in ("8/8", "1/0", "-1/4", "a/b", "2", ""):
        with pytest.raises(ValueError, match="I/N"):
            parse_shard(bad)


def _archive(folder, n=20):
    folder.mkdir(parents=True)
    wl = np.linspace(3700, 9100, 400)
    for i in range(n):
        np.savetxt(folder / f"s{i:02d}.csv", np.c_[wl, 10 + 0.1 * i + 0 * wl], delimiter=",",
                   header="wavelength,flux", comments="")
    return folder


def _vet(archive, store, script, *extra):
    return main(["vet", str(archive), "--task", "cv", "--out", str(store), "--scripted", str(script), *extra])


def _rel_keys(store_path, root):
    with VettingStore(store_path, readonly=True) as s:
        return {os.path.relpath(v.spectrum_key, root) for v in s.model_verdicts("cv")}


def test_vet_shards_split_an_archive_and_merge_joins_them(tmp_path, monkeypatch, capsys):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[NO]]}), encoding="utf-8")
    arch = _archive(tmp_path / "arch")
    stores = [tmp_path / f"shard{i}.sqlite" for i in range(3)]
    for i, store in enumerate(stores):
        assert _vet(arch, store, script, "--shard", f"{i}/3") == 0
    parts = [_rel_keys(s, arch) for s in stores]
    assert set().union(*parts) == {f"s{i:02d}.csv#0" for i in range(20)} and sum(map(len, parts)) == 20
    # another machine sees the archive under another path: the same spectra fall in shard 1
    other = shutil.copytree(arch, tmp_path / "mnt" / "survey")
    assert _vet(other, tmp_path / "elsewhere.sqlite", script, "--shard", "1/3") == 0
    assert _rel_keys(tmp_path / "elsewhere.sqlite", other) == parts[1]
    assert main(["vet", str(arch), "--task", "cv", "--out", str(tmp_path / "x.sqlite"), "--shard", "3/3"]) == 1
    assert "0 <= I < N" in capsys.readouterr().err
    assert not (tmp_path / "x.sqlite").exists()

    def inputs():  # every file beside the input stores (-wal and -shm included), with its digest
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir() if p.is_file()}

    before = inputs()
    out = tmp_path / "merged" / "all.sqlite"
    assert main(["merge", str(out), *map(str, stores)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["verdicts_added"], report["verdicts_duplicate"], report["written"]) == (20, 0, True)
    assert inputs() == before  # the inputs were only read: no byte changed, no file added
    with VettingStore(out, readonly=True) as merged:
        runs = merged.model_verdicts("cv")
        assert len(runs) == 20 and all(v.file_sha256 for v in runs)
        assert all(os.path.isabs(v.trace_dir) and os.path.isdir(v.trace_dir) for v in runs)  # traces resolved
        assert len(merged.file_stamps()) == 20
    # merging a shard again adds nothing: every run is a duplicate
    assert main(["merge", str(out), str(stores[0])]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["verdicts_added"] == 0 and again["verdicts_duplicate"] == len(parts[0])
    with VettingStore(out, readonly=True) as merged:
        assert len(merged.model_verdicts("cv", latest=False)) == 20


def _store_with(path, decisions, runs=()):
    store = VettingStore(path)
    if runs:
        vet_batch(runs, store, ScriptedEngine([YES]), get_task("cv"), pillow_render)
    for key, value, vetter in decisions:
        mv = store.latest_model_verdict(key, "cv")
        store.record_decision(Decision(key, "cv", value, vetter=vetter, model_verdict_seen=mv and mv.verdict,
                                       model_verdict_id=mv and mv.id))
    store.close()
    return path


def test_conflicting_decisions_are_reported_not_resolved(tmp_path, capsys):
    shared = items(3)
    a = _store_with(tmp_path / "a.sqlite", [("/data/spec00.fits#0", "YES", "Ana"),
                                            ("/data/spec01.fits#0", "NO", "Ana")], runs=shared[:2])
    b = _store_with(tmp_path / "b.sqlite", [("/data/spec00.fits#0", "NO", "Bo"),
                                            ("/data/spec02.fits#0", "YES", "Bo")], runs=shared[2:])
    out = tmp_path / "out.sqlite"
    assert main(["merge", str(out), str(a), str(b)]) == 4
    err = capsys.readouterr().err
    assert "conflict: /data/spec00.fits#0 (task cv): YES by Ana" in err and "NO by Bo" in err
    assert "nothing written" in err and not out.exists()
    report = merge_stores(out, [a, b], on_conflict="latest")  # an explicit choice: the decision made last
    assert report.written and len(report.conflicts) == 1
    with VettingStore(out, readonly=True) as merged:
        assert merged.decision("/data/spec00.fits#0", "cv").decision == "NO"
        assert [d.decision for d in merged.decision_history("/data/spec00.fits#0", "cv")] == ["YES", "NO"]
        # each decision still points at the model run its vetter saw, under the run's new id
        for d in merged.decisions("cv"):
            seen = [v for v in merged.model_verdicts("cv", latest=False) if v.id == d.model_verdict_id]
            if d.spectrum_key != "/data/spec00.fits#0" or d.vetter == "Ana":
                assert seen and seen[0].spectrum_key == d.spectrum_key


def test_a_store_vetted_on_after_a_copy_supersedes_rather_than_conflicts(tmp_path):
    a = _store_with(tmp_path / "a.sqlite", [("/data/spec00.fits#0", "YES", "Ana")])
    b = tmp_path / "b.sqlite"
    shutil.copyfile(a, b)
    with VettingStore(b) as store:
        store.record_decision(Decision("/data/spec00.fits#0", "cv", "NO", vetter="Ana", comment="second look"))
    report = merge_stores(tmp_path / "out.sqlite", [a, b])
    assert report.written and report.conflicts == [] and report.decisions_duplicate == 1
    with VettingStore(tmp_path / "out.sqlite", readonly=True) as merged:
        assert merged.decision("/data/spec00.fits#0", "cv").comment == "second look"


def test_a_failed_merge_leaves_out_unchanged(tmp_path):
    out = _store_with(tmp_path / "out.sqlite", [("/data/spec00.fits#0", "YES", "Ana")], runs=items(2))
    good = _store_with(tmp_path / "good.sqlite", [("/data/spec05.fits#0", "NO", "Bo")], runs=items(2, prefix="g"))
    # a damaged input: the store's tables without their checks, holding a decision the schema forbids
    bad = tmp_path / "bad.sqlite"
    shutil.copyfile(good, bad)
    db = sqlite3.connect(bad)
    db.executescript("ALTER TABLE decisions RENAME TO d_old; CREATE TABLE decisions AS SELECT * FROM d_old; "
                     "DROP TABLE d_old; INSERT INTO decisions (id, spectrum_key, task, decision, flags, comment, "
                     "vetter, decided_at) VALUES (99, '/data/z.fits#0', 'cv', 'MAYBE', '[]', '', 'Cy', '2030');")
    db.close()
    with VettingStore(out, readonly=True) as s:
        before = ([v.to_dict() for v in s.model_verdicts(latest=False)], [d.to_dict() for d in s.decisions()])
    with pytest.raises(StoreError, match="merge not written, the store is unchanged"):
        merge_stores(out, [good, bad])
    with VettingStore(out, readonly=True) as s:
        assert ([v.to_dict() for v in s.model_verdicts(latest=False)], [d.to_dict() for d in s.decisions()]) == before
    with pytest.raises(StoreError, match="cannot also be an input"):
        merge_stores(out, [good, out])
    with pytest.raises(StoreError, match="no such vetting store"):
        merge_stores(out, [tmp_path / "missing.sqlite"])


def test_an_empty_shard_prints_the_same_summary_as_a_run(tmp_path, monkeypatch, capsys):
    """A SLURM array whose shard gets no spectrum still prints one JSON summary (zero counts) and exits 0."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [[NO]]}), encoding="utf-8")
    arch = _archive(tmp_path / "arch", n=1)
    key_shard = next(i for i in range(7) if in_shard("s00.csv#0", (i, 7)))
    empty = (key_shard + 1) % 7
    capsys.readouterr()
    assert _vet(arch, tmp_path / "e.sqlite", script, "--shard", f"{empty}/7") == 0
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])
    assert summary["total"] == summary["done"] == summary["failed"] == 0 and summary["shard"] == f"{empty}/7"
    assert f"nothing to screen in shard {empty}/7" in out.err
    with VettingStore(tmp_path / "e.sqlite", readonly=True) as s:  # the store it names exists (empty): merge takes it
        assert s.model_verdicts("cv") == []
    assert _vet(arch, tmp_path / "f.sqlite", script, "--shard", f"{key_shard}/7") == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["done"] == 1


# what differs between a sharded run merged and the same run unsharded: when things ran, how long, where they were
# written, and the row ids (renumbered in time order)
_VOLATILE = {"id", "verdict_id", "model_verdict_id", "created_at", "decided_at", "updated_at", "stamped_ns",
             "seconds", "trace_dir", "app_version"}


def _tables(path):
    """Every table of a store as a sorted list of rows without the volatile columns; rollouts keyed by their run's
    spectrum (ids differ), engine settings parsed (their shard differs), state without the shard's own keys."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                          "AND name != 'sqlite_sequence' ORDER BY name")]
        runs = {r["id"]: r["spectrum_key"] for r in db.execute("SELECT id, spectrum_key FROM model_verdicts")}
        out = {}
        for name in names:
            rows = []
            for r in db.execute(f"SELECT * FROM {name}"):  # noqa: S608 - table names from the schema
                d = {k: v for k, v in dict(r).items() if k not in _VOLATILE}
                if name == "rollouts":
                    d["run"] = runs[r["verdict_id"]]
                if name == "file_stamps":
                    d.pop("mtime_ns")
                rows.append(json.dumps(d, sort_keys=True, default=str))
            out[name] = sorted(rows)
        return out
    finally:
        db.close()


def test_a_sharded_campaign_merged_equals_the_unsharded_one(tmp_path, capsys):
    """Every table of ``merge`` over ``vet --shard 0/2`` and ``1/2`` with rollouts holds what the unsharded run holds
    (times, paths and ids aside): runs with their fold and provenance, every rollout, traces; re-merging adds none."""
    script = tmp_path / "script.json"  # rollouts of a spectrum differ (picked by seed): folds vary
    script.write_text(json.dumps({"scripts": [[YES], [NO], ["no answer at all"]], "select": "seed"}),
                      encoding="utf-8")
    arch = _archive(tmp_path / "arch", n=6)
    whole, shards = tmp_path / "whole.sqlite", [tmp_path / f"shard{i}.sqlite" for i in range(2)]
    assert _vet(arch, whole, script, "--rollouts", "3") == 0
    for i, store in enumerate(shards):
        assert _vet(arch, store, script, "--rollouts", "3", "--shard", f"{i}/2") == 0
    merged = tmp_path / "merged" / "all.sqlite"
    capsys.readouterr()
    assert main(["merge", str(merged), *map(str, shards)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["rollouts_added"] == 18 and report["traces_missing"] == 0
    a, b = _tables(whole), _tables(merged)
    for t in (a, b):  # the state a shard keeps about itself is not the campaign's
        t["state"] = [s for s in t["state"] if "shard" not in s]
        t["model_verdicts"] = [json.dumps({**json.loads(r), "engine_settings": {
            k: v for k, v in json.loads(json.loads(r)["engine_settings"]).items() if k != "shard"}}, sort_keys=True)
            for r in t["model_verdicts"]]
    assert set(a) == set(b)
    for name in a:
        assert a[name] == b[name], name
    assert len(b["rollouts"]) == 18 and len(b["model_verdicts"]) == 6
    with VettingStore(merged, readonly=True) as s:  # every rollout's trace is found from the merged store
        for v in s.model_verdicts("cv"):
            rolls = s.rollouts(v.id)
            assert len(rolls) == 3 and all(os.path.isdir(r.trace_dir) for r in rolls)
    # merged again (into itself from both shards): nothing added, nothing lost
    assert main(["merge", str(merged), *map(str, shards)]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["verdicts_added"] == again["rollouts_added"] == 0 and again["verdicts_duplicate"] == 6
    assert _tables(merged)["rollouts"] == b["rollouts"]
    # the report of the merged store shows the rollouts side by side
    html = tmp_path / "report.html"
    assert main(["export", str(merged), "--html", str(html)]) == 0
    text = html.read_text(encoding="utf-8")
    assert text.count("Rollout 3 · seed") == 6

"""``--rollouts auto`` from the command line and in the records: ``inspect --json``, the store (schema 3, a
schema-2 store migrated with every row), the exports, and a resumed ``vet`` that keeps each spectrum's rollouts."""

from __future__ import annotations

import csv
import json
import sqlite3
from contextlib import nullcontext

import pytest
from astropy.table import Table
from vetting_helpers import NO, YES, items, pillow_render

from speco3.agent import get_task
from speco3.agent.adaptive import AdaptiveRule
from speco3.agent.confidence import Thresholds
from speco3.agent.rollouts import RolloutPlan
from speco3.agent.settings import RolloutSettings
from speco3.cli import main as cli_main
from speco3.engine.base import EngineSettings
from speco3.engine.scripted import ScriptedEngine
from speco3.vetting import SCHEMA_VERSION, ModelVerdict, VettingStore
from speco3.vetting.schedulers import vet_batch
from speco3.vetting.schema import MIGRATIONS
from speco3_testkit.spectra import write_csv_spectrum

SURE = {"YES": [["YES", 0.97], ["NO", 0.03]], "NO": [["NO", 0.97], ["YES", 0.03]]}


def main(argv: list[str]) -> int:
    return cli_main(argv, render=pillow_render)




def _script(tmp_path, scripts, name="script.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"scripts": scripts, "select": "seed", "alternatives": SURE}), encoding="utf-8")
    return path


def test_inspect_auto_json_stops_a_clear_spectrum_at_two(tmp_path, capsys):
    f = write_csv_spectrum(tmp_path / "a")
    out = tmp_path / "trace"
    rc = main(["inspect", str(f), "--task", "cv", "--scripted", str(_script(tmp_path, [[YES]])), "--out", str(out),
               "--rollouts", "auto", "--json"])
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert rc == 0
    assert (report["k_used"], report["k_max"], report["stop_reason"]) == (2, 8, "agreed")
    assert report["k"] == 2 and report["verdict"] == "YES" and not report["abstained"]
    assert len(report["rollout_details"]) == 2 and sorted(p.name for p in out.glob("r*")) == ["r00", "r01"]
    assert "up to 8 rollouts (auto)" in captured.err


def test_inspect_auto_split_runs_to_the_budget(tmp_path, capsys):
    f = write_csv_spectrum(tmp_path / "a")
    rc = main(["inspect", str(f), "--task", "cv", "--scripted", str(_script(tmp_path, [[YES], [NO]])),
               "--out", str(tmp_path / "t"), "--rollouts", "auto", "--max-rollouts", "4"])
    text = capsys.readouterr().out
    assert rc == 3  # a tie: no verdict
    assert "4 of up to 4 rollouts (budget)" in text and "ABSTAINED (a tie, 2 YES / 2 NO); outcome tie: 2 YES / 2 NO" in text


@pytest.mark.parametrize("argv, message", [(["--rollouts", "many"], "'auto'"),
                                          (["--rollouts", "auto", "--max-rollouts", "0"], "--max-rollouts"),
                                          (["--rollouts", "auto", "--temperature", "0"], "temperature")])
def test_bad_auto_options_are_refused_clearly(tmp_path, capsys, argv, message):
    f = write_csv_spectrum(tmp_path / "a")
    with pytest.raises(SystemExit) if argv[1] == "many" else nullcontext():
        rc = main(["inspect", str(f), "--task", "cv", "--scripted", str(_script(tmp_path, [[YES]])), *argv])
        assert rc != 0
    assert message in capsys.readouterr().err


def test_vet_auto_stores_and_exports_the_stop_and_resumes(tmp_path, capsys):
    arch = tmp_path / "arch"
    for i in range(2):
        write_csv_spectrum(arch, i)
    db = tmp_path / "r.sqlite"
    script = _script(tmp_path, [[YES]])
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(script),
                 "--rollouts", "auto"]) == 0
    capsys.readouterr()
    with VettingStore(db, readonly=True) as s:
        runs = s.model_verdicts("cv")
        assert [(v.rollouts, v.k_used, v.k_max, v.stop_reason) for v in runs] == [(2, 2, 8, "agreed")] * 2
        assert all(len(s.rollouts(v.id)) == 2 for v in runs)
    # resumed: every spectrum is done with this budget, whatever number of rollouts it used
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted", str(script),
                 "--rollouts", "auto"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["skipped"] == 2 and summary["done"] == 0
    assert main(["export", str(db), "--csv", str(tmp_path / "e.csv")]) == 0
    with open(tmp_path / "e.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["k_used"], r["k_max"], r["stop_reason"]) for r in rows] == [("2", "8", "agreed")] * 2
    for ext in ("vot", "fits"):  # the same table in every format
        assert main(["export", str(db), f"--{'votable' if ext == 'vot' else ext}", str(tmp_path / f"e.{ext}")]) == 0
        t = Table.read(tmp_path / f"e.{ext}")
        assert [(int(r["k_used"]), int(r["k_max"]), str(r["stop_reason"])) for r in t] == [(2, 8, "agreed")] * 2


def test_fixed_runs_record_fixed(tmp_path, capsys):
    arch = tmp_path / "arch"
    write_csv_spectrum(arch, 0)
    db = tmp_path / "r.sqlite"
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--scripted",
                 str(_script(tmp_path, [[YES], [NO]])), "--rollouts", "3"]) == 0
    with VettingStore(db, readonly=True) as s:
        (v,) = s.model_verdicts("cv")
    assert (v.rollouts, v.k_max, v.stop_reason) == (3, 3, "fixed")


def test_schema2_store_migrates_keeping_every_row(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    for version in (1, 2):
        for stmt in MIGRATIONS[version]:
            con.execute(stmt)
    con.execute("PRAGMA user_version=2")
    con.execute("INSERT INTO model_verdicts (spectrum_key, task, verdict, outcome, model_id, prompt_version, "
                "engine_settings, turns, created_at, rollouts, p_yes, outcomes) VALUES ('a#0', 'cv', 'NO', 'NO', 'm', "
                "'p', '{}', 1, 't0', 4, 0.25, '[\"NO\", \"NO\", \"YES\", \"NO\"]')")
    con.execute("INSERT INTO rollouts VALUES (1, 0, 'NO', 'NO', NULL, 0, 1.0, 1.0, 0, 1, 5, 0, 0.1, '', '', NULL, '[]')")
    con.commit()
    con.close()
    with VettingStore(path, readonly=True) as ro:  # read as it is
        (old,) = ro.model_verdicts()
        assert (old.rollouts, old.k_max, old.stop_reason) == (4, None, None)
    with VettingStore(path) as s:
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        (old,) = s.model_verdicts()
        assert (old.verdict, old.p_yes, old.outcomes, old.k_max, old.stop_reason) == (
            "NO", 0.25, ["NO", "NO", "YES", "NO"], None, None)
        assert len(s.rollouts(old.id)) == 1
        assert s.done_files("cv", "m", "p", rollouts=4) == {"a#0": None}  # an old K=4 row still counts as K=4
        new = ModelVerdict("b#0", "cv", "YES", "YES", model_id="m", prompt_version="p", rollouts=2, k_max=8,
                           stop_reason="agreed")
        s.record_model_verdict(new)
    with VettingStore(path) as s:
        assert [(v.k_used, v.k_max, v.stop_reason) for v in s.model_verdicts()] == [(4, None, None), (2, 8, "agreed")]
        assert s.done_files("cv", "m", "p", rollouts=8) == {"b#0": None}


@pytest.mark.parametrize("thresholds, k_used", [(None, 6), (Thresholds(0.9, 0.9), 2)])
def test_the_screening_core_runs_the_rounds_with_its_thresholds(tmp_path, thresholds, k_used):
    # seeds alternate YES / NO: by default 3:3 of 6 is the first certain abstention; at min_agreement 0.9 a 1:1
    # split can no longer reach it, so the first round is certain already
    engine = ScriptedEngine(scripts=[[YES], [NO]], select="seed", alternatives=SURE,
                            settings=EngineSettings(top_logprobs=4))
    streamed: set[int] = set()
    with VettingStore(tmp_path / "r.sqlite") as store:
        res = vet_batch(items(1), store, engine, get_task("cv"), pillow_render, plan=RolloutPlan.auto(),
                        thresholds=thresholds, trace_root=tmp_path / "tr",
                        on_token=lambda i, text: streamed.add(i))
        assert res.done == 1 and res.abstained == 1
        (v,) = store.model_verdicts("cv")
        assert (v.rollouts, v.k_max, v.stop_reason) == (k_used, 8, "certain")
        assert [r.idx for r in store.rollouts(v.id)] == list(range(k_used))  # only the rollouts that ran
        assert streamed == set(range(k_used))  # every round's rollouts streamed under their own index
    folders = sorted(p.name for p in (tmp_path / "tr" / "cv").iterdir() for p in p.glob("r*"))
    assert folders == [f"r{i:02d}" for i in range(k_used)]


def test_auto_settings_make_the_adaptive_plan():
    plan = RolloutSettings(5, seed=3, auto=True).plan()
    assert plan is not None and plan.adaptive == AdaptiveRule(k_min=2, k_max=5) and plan.k == 5
    assert plan.temperature == 1.0 and plan.seed == 3  # the training temperature, as for K > 1
    assert RolloutSettings(1, auto=True).plan().adaptive.k_min == 1  # a budget of one runs one
    assert RolloutSettings(4, auto=True).top_logprobs() > 0 and RolloutSettings(1).top_logprobs() == 0
    with pytest.raises(ValueError, match="temperature"):
        RolloutSettings(4, temperature=0.0, auto=True).plan()

"""K rollouts in the vetting store: every rollout and its trace stored, the aggregate on the verdict row, the
schema-1 store migrated without losing anything, resume by K."""

from __future__ import annotations

import sqlite3

import pytest
from vetting_helpers import NO, YES, ZOOM, items, pillow_render

from speco3.agent import Trace, get_task
from speco3.agent.confidence import Thresholds
from speco3.agent.rollouts import RolloutPlan
from speco3.engine.base import EngineSettings
from speco3.engine.scripted import ScriptedEngine
from speco3.vetting import SCHEMA_VERSION, Decision, ModelVerdict, VettingStore
from speco3.vetting.schedulers import vet_batch
from speco3.vetting.schema import MIGRATIONS

ZOOM2 = ZOOM.replace("[6500, 6600]", "[4600, 4750]").replace("Hα <b>", "He II")
ALTS = {"YES": [["YES", 0.9], ["NO", 0.1]], "NO": [["NO", 0.7], ["YES", 0.3]]}


def engine(scripts):
    return ScriptedEngine(scripts=scripts, select="seed", alternatives=ALTS, settings=EngineSettings(top_logprobs=4))


def vet_one(item, store, engine, task, render, **kw):
    """One spectrum through the screening core; its verdict row."""
    res = vet_batch([item], store, engine, task, render, resume=False, **kw)
    assert res.done == 1
    return store.model_verdicts(task.id, latest=True)[-1]


def test_every_rollout_stored_with_its_trace_and_windows(tmp_path):
    eng = engine([[ZOOM, YES], [ZOOM2, ZOOM, NO], ["garbage, no tags"], [YES]])
    with VettingStore(tmp_path / "r.sqlite") as store:
        v = vet_one(items(1)[0], store, eng, get_task("cv"), pillow_render, trace_root=tmp_path / "tr",
                    plan=RolloutPlan(k=4, temperature=0.9, seed=10))
        rs = store.rollouts(v.id)
        again = store.latest_model_verdict(v.spectrum_key, "cv")
    # seeds 10..13 pick scripts 2, 3, 0, 1
    assert [r.outcome for r in rs] == ["format_error", "YES", "YES", "NO"]
    assert [(r.seed, r.temperature) for r in rs] == [(10, 0.9), (11, 0.9), (12, 0.9), (13, 0.9)]
    assert rs[2].windows == [[6500, 6600, "Hα <b>"]] and rs[3].windows == [[4600, 4750, "He II"], [6500, 6600, "Hα <b>"]]
    assert [r.p_yes_token for r in rs] == [None, pytest.approx(0.9), pytest.approx(0.9), pytest.approx(0.3)]
    # the majority is YES, but 2 of 3 answers is split evidence: the run came to an abstention, named so
    assert (again.rollouts, again.verdict, again.outcome) == (4, "YES", "abstained")
    assert again.p_yes == pytest.approx(2 / 3) and again.agreement == pytest.approx(2 / 3)
    assert again.p_yes_token == pytest.approx(0.7) and again.abstained is True and again.format_failures == 1
    assert again.outcomes == ["format_error", "YES", "YES", "NO"]
    assert again.trace_dir == rs[1].trace_dir  # the first rollout that gave the majority verdict
    for r in rs:  # each rollout's trace on disk, with its own sampling
        t = Trace.load(r.trace_dir)
        assert t.outcome.value == r.outcome and t.settings["sampling"]["seed"] == r.seed
        assert len(t.tool_steps()) == len(r.windows)


def test_greedy_single_run_keeps_its_place(tmp_path):
    eng = ScriptedEngine(scripts=[[ZOOM, YES]])
    with VettingStore(tmp_path / "r.sqlite") as store:
        v = vet_one(items(1)[0], store, eng, get_task("cv"), pillow_render, trace_root=tmp_path / "tr")
        (r,) = store.rollouts(v.id)
    assert eng.samplings[0].temperature == 0.0
    assert (v.rollouts, v.p_yes, v.agreement, v.abstained, v.p_yes_token) == (1, 1.0, 1.0, False, None)
    assert r.trace_dir == v.trace_dir and not v.trace_dir.endswith("r00")  # K=1: the folder as before


def test_thresholds_reach_the_row(tmp_path):
    with VettingStore(tmp_path / "r.sqlite") as store:
        v = vet_one(items(1)[0], store, engine([[YES], [YES], [NO]]), get_task("cv"), pillow_render,
                    plan=RolloutPlan(k=3, temperature=1.0), thresholds=Thresholds(min_agreement=0.6))
    assert v.p_yes == pytest.approx(2 / 3) and v.abstained is False


def test_resume_counts_the_number_of_rollouts(tmp_path):
    task = get_task("cv")
    with VettingStore(tmp_path / "r.sqlite") as store:
        vet_batch(items(2), store, engine([[YES]]), task, pillow_render)
        again = vet_batch(items(2), store, engine([[YES]]), task, pillow_render)
        assert again.skipped == 2
        k3 = vet_batch(items(2), store, engine([[YES], [NO]]), task, pillow_render, plan=RolloutPlan(k=3))
        assert k3.done == 2 and k3.skipped == 0
        assert vet_batch(items(2), store, engine([[YES]]), task, pillow_render, plan=RolloutPlan(k=3)).skipped == 2
        assert {v.rollouts for v in store.model_verdicts()} == {3}


def test_schema1_store_opens_migrated_and_keeps_everything(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    for stmt in MIGRATIONS[1]:
        con.execute(stmt)
    con.execute("PRAGMA user_version=1")
    con.execute("INSERT INTO model_verdicts (spectrum_key, task, verdict, outcome, model_id, prompt_version, "
                "engine_settings, turns, created_at) VALUES ('a#0', 'cv', 'YES', 'YES', 'm', 'p', '{}', 2, 't0')")
    con.execute("INSERT INTO decisions (spectrum_key, task, decision, flags, comment, vetter, decided_at) "
                "VALUES ('a#0', 'cv', 'NO', '[\"blend\"]', 'kept', 'ana', 't1')")
    con.commit()
    con.close()
    with VettingStore(path, readonly=True) as ro:  # read-only: read as it is, nothing written
        (old,) = ro.model_verdicts()
        assert old.verdict == "YES" and old.rollouts is None and ro.rollouts(old.id) == []
    with VettingStore(path) as s:
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        (old,) = s.model_verdicts()
        assert (old.verdict, old.turns, old.p_yes, old.abstained, old.outcomes) == ("YES", 2, None, None, None)
        d = s.decision("a#0", "cv")
        assert (d.decision, d.flags, d.comment) == ("NO", ["blend"], "kept")
        new = ModelVerdict("b#0", "cv", "NO", "NO", model_id="m", prompt_version="p")
        s.record_model_verdict(new)
        s.record_decision(Decision("b#0", "cv", "YES"))
    with VettingStore(path) as s:  # opened again: nothing migrates twice
        assert len(s.model_verdicts()) == 2 and len(s.decisions()) == 2

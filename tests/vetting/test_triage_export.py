"""Triage orders by hand; exports (CSV, VOTable, FITS) carry the confidence; the HTML report shows the rollouts
side by side with the windows each asked for."""

from __future__ import annotations

import numpy as np
import pytest
from astropy.table import Table
from vetting_helpers import NO, YES, ZOOM, items, pillow_render

from speco3.agent import get_task
from speco3.agent.rollouts import RolloutPlan
from speco3.engine.scripted import ScriptedEngine
from speco3.vetting import ModelVerdict, VettingStore
from speco3.vetting.export import export, export_rows
from speco3.vetting.report import write_report
from speco3.vetting.schedulers import vet_batch
from speco3.vetting.triage import triage

ZOOM2 = ZOOM.replace("[6500, 6600]", "[4600, 4750]").replace("Hα <b>", "He II 4686")


def row(key, p, token=None, abstained=False):
    return {"key": key, "p_yes": p, "p_yes_token": token, "abstained": abstained}


ROWS = [row("a", 0.5, abstained=True), row("b", 1.0, 0.8), row("c", None, abstained=True), row("d", 0.0),
        row("e", 2 / 3, abstained=True), row("f", 1.0, 0.95), row("g", 1 / 3)]


def test_order_likely_positives_first():
    assert [r["key"] for r in triage(ROWS, "p_yes")] == ["f", "b", "e", "a", "g", "d", "c"]


def test_order_most_uncertain_first():
    # 0.5; then 2/3 and 1/3 (equally far, incoming order kept); then the sure ones; unscored last
    assert [r["key"] for r in triage(ROWS, "uncertainty")] == ["a", "e", "g", "b", "f", "d", "c"]


def test_filter_abstained_and_queue_order():
    assert [r["key"] for r in triage(ROWS, "queue", abstained_only=True)] == ["a", "c", "e"]
    assert [r["key"] for r in triage(ROWS, "uncertainty", abstained_only=True)] == ["a", "e", "c"]
    assert triage(ROWS, "queue") == ROWS
    with pytest.raises(ValueError, match="unknown triage order"):
        triage(ROWS, "random")


def test_triage_of_objects_through_a_getter():
    verdicts = {"x": ModelVerdict("x", "cv", "YES", "YES", p_yes=0.9), "y": ModelVerdict("y", "cv", "NO", "NO", p_yes=0.1)}
    assert triage(["y", "x", "z"], "p_yes", verdict_of=verdicts.get) == ["x", "y", "z"]


@pytest.fixture
def rollout_store(tmp_path):
    """3 spectra screened with K=3 rollouts (seeds pick the scripts) and 1 with a single greedy run."""
    store = VettingStore(tmp_path / "k3.sqlite")
    scripts = [[ZOOM, YES], [ZOOM2, NO], ["no answer here"]]
    engine = ScriptedEngine(scripts=scripts, select="seed")
    task = get_task("cv")
    for i, it in enumerate(items(3)):
        vet_batch([it], store, engine, task, pillow_render, trace_root=tmp_path / "traces",
                  plan=RolloutPlan(k=3, temperature=1.0, seed=i))
    vet_batch(items(1, prefix="greedy"), store, ScriptedEngine([NO]), task, pillow_render,
              trace_root=tmp_path / "traces")
    yield store
    store.close()


@pytest.mark.parametrize("name, fmt", [("out.csv", "ascii.csv"), ("out.vot", "votable"), ("out.fits", "fits")])
def test_exports_carry_the_confidence(rollout_store, tmp_path, name, fmt):
    t = Table.read(export(rollout_store, tmp_path / name), format=fmt)
    rows = {str(r["spectrum_key"]): r for r in t}
    k3 = rows["/data/spec00.fits#0"]  # seeds 0,1,2 -> YES, NO, format error
    assert k3["rollouts"] == 3 and k3["p_yes"] == pytest.approx(0.5) and k3["agreement"] == pytest.approx(0.5)
    assert k3["abstained"] == 1 and k3["format_failures"] == 1
    assert str(k3["rollout_outcomes"]) == "YES,NO,format_error"
    assert np.ma.is_masked(k3["p_yes_token"]) or np.isnan(k3["p_yes_token"])  # nothing recorded: no number
    greedy = rows["/data/greedy00.fits#0"]
    assert greedy["rollouts"] == 1 and greedy["p_yes"] == 0.0 and greedy["abstained"] == 0


def test_report_shows_rollouts_side_by_side(rollout_store, tmp_path):
    html = write_report(rollout_store, tmp_path / "report.html").read_text(encoding="utf-8")
    assert html.count('<div class="rollouts">') == 3  # the K=3 spectra, not the greedy one
    assert html.count('<div class="rollout">') == 9
    assert "6500–6600 Å · Hα &lt;b&gt;" in html and "4600–4750 Å · He II 4686" in html  # each rollout's windows
    assert "Confidence: p_yes 0.50 (1 YES / 1 NO of K=3, agreement 0.50, 1 format failure) · abstained" in html
    assert "Rollout 3 · seed 2" in html and "format_error" in html


def test_export_rows_order_by_triage(rollout_store):
    rows = export_rows(rollout_store)
    assert len(rows) == 4
    assert [r["p_yes"] for r in triage(rows, "uncertainty")][0] == pytest.approx(0.5)
    assert [r["p_yes"] for r in triage(rows, "p_yes")][-1] == 0.0


def test_queue_rows_skip_the_decided_and_unscreened(rollout_store):
    from speco3.vetting import Decision
    from speco3.vetting.triage import queue_rows

    rollout_store.record_decision(Decision("/data/spec01.fits#0", "cv", "YES", vetter="a"))
    rollout_store.record_decision(Decision("/data/never-screened.fits#0", "cv", "NO", vetter="a"))
    keys = [r["spectrum_key"] for r in queue_rows(rollout_store, "cv", "uncertainty", undecided_only=True)]
    assert keys == ["/data/spec00.fits#0", "/data/spec02.fits#0", "/data/greedy00.fits#0"]
    assert [r["spectrum_key"] for r in queue_rows(rollout_store, "cv", "p_yes", abstained_only=True, limit=1)] == [
        "/data/spec00.fits#0"]


def test_samp_queue_table_carries_the_confidence(rollout_store):
    from types import SimpleNamespace

    from speco3.interop.tables import queue_table

    entries = [SimpleNamespace(key=f"/data/{n}.fits#0", name=n, path=f"/data/{n}.fits", index=0, survey=None,
                               object_id=None, ra=None, dec=None, redshift=None, snr=None)
               for n in ("spec00", "greedy00", "unscreened")]
    table, keys = queue_table(entries, rollout_store, "cv", lambda e: e.key)
    assert list(table["rollouts"].filled(0)) == [3, 1, 0] and list(table["abstained"].filled(-1)) == [1, 0, -1]
    assert table["p_yes"][0] == pytest.approx(0.5) and table["agreement"][0] == pytest.approx(0.5)
    assert bool(table["p_yes"].mask[2]) and keys[2] == "/data/unscreened.fits#0"

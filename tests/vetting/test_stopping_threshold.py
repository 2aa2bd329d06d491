"""Mode 3 of certified stopping: a p_yes threshold for the next archive by Learn-then-Test with binomial p-values,
from an audit draw uniform over the whole screened archive (`speco3.vetting.stopping.next_archive_threshold`)."""

from __future__ import annotations

import json
import math

import pytest
from scipy.stats import binom

from speco3.cli import main
from speco3.vetting import Decision, ModelVerdict, VettingStore
from speco3.vetting.stopping import assess, draw, next_archive_threshold


def test_too_few_candidates_say_how_many_more():
    # a sample without misses certifies alpha only from ln(delta)/ln(1 - alpha) candidates on: 59 at 5 %/95 %
    assert math.ceil(math.log(0.05) / math.log(0.95)) == 59
    assert next_archive_threshold([0.9] * 20, [0.1, 0.5, 0.9], 0.05, 0.95) == (None, 39)
    assert next_archive_threshold([], [0.5], 0.05, 0.95) == (None, 59)
    assert binom.cdf(0, 59, 0.05) <= 0.05 < binom.cdf(0, 58, 0.05)
    assert next_archive_threshold([0.9] * 59, [0.1, 0.5, 0.9], 0.05, 0.95) == (0.9, 0)


def test_the_largest_threshold_scipy_rejects_in_sequence():
    scores = [1.0] * 150 + [0.6] * 3 + [0.2] * 4 + [None]
    grid = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    t, more = next_archive_threshold(scores, grid, 0.1, 0.95)
    # misses below t: 0.2 -> 1 (None), 0.4/0.6 -> 5, 0.8/1.0 -> 8 of 158
    p = {g: binom.cdf(sum(s is None or s < g for s in scores), len(scores), 0.1) for g in grid}
    expected = None
    for g in grid:
        if p[g] > 0.05:
            break
        expected = g
    assert t == expected == 1.0 and more == 0
    # a stricter miss rate stops earlier in the sequence
    t2, _ = next_archive_threshold(scores, grid, 0.03, 0.95)
    assert t2 is not None and t2 < 1.0 and binom.cdf(1, 158, 0.03) <= 0.05
    with pytest.raises(ValueError):
        next_archive_threshold(scores, grid, 0.0, 0.95)


def test_only_a_draw_over_the_whole_archive_gives_a_threshold(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    with VettingStore(path) as store:
        for i in range(80):
            p = 1.0 if i < 70 else 0.0
            store.record_model_verdict(ModelVerdict(f"s{i:02d}", "cv", "YES" if p else "NO", "YES" if p else "NO",
                                                    p_yes=p, rollouts=3))
        draw(store, "cv", 80, seed=4, recall=0.9, confidence=0.95)  # before any decision: uniform over all
        for key in store.audit_frame("cv"):
            store.record_decision(Decision(key, "cv", "YES" if key < "s70" else "NO"))
        c = assess(store, "cv", 0.9, 0.95, miss_rate=0.05)
        assert c.threshold == 1.0 and c.threshold_positives_needed == 0 and c.positives_used == 70
    rc = main(["triage", str(path), "--task", "cv", "--miss-rate", "0.05", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["threshold"] == 1.0
    assert main(["triage", str(path), "--task", "cv", "--miss-rate", "0.05"]) == 0
    assert "next archive: read p_yes >= 1" in capsys.readouterr().out
    # a draw after a head: no threshold, and why
    other = tmp_path / "o.sqlite"
    with VettingStore(other) as store:
        for i in range(10):
            store.record_model_verdict(ModelVerdict(f"s{i:02d}", "cv", "NO", "NO", p_yes=0.0, rollouts=3))
        store.record_decision(Decision("s00", "cv", "YES"))
        draw(store, "cv", 3, seed=1)
        c = assess(store, "cv", 0.9, 0.95, miss_rate=0.05)
        assert c.threshold is None and "whole screened archive" in (c.threshold_note or "")
    assert main(["triage", str(other), "--task", "cv", "--miss-rate", "2"]) == 1
    assert "--miss-rate must be in (0, 1)" in capsys.readouterr().err

"""K rollouts in the app: the batch pre-screen stores every rollout, the p(YES) column shows a bar, the triage box
orders the queue by p_yes or uncertainty, the state filter keeps the abstentions."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from speco3.gui.archive_model import ABSTAINED_ROLE, COL, P_YES_ROLE
from speco3.gui.settings import AppSettings
from speco3.vetting.triage import ORDERS

pytestmark = pytest.mark.gui

K = 3


def rollout_opener(model_id, settings):
    """A scripted engine whose answer depends on the spectrum and the rollout's seed: spectrum s gets n(s) YES of
    K (n = sha of its full view modulo K+1), so p_yes takes the values 0, 1/3, 2/3 and 1 across the archive."""
    from speco3.engine.base import ModelInfo
    from speco3.engine.scripted import ScriptedEngine
    from speco3.imaging import PreparedImage

    engine = None

    def answer(conversation):
        image = next(p for p in conversation if isinstance(p, PreparedImage))
        n_yes = int(image.sha256[:8], 16) % (K + 1)
        word = "YES" if engine.sampling.seed < n_yes else "NO"
        return f"<think>rollout {engine.sampling.seed}</think><answer>\\boxed{{{word}}}</answer>"

    engine = ScriptedEngine(answer, settings=settings, info=ModelInfo(model_id=model_id, quant="Q4_K_M"))
    return engine


def _column(w, role):
    m = w.table_model
    return [m.data(m.index(r, COL["confidence"]), role) for r in range(m.rowCount())]


def test_rollouts_confidence_column_and_triage(qtbot, make_window, demo_archive, open_and_wait, fake_models):
    settings = AppSettings.load()
    settings.rollouts, settings.rollout_temperature = K, 0.9
    w = make_window(settings=settings, opener=rollout_opener)
    open_and_wait(w, demo_archive)
    w.start_batch()
    qtbot.waitUntil(lambda: w.batch_bar.value() == 20, timeout=120000)
    store = w.vetting.store
    verdicts = store.model_verdicts("cv")
    assert len(verdicts) == 20 and {v.rollouts for v in verdicts} == {K}
    for v in verdicts:
        rs = store.rollouts(v.id)
        assert [r.seed for r in rs] == [0, 1, 2] and {r.temperature for r in rs} == {0.9}
        assert v.p_yes == pytest.approx([r.verdict for r in rs].count("YES") / K)
        assert v.abstained == (v.p_yes not in (0.0, 1.0))
    assert len({round(v.p_yes, 3) for v in verdicts}) >= 3  # the archive has a spread of confidences

    # the column: number, bar value, abstention mark, tooltip
    w.table_model.invalidate_states()
    m = w.table_model
    by_key = {v.spectrum_key: v for v in verdicts}
    for r in range(m.rowCount()):
        e = m.entry(r)
        v = by_key[f"{e.path}#{e.index}"]
        idx = m.index(r, COL["confidence"])
        assert m.data(idx, P_YES_ROLE) == pytest.approx(v.p_yes)
        assert m.data(idx, ABSTAINED_ROLE) == v.abstained
        assert m.data(idx) == f"{v.p_yes:.2f}" + (" ?" if v.abstained else "")
        assert f"K={K}" in m.data(idx, Qt.ItemDataRole.ToolTipRole)

    # the bar: green for p_yes 1, nothing drawn over the background for p_yes 0
    table = w.archive.table
    table.scrollTo(m.index(0, COL["confidence"]))  # the column in view, whatever the window's width
    image = table.viewport().grab().toImage()
    ps = _column(w, P_YES_ROLE)
    for p_want, check in ((1.0, lambda c: c.green() > c.red() + 40), (0.0, lambda c: abs(c.green() - c.red()) < 40)):
        if p_want not in ps:
            continue
        rect = table.visualRect(m.index(ps.index(p_want), COL["confidence"]))
        dpr = image.devicePixelRatio()
        colour = image.pixelColor(int((rect.left() + 6) * dpr), int(rect.center().y() * dpr))
        assert check(colour), (p_want, colour.name())

    # triage: likely positives first, then the most uncertain first
    w.archive.triage.setCurrentIndex(ORDERS.index("p_yes"))
    ps = _column(w, P_YES_ROLE)
    assert len(ps) == 20 and ps == sorted(ps, reverse=True)
    w.archive.triage.setCurrentIndex(ORDERS.index("uncertainty"))
    dist = [abs(p - 0.5) for p in _column(w, P_YES_ROLE)]
    assert dist == sorted(dist)
    # only the abstentions
    w.archive.state.setCurrentText("model abstained")
    assert m.loaded_rows() == sum(v.abstained for v in verdicts) and all(_column(w, ABSTAINED_ROLE))
    w.archive.state.setCurrentText("any")
    # a column sort replaces the triage order, and the box says so
    table.sortByColumn(COL["snr"], Qt.SortOrder.AscendingOrder)
    assert w.archive.triage.currentData() == "queue" and m.triage_order == "queue"


def test_rollout_settings_round_trip(tmp_path):
    s = AppSettings(rollouts=4, rollout_temperature=0.7, min_agreement=0.8)
    s.save(tmp_path / "d.json")
    back = AppSettings.load(tmp_path / "d.json")
    assert (back.rollouts, back.rollout_temperature, back.min_agreement) == (4, 0.7, 0.8)
    assert back.rollout_plan().k == 4 and back.rollout_plan().temperature == 0.7
    assert back.thresholds().min_agreement == 0.8 and back.engine_settings().top_logprobs > 0
    assert AppSettings().rollout_plan() is None and AppSettings().engine_settings().top_logprobs == 0
    bad = AppSettings.from_dict({"rollouts": 0, "min_agreement": 3.0, "rollout_temperature": "hot"})
    assert (bad.rollouts, bad.min_agreement, bad.rollout_temperature) == (1, 0.75, 1.0)


def test_interactive_run_with_rollouts_shows_the_fold(qtbot, make_window, demo_archive, open_and_wait, fake_models):
    settings = AppSettings.load()
    settings.rollouts = K
    w = make_window(settings=settings, opener=rollout_opener)
    open_and_wait(w, demo_archive)
    w.run_agent()
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=60000)
    mv = w.vetting.store.latest_model_verdict(w.vetting.store.model_verdicts("cv")[0].spectrum_key, "cv")
    assert mv.rollouts == K and len(w.vetting.store.rollouts(mv.id)) == K
    text = w.agent_panel.verdict.text()
    assert f"{mv.outcomes.count('YES')} YES / {mv.outcomes.count('NO')} NO of {K} rollouts" in text
    assert ("Abstained" in text) == mv.abstained and "The transcript shows one rollout" in text
    assert mv.confidence().p_yes == mv.p_yes and mv.confidence().k == K


def test_an_abstention_without_any_answer_is_shown_not_left_blank():
    """No rollout answered: the p(YES) cell says 'abstained' (the delegate frames it) and the tooltip says why."""
    from speco3.gui.archive_model import ArchiveTableModel
    from speco3.vetting import ModelVerdict

    mv = ModelVerdict("a#0", "cv", None, "format_error", p_yes=None, abstained=True, rollouts=3,
                      outcomes=["format_error"] * 3, agreement=None, p_yes_token=None, format_failures=3)
    data = ArchiveTableModel._confidence_data
    assert data(mv, Qt.ItemDataRole.DisplayRole) == "abstained"
    assert data(mv, ABSTAINED_ROLE) is True and data(mv, P_YES_ROLE) is None
    tip = data(mv, Qt.ItemDataRole.ToolTipRole)
    assert "no rollout of 3 answered" in tip and "split" not in tip

"""``--rollouts auto`` in the app: the settings offer a fixed K or auto with its budget, a run's rounds open their
rollout tabs as they start, and the confidence tooltip and the verdict line say how many of the budget ran and why
they stopped."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from speco3.agent.adaptive import STOP_WORDS
from speco3.gui.archive_model import COL
from speco3.gui.dialogs import SettingsDialog
from speco3.gui.settings import AppSettings

pytestmark = pytest.mark.gui

SURE = {"YES": [["YES", 0.97], ["NO", 0.03]], "NO": [["NO", 0.97], ["YES", 0.03]]}


def _split(image) -> bool:
    return int(image.sha256[:8], 16) % 2 == 1


PACE = {"delay_s": 0.0}  # seconds per generated piece, read as each turn starts (the test slows the engine down)


def adaptive_opener(model_id, settings):
    """A scripted engine that is sure of every answer: on a clear spectrum every rollout says YES (two sure ones
    settle it), on a split one the rollouts alternate YES / NO by seed (3:3 of 6 can no longer become a verdict)."""
    from speco3.engine.base import ModelInfo
    from speco3.engine.scripted import ScriptedEngine
    from speco3.imaging import PreparedImage

    engine = None

    def answer(conversation):
        image = next(p for p in conversation if isinstance(p, PreparedImage))
        word = "NO" if _split(image) and engine.sampling.seed % 2 else "YES"
        engine.delay_s = PACE["delay_s"]
        return f"<think>rollout {engine.sampling.seed}</think><answer>\\boxed{{{word}}}</answer>"

    engine = ScriptedEngine(answer, settings=settings, alternatives=SURE,
                            info=ModelInfo(model_id=model_id, quant="Q4_K_M"))
    return engine


def test_settings_dialog_offers_fixed_or_auto(qtbot, tmp_path):
    s = AppSettings(rollouts=4)
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    assert dlg.rollouts.isEnabled() and not dlg.max_rollouts.isEnabled()  # fixed K by default
    dlg.rollout_mode.setCurrentIndex(dlg.rollout_mode.findData(True))
    assert not dlg.rollouts.isEnabled() and dlg.max_rollouts.isEnabled()
    dlg.max_rollouts.setValue(6)
    dlg.accept()
    assert (s.rollouts_auto, s.max_rollouts, s.rollouts) == (True, 6, 4)
    plan = s.rollout_plan()
    assert plan.adaptive is not None and plan.adaptive.k_max == plan.k == 6 and plan.first_round == 2
    assert plan.temperature == s.rollout_temperature and s.engine_settings().top_logprobs > 0
    s.save(tmp_path / "d.json")
    back = AppSettings.load(tmp_path / "d.json")
    assert (back.rollouts_auto, back.max_rollouts) == (True, 6) and back.rollout_plan() == plan
    again = SettingsDialog(back)
    qtbot.addWidget(again)
    assert again.rollout_mode.currentData() is True and again.max_rollouts.value() == 6
    back.rollouts_auto = False  # back to the fixed K, which was kept
    assert back.rollout_plan().adaptive is None and back.rollout_plan().k == 4
    bad = AppSettings.from_dict({"rollouts_auto": "yes", "max_rollouts": 0})
    assert (bad.rollouts_auto, bad.max_rollouts) == (False, 8)


def test_auto_batch_tooltips_and_an_interactive_run(qtbot, make_window, demo_archive, open_and_wait, fake_models,
                                                    monkeypatch):
    settings = AppSettings.load()
    settings.rollouts_auto, settings.max_rollouts = True, 8
    w = make_window(settings=settings, opener=adaptive_opener)
    open_and_wait(w, demo_archive)
    w.start_batch()
    qtbot.waitUntil(lambda: w.batch_bar.value() == 20, timeout=120000)
    store = w.vetting.store
    verdicts = store.model_verdicts("cv")
    assert len(verdicts) == 20
    assert {(v.rollouts, v.k_max, v.stop_reason) for v in verdicts} == {(2, 8, "agreed"), (6, 8, "certain")}
    assert all(len(store.rollouts(v.id)) == v.rollouts for v in verdicts)
    w.table_model.invalidate_states()
    m = w.table_model
    by_key = {v.spectrum_key: v for v in verdicts}
    seen = set()
    for r in range(m.rowCount()):
        e = m.entry(r)
        v = by_key[f"{e.path}#{e.index}"]
        tip = m.data(m.index(r, COL["confidence"]), Qt.ItemDataRole.ToolTipRole)
        assert f"{v.rollouts} of up to 8 rollouts ({STOP_WORDS[v.stop_reason]})" in tip
        seen.add(v.stop_reason)
    assert seen == {"agreed", "certain"}

    # an interactive run of a split spectrum: two tabs at the start, one more as each later rollout starts
    row = next(r for r in range(m.rowCount()) if by_key[f"{m.entry(r).path}#{m.entry(r).index}"].rollouts == 6)
    w.archive.table.selectRow(row)
    qtbot.waitUntil(lambda: w.vetting.entry is not None and w.vetting.entry.key == m.entry(row).key, timeout=20000)
    qtbot.waitUntil(lambda: w.vetting.spectrum is not None, timeout=20000)
    panel = w.agent_panel
    monkeypatch.setitem(PACE, "delay_s", 0.01)  # slow enough to watch the rounds
    w.run_agent()
    assert panel.rollout_tabs.count() == 2
    # the third round (rollouts 5 and 6) opens its tabs while the run is still going
    qtbot.waitUntil(lambda: panel.rollout_tabs.count() == 6 and w.agent.interactive_job is not None, timeout=30000)
    assert panel.rollout_tabs.widget(5).objectName() == "rollout6"
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=60000)
    text = panel.verdict.text()
    assert f"3 YES / 3 NO · 6 of up to 8 rollouts ({STOP_WORDS['certain']})" in text
    assert panel.rollout_tabs.count() == 6
    assert all(panel.rollout_tabs.widget(i).toPlainText() for i in range(1, 6))

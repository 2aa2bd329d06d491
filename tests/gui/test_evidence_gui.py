"""The expert's evidence windows in the app: marked by key and button, labelled, removed, kept in order, stored as
notes at once and with the decision, restored on return and after a restart; the model's windows as a start."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from speco3.gui.settings import AppSettings
from speco3.vetting import Evidence, VettingStore

pytestmark = pytest.mark.gui


def _mark_at(w, key, lo: float, hi: float) -> Evidence:
    """Zoom the plot to [lo, hi] (observed frame), press E; the window the viewer reports is what gets marked."""
    w.viewer.zoom_to(lo, hi, "observed")
    expected = w.viewer.visible_window()
    w.archive.table.setFocus()
    key(w, Qt.Key.Key_E)
    return expected


def test_mark_label_remove_order_decide_and_revisit(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    store, task, k = w.vetting.store, w.vetting.task_id, w.vetting._current_key()
    first = _mark_at(w, key, 6500, 6620)
    assert first is not None and first.lo > 6400 and first.hi < 6750  # the visible range, observed frame
    (row,) = w.decision.evidence_rows
    assert QApplication.focusWidget() is row.label  # the new row's label is typed into at once
    qtbot.keyClicks(row.label, "Halpha emission")  # letters bound to keys (E, N, …) go to the field
    qtbot.keyClick(row.label, Qt.Key.Key_Return)
    assert QApplication.focusWidget() is w.viewer.plot  # Enter gives the focus back to the plot
    assert store.decision(k, task) is None  # Enter in the label decided nothing
    assert store.annotation(k, task).evidence == [Evidence(first.lo, first.hi, "Halpha emission")]  # stored at once

    w.viewer.zoom_to(4800, 4900, "observed")
    second = w.viewer.visible_window()
    qtbot.mouseClick(w.decision.mark_button, Qt.MouseButton.LeftButton)  # the button marks like the key
    qtbot.keyClick(w.decision.evidence_rows[1].label, Qt.Key.Key_Escape)  # no label: Escape leaves the field
    assert QApplication.focusWidget() is w.viewer.plot
    third = _mark_at(w, key, 4650, 4720)
    qtbot.keyClicks(w.decision.evidence_rows[2].label, "He II")
    qtbot.keyClick(w.decision.evidence_rows[2].label, Qt.Key.Key_Return)
    assert [e.label for e in w.decision.evidence()] == ["Halpha emission", "", "He II"]  # in the order marked
    qtbot.mouseClick(w.decision.evidence_rows[1].remove, Qt.MouseButton.LeftButton)
    kept = [Evidence(first.lo, first.hi, "Halpha emission"), Evidence(third.lo, third.hi, "He II")]
    assert second not in w.decision.evidence() and w.decision.evidence() == kept
    assert [r.number.text() for r in w.decision.evidence_rows] == ["1.", "2."]  # renumbered
    assert store.annotation(k, task).evidence == kept
    assert [it.getRegion() for it in w.viewer._evidence_items] == [(e.lo, e.hi) for e in kept]  # shaded

    key(w, Qt.Key.Key_F)  # rest frame: the shading follows, the stored windows stay observed
    z = w.vetting.spectrum.z
    assert w.viewer._evidence_items[0].getRegion() == pytest.approx((first.lo / (1 + z), first.hi / (1 + z)))
    qtbot.mouseClick(w.decision.evidence_rows[0].range, Qt.MouseButton.LeftButton)  # click: zoom there
    lo, hi = w.viewer.x_range()
    assert lo < first.lo / (1 + z) < first.hi / (1 + z) < hi and hi - lo < 2 * (first.hi - first.lo)
    key(w, Qt.Key.Key_F)

    w.settings.auto_advance = False
    key(w, Qt.Key.Key_Y)
    dec = store.decision(k, task)
    assert dec.decision == "YES" and dec.evidence == kept  # the decision carries the windows, in order
    key(w, Qt.Key.Key_Right)
    assert w.decision.evidence() == [] and w.viewer._evidence_items == []  # the next spectrum has none
    key(w, Qt.Key.Key_Left)
    assert w.decision.evidence() == kept and len(w.viewer._evidence_items) == 2  # back: restored

    label = w.decision.evidence_rows[1].label  # relabel after deciding, move on without Enter
    label.setFocus()
    label.selectAll()
    qtbot.keyClicks(label, "He II 4686")
    w.archive.table.setFocus()
    key(w, Qt.Key.Key_Right)  # leaving stores the edit, and the decision again with it
    assert store.decision(k, task).evidence[1].label == "He II 4686"
    assert store.decision(k, task).decision == "YES"


def test_evidence_marked_without_a_decision_survives_a_restart(qtbot, make_window, demo_archive, open_and_wait,
                                                              key):
    w = make_window()
    open_and_wait(w, demo_archive)
    k, task = w.vetting._current_key(), w.vetting.task_id
    marked = _mark_at(w, key, 6000, 6200)
    qtbot.keyClicks(w.decision.evidence_rows[0].label, "TiO band")  # typed, no Enter, window closed at once
    store_path = w.vetting.store.path
    w.close()
    with VettingStore(store_path, readonly=True) as store:
        assert store.decisions(task) == []
        assert store.notes(k, task).evidence == [Evidence(marked.lo, marked.hi, "TiO band")]
    w2 = make_window(settings=AppSettings.load())
    open_and_wait(w2, w2.settings.last_archive)  # resumes on the spectrum
    assert w2.vetting._current_key() == k
    assert w2.decision.evidence() == [Evidence(marked.lo, marked.hi, "TiO band")]
    assert len(w2.viewer._evidence_items) == 1


def test_mark_needs_a_view_of_the_spectrum_and_is_not_doubled(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    w.viewer.zoom_to(6500, 6600, "observed")
    toolbar_button = w.evidence_toolbar.widgetForAction(w.mark_action)
    qtbot.mouseClick(toolbar_button, Qt.MouseButton.LeftButton)  # the toolbar button marks like the key
    assert w.decision.evidence() == [w.viewer.visible_window()]
    assert QApplication.focusWidget() is w.decision.evidence_rows[0].label
    w.archive.table.setFocus()
    key(w, Qt.Key.Key_E)  # the same view again
    assert len(w.decision.evidence()) == 1 and "marked already" in w.statusBar().currentMessage()
    w.viewer.vb.setXRange(20000, 21000, padding=0)  # past the red end
    w.archive.table.setFocus()
    key(w, Qt.Key.Key_E)
    assert len(w.decision.evidence()) == 1 and "no part of the spectrum" in w.statusBar().currentMessage()


def test_start_from_the_model_windows(qtbot, make_window, demo_archive, open_and_wait, key, fake_models):
    w = make_window()
    open_and_wait(w, demo_archive)
    assert not w.decision.model_windows_button.isEnabled()  # no model run yet
    store, task, k = w.vetting.store, w.vetting.task_id, w.vetting._current_key()
    marked = _mark_at(w, key, 6500, 6600)
    qtbot.keyClicks(w.decision.evidence_rows[0].label, "Halpha")  # being typed when the verdict comes in
    w.run_agent()  # the scripted session zooms on 4800-4920 Å (rest frame), labelled "Zoom on Hβ region"
    qtbot.waitUntil(lambda: store.latest_model_verdict(k, task) is not None, timeout=30000)
    qtbot.waitUntil(lambda: w.decision.model_windows_button.isEnabled(), timeout=5000)
    mine = Evidence(marked.lo, marked.hi, "Halpha")
    assert w.decision.evidence() == [mine] and store.annotation(k, task).evidence == [mine]  # the typing kept
    mv = store.latest_model_verdict(k, task)
    assert store.rollouts(mv.id)[0].windows == [[4800, 4920, "Zoom on Hβ region"]]
    qtbot.mouseClick(w.decision.model_windows_button, Qt.MouseButton.LeftButton)
    f = 1 + w.vetting.spectrum.z
    model = Evidence(round(4800 * f, 1), round(4920 * f, 1), "Zoom on Hβ region")  # observed frame
    assert w.decision.evidence() == [mine, model]  # added after the vetter's own, to edit
    assert store.annotation(k, task).evidence == [mine, model]
    qtbot.mouseClick(w.decision.model_windows_button, Qt.MouseButton.LeftButton)  # not added twice
    assert w.decision.evidence() == [mine, model]
    label = w.decision.evidence_rows[1].label
    label.setFocus()
    label.selectAll()
    qtbot.keyClicks(label, "Hbeta broad emission")
    qtbot.keyClick(label, Qt.Key.Key_Return)
    key(w, Qt.Key.Key_N)
    assert store.decision(k, task).evidence[1] == Evidence(model.lo, model.hi, "Hbeta broad emission")


def _evidence_label_rects(viewer):
    return [(item.label, item.label.sceneBoundingRect()) for item in viewer._evidence_items]


def test_overlapping_windows_keep_every_label_readable_through_zoom_and_pan(qtbot, shown_viewer):
    """Two overlapping windows: both labels shown, in separate rows, never covering each other, inside the plot
    also when the view starts inside a window (its left edge out of view)."""
    from speco3.gui.labels import MarkerLabel

    viewer = shown_viewer(0.02)
    viewer.set_evidence([Evidence(6500, 6620, "Hα emission"), Evidence(6540, 6700, "[N II] 6583"),
                         Evidence(8000, 8100, "far")])
    box = viewer.vb.sceneBoundingRect()
    for lo, hi in ((3700, 9100), (6450, 6750), (6560, 6800), (6300, 6600)):  # whole, zoomed, panned right, left
        viewer.vb.setXRange(lo, hi, padding=0)
        shown = [(label, r) for label, r in _evidence_label_rects(viewer) if label.isVisible()]
        assert [label.format for label, _r in shown][:2] == ["1 Hα emission", "2 [N II] 6583"], (lo, hi)
        (_a, ra), (_b, rb) = shown[:2]
        assert not ra.intersects(rb), (lo, hi)
        for label, r in shown:
            assert box.contains(r), (label.format, lo, hi)
    viewer.vb.setXRange(4000, 5000, padding=0)  # no window in view: no label
    assert not any(label.isVisible() for label, _r in _evidence_label_rects(viewer))
    viewer.set_frame("rest")  # the labels follow the frame
    viewer.zoom_to(6500, 6700, "observed")
    (_a, ra), (_b, rb), _far = _evidence_label_rects(viewer)
    assert _a.isVisible() and _b.isVisible() and not ra.intersects(rb)
    viewer.set_evidence([])
    assert viewer._evidence_items == []
    assert not [i for i in viewer.vb.childItems() if isinstance(i, MarkerLabel) and i.format.startswith("1 Hα")]


def test_model_windows_button_is_off_when_the_model_made_no_zoom_windows(qtbot, make_window, demo_archive,
                                                                         open_and_wait, engine_factory, fake_models):
    """K rollouts answering without a zoom: "Start from the model's windows" had nothing to add yet was enabled."""
    engine_factory.outputs = ["<think>Flat continuum.</think><answer>\\boxed{NO}</answer> No emission."]
    settings = AppSettings.load()
    settings.rollouts = 3
    w = make_window(settings)
    open_and_wait(w, demo_archive)
    store, task, k = w.vetting.store, w.vetting.task_id, w.vetting._current_key()
    w.run_agent()
    qtbot.waitUntil(lambda: store.latest_model_verdict(k, task) is not None, timeout=30000)
    qtbot.waitUntil(lambda: not w.agent_panel.running, timeout=30000)
    mv = store.latest_model_verdict(k, task)
    assert (mv.rollouts or 1) > 1 and all(not r.windows for r in store.rollouts(mv.id))
    assert w.vetting.model_windows() == [] and not w.decision.model_windows_button.isEnabled()

"""Line labels of the viewer never overlap: staggered in rows, the lowest-priority ones hidden, re-laid on zoom."""

from __future__ import annotations

import math

import pytest

from speco3.agent.tasks import builtin_tasks
from speco3.gui.lines import label_rows
from speco3.spectra import read_spectrum

pytestmark = pytest.mark.gui


def test_label_rows_greedy_by_priority():
    # three labels 50 px wide, 10 px apart: one per row; a fourth fits nowhere and is hidden
    assert label_rows([0, 10, 20, 30], [50, 50, 50, 50], n_rows=3) == [0, 1, 2, None]
    assert label_rows([0, 100, 200], [50, 50, 50], n_rows=3) == [0, 0, 0]  # far apart: one row
    assert label_rows([math.nan, 0.0], [40, 40]) == [None, 0]  # off-screen lines take no room
    assert label_rows([0, 52], [50, 50], gap=6) == [0, 1] and label_rows([0, 56], [50, 50], gap=6) == [0, 0]


def _visible_label_rects(viewer):
    return [(item.label.format, item.label.sceneBoundingRect()) for item in viewer._line_items
            if item.label.isVisible()]


def test_cv_labels_do_not_collide_and_relayout_on_zoom(qtbot, demo_master):
    from speco3.gui.viewer import SpectrumViewer

    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    viewer.resize(560, 360)  # a narrow plot: the CV lines crowd around 4000-5000 Å
    viewer.show()
    viewer.set_task(builtin_tasks()["cv"])
    viewer.set_spectrum(read_spectrum(sorted(demo_master.glob("*.fits*"))[0]))  # a CV
    qtbot.waitExposed(viewer)
    rects = _visible_label_rects(viewer)
    assert len(rects) >= 6
    for i, (name_a, a) in enumerate(rects):
        for name_b, b in rects[i + 1:]:
            assert not a.intersects(b), (name_a, name_b)
    rows = {round(item.label.orthoPos, 2) for item in viewer._line_items if item.label.isVisible()}
    assert len(rows) > 1  # crowded: staggered in several rows
    names = [item.label.format for item in viewer._line_items]
    assert "Hα" in [n for n, _ in rects] and "Hβ" in [n for n, _ in rects]  # the first lines of the list win
    viewer.vb.setXRange(4300, 4750, padding=0)  # zoomed: the lines in view all get their label
    in_view = [item for item in viewer._line_items if 4300 < item.value() < 4750]
    assert {item.label.format for item in in_view} == {"Hγ", "He I 4471", "Bowen C III/N III", "He II 4686"}
    assert all(item.label.isVisible() for item in in_view)
    assert sum(item.label.orthoPos == 0.97 for item in in_view) >= 3  # room enough: mostly the top row
    assert names == [ln.name for ln in builtin_tasks()["cv"].lines]


def test_telluric_labels_stay_inside_the_plot(qtbot, shown_viewer):
    """The H₂O band from 8950 Å starts 150 Å before a LAMOST spectrum ends: its label must not run off the right."""
    viewer = shown_viewer(0.0)
    box = viewer.vb.sceneBoundingRect()
    last = viewer._telluric_labels[-1]
    assert last.isVisible() and last.format == "⊕ H₂O"
    for label in [label for label in viewer._telluric_labels if label.isVisible()]:
        r = label.sceneBoundingRect()
        assert box.left() <= r.left() and r.right() <= box.right(), label.format
    viewer.vb.setXRange(7400, 8000, padding=0)  # zoomed into the O₂ A band: its label is still shown, inside
    o2a = viewer._telluric_labels[2]
    assert o2a.isVisible() and box.left() <= o2a.sceneBoundingRect().left()

"""The viewer marks exactly the lines of the current task's file (one source), converted to air for air spectra."""

from __future__ import annotations

import pytest

from speco3.agent.tasks import builtin_tasks
from speco3.gui.lines import GENERIC, lines_for_task, vac_to_air
from speco3.spectra import read_spectrum

pytestmark = pytest.mark.gui


def test_lines_for_task_is_the_task_list_or_generic():
    tasks = builtin_tasks()
    for task in tasks.values():
        assert lines_for_task(task) == task.lines
    assert lines_for_task(None) == GENERIC
    by_name = {ln.name: ln for task in tasks.values() for ln in task.lines}
    for ln in GENERIC:  # a line in both lists has one wavelength
        if ln.name in by_name:
            assert by_name[ln.name].wavelength == ln.wavelength, ln.name


def test_viewer_markers_equal_the_task_lines(qtbot, demo_master):
    from speco3.gui.viewer import SpectrumViewer

    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    spectrum = read_spectrum(sorted(demo_master.glob("*.fits*"))[0])
    viewer.set_spectrum(spectrum)
    viewer.set_frame("rest")
    for task in builtin_tasks().values():
        viewer.set_task(task)
        shown = [(item.label.format, item.value()) for item in viewer._line_items]
        to_medium = vac_to_air if spectrum.medium == "air" else float
        assert shown == [(ln.name, pytest.approx(float(to_medium(ln.wavelength)))) for ln in task.lines]
    viewer.set_task(None)
    assert [item.label.format for item in viewer._line_items] == [ln.name for ln in GENERIC]

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


def test_a_line_named_in_two_places_has_one_wavelength():
    """The built-in line lists, the generic list and the task files agree on every line they share (0.1 Å: the
    lists cite sources that round differently)."""
    from speco3.spectra.linelists import builtin_line_lists

    seen: dict[str, float] = {}
    every = [ln for t in builtin_tasks().values() for ln in t.lines] + list(GENERIC)
    every += [ln for lst in builtin_line_lists().values() for ln in lst.lines]
    for ln in every:
        assert seen.setdefault(ln.name, ln.wavelength) == pytest.approx(ln.wavelength, abs=0.1), ln.name


def _markers(viewer) -> dict[str, float]:
    return {item.label.format: item.value() for item in viewer._line_items}


def test_qso_list_marks_the_real_lines_and_z_moves_them(qtbot, spectra_dir):
    """On a real SDSS QSO (z = 0.1006, vacuum) the QSO list's [O III] 5007 and Hβ markers sit on the flux peaks;
    typing or sliding z moves the rest-frame markers, not the sky lines; the catalogue z comes back."""
    import numpy as np

    from speco3.gui.viewer import Z_SLIDER_STEPS, SpectrumViewer

    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    viewer.resize(1000, 500)
    s = read_spectrum(spectra_dir / "sdss" / "spec-0332-52367-0639.fits")
    viewer.set_spectrum(s)
    assert viewer.line_box.currentData() == "task"
    viewer.set_line_list("qso")
    marks = _markers(viewer)
    assert {"Lyα", "Mg II", "[O III] 5007", "Hβ", "Hα"} <= set(marks)
    for name in ("[O III] 5007", "Hβ"):
        near = np.abs(s.wavelength - marks[name]) < 20
        peak = s.wavelength[near][np.argmax(s.flux[near])]
        assert abs(peak - marks[name]) < 3, name  # the flux peak within two pixels of the marker
    viewer.set_show_sky(True)
    sky = _markers(viewer)["[O I] 5577 sky"]
    assert vac_to_air(sky) == pytest.approx(5577.338, abs=0.01)  # a vacuum spectrum: the air line in vacuum
    viewer.z_box.setValue(0.2)  # typed
    moved = _markers(viewer)
    assert moved["[O III] 5007"] == pytest.approx(5008.24 * 1.2) and moved["[O I] 5577 sky"] == sky
    assert "catalogue z 0.10" in viewer.line_note.text()
    viewer.z_slider.setValue(Z_SLIDER_STEPS)  # the slider's top: +0.02 (1 + z) about the typed z
    assert viewer.line_z() == pytest.approx(0.2 + 0.02 * 1.2, abs=1e-5)
    assert viewer.z_box.value() == pytest.approx(viewer.line_z())
    viewer.z_reset.click()
    assert viewer.z_lines is None and _markers(viewer)["[O III] 5007"] == pytest.approx(marks["[O III] 5007"])
    viewer.set_frame("rest")  # in the rest frame of the catalogue z the markers are at their rest wavelengths
    assert _markers(viewer)["Hα"] == pytest.approx(6564.61)


def test_an_air_spectrum_gets_air_markers_and_an_unknown_medium_is_said(qtbot, spectra_dir, tmp_path):
    from speco3.gui.viewer import SpectrumViewer

    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    air = read_spectrum(spectra_dir / "other" / "quasarLinearSkyAirNoHelio.fits")  # Marz/OzDES: air, no z
    assert air.medium == "air"
    viewer.set_spectrum(air)
    viewer.set_line_list("galaxy_emission")
    viewer.set_line_z(0.5)
    assert _markers(viewer)["Hα"] == pytest.approx(vac_to_air(6564.613) * 1.5)
    assert viewer.line_note.text().startswith("markers in air")
    viewer.set_spectrum(read_spectrum(spectra_dir / "generic" / "NGC4151sic2a.fits"))  # medium not stated
    assert viewer.z_lines is None and viewer.line_note.text() == "medium unknown: in vacuum"
    assert _markers(viewer)["Hα"] == pytest.approx(6564.613)
    viewer.set_spectrum(air)
    own = tmp_path / "own.csv"
    own.write_text("name,wavelength\nmy line,5000\n")
    assert viewer.load_line_list(str(own))
    assert viewer.line_box.currentText() == "own.csv" and list(_markers(viewer)) == ["my line"]
    bad = tmp_path / "bad.csv"
    bad.write_text("wave\n1\n")
    assert not viewer.load_line_list(str(bad))
    assert "needs a 'name'" in viewer.line_note.text() and list(_markers(viewer)) == ["my line"]  # kept
    viewer.set_line_list("task")
    assert viewer.line_note.text().startswith("markers in air")

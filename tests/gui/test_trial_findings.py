"""What the second new-user trial met: demo verdicts under the model filters, an empty pre-screen, an empty table,
the archive summary, a unit that names the quantity, the report's title, the place kept across filters."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication

from speco3.gui.dialogs import SettingsDialog
from speco3.gui.main_window import archive_summary
from speco3.gui.viewer import flux_axis_label
from speco3.spectra.model import Spectrum
from speco3.vetting.report import write_report

pytestmark = pytest.mark.gui


def test_demo_verdicts_count_under_the_model_filters_and_an_empty_prescreen_ends(qtbot, make_window, demo_archive,
                                                                                 open_and_wait, key, monkeypatch):
    import speco3.gui.agent_control as control
    from speco3.demo import demo_engine

    # the demo session's real script, without the per-piece delay that shows its streaming
    monkeypatch.setattr(control, "demo_engine", lambda spectrum, task: demo_engine(spectrum, task, 0.0))
    w = make_window()
    open_and_wait(w, demo_archive)
    assert w.agent_panel.choice() is not None  # the scripted demo, no model installed
    w.start_batch()
    qtbot.waitUntil(lambda: not w.inference.batch_running(), timeout=120000)
    shown = [w.table_model.data(w.table_model.index(r, 1)) for r in range(20)]
    yes = shown.count("YES (demo)")
    assert yes and shown.count("NO (demo)") == 20 - yes
    w.archive.state.setCurrentText("model YES")  # the trial saw 0 rows here
    assert w.table_model.loaded_rows() == yes
    w.archive.state.setCurrentText("no model verdict")  # all done: an empty table
    assert w.table_model.loaded_rows() == 0
    assert w.vetting.entry is None and w.viewer.pages.currentWidget() is w.viewer.notice
    decided = w.vetting.decided_count()
    key(w, Qt.Key.Key_Y)  # nothing shown: nothing decided (the trial's Y went to the spectrum left on screen)
    assert w.vetting.decided_count() == decided and "nothing decided" in w.statusBar().currentMessage()
    qtbot.waitUntil(lambda: not w.batch_bar.isVisible(), timeout=10000)  # the finished batch's bar goes
    w.start_batch()  # the table is empty
    assert "nothing to pre-screen: the table is empty" in w.statusBar().currentMessage()
    w.archive.state.setCurrentText("any")
    w.start_batch()  # every spectrum is done now
    assert not w.inference.batch_running() and not w.batch_bar.isVisible()  # no "0 / 1" bar left running
    assert "nothing to pre-screen" in w.statusBar().currentMessage()


def test_a_filter_change_keeps_the_spectrum_shown_when_it_is_still_listed(qtbot, make_window, demo_archive,
                                                                          open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    for _ in range(5):
        key(w, Qt.Key.Key_Right)
    here = w.vetting.entry.key
    w.archive.state.setCurrentText("undecided")
    w.archive.state.setCurrentText("any")  # the trial jumped back to spectrum 1 here
    assert w.vetting.entry.key == here and w.vetting.row == 5
    assert w.archive.table.currentIndex().row() == 5


def test_the_archive_summary_agrees_with_the_index(tmp_path, spectra_dir):
    from speco3.spectra import ArchiveIndex

    folder = tmp_path / "a"
    folder.mkdir()
    for rel in ("desi/coadd-sv3-dark-26065.fits", "generic/gbt_1d.fits", "sdss/spec-0266-51602-0638.fits"):
        shutil.copy(spectra_dir / rel, folder)
    ix = ArchiveIndex(tmp_path / "ix.sqlite")
    ix.scan(folder)
    text = archive_summary(ix.summary(), ix.count(usable=False), str(folder))
    assert text.startswith("4 spectra in 3 files") and "1 unreadable" in text and "1 sky fibres" in text


def test_a_unit_that_names_the_quantity_is_not_doubled():
    w = np.linspace(15000, 17000, 10)
    apogee = Spectrum(w, np.ones(10), flux_unit="Flux (10^-17 erg/s/cm^2/Ang)")
    assert flux_axis_label(apogee) == "Flux (10^-17 erg/s/cm^2/Ang)"
    assert flux_axis_label(Spectrum(w, np.ones(10), flux_unit="erg/s/cm2/A")) == "Flux (erg/s/cm2/A)"
    assert flux_axis_label(Spectrum(w, np.ones(10))) == "Flux (no unit in the file)"


def test_the_report_is_titled_by_the_archive(qtbot, make_window, demo_archive, open_and_wait, key, tmp_path):
    w = make_window()
    open_and_wait(w, demo_archive)
    key(w, Qt.Key.Key_Y)
    html = write_report(w.vetting.store, tmp_path / "r.html").read_text(encoding="utf-8")
    assert f"<title>Spec-o3 vetting report — {demo_archive.name}</title>" in html


def _set_server_url(w, url: str) -> None:
    """Settings → Model server: type ``url`` and press OK, as the user does (the real dialog)."""
    def fill_and_accept() -> None:
        dlg = QApplication.activeModalWidget()
        assert isinstance(dlg, SettingsDialog)
        dlg.server_url.setText(url)
        dlg.accept()

    QTimer.singleShot(0, fill_and_accept)
    w.open_settings()


def test_a_server_set_in_settings_joins_the_model_box_without_taking_the_demo_s_place(qtbot, make_window,
                                                                                      demo_archive, open_and_wait):
    """The trial: with the scripted demo chosen on the demo archive, a server URL set in Settings silently became
    the model, in that session and the next ones. Now the server is offered, the demo stays chosen, the status bar
    says so, and a restart chooses the demo again."""
    from speco3.engine.choice import DEMO, ModelServer

    w = make_window()
    open_and_wait(w, demo_archive)
    panel = w.agent_panel
    panel.model_box.setCurrentIndex(panel.choices().index(DEMO))  # the user chooses the scripted demo
    url = "http://127.0.0.1:9"

    _set_server_url(w, url)
    assert w.settings.server_url == url
    assert panel.choice() == DEMO and panel.model_box.currentText().endswith("scripted demo — not a model")
    assert any(isinstance(c, ModelServer) and c.url == url for c in panel.choices()), panel.choices()
    said = w.statusBar().currentMessage()
    assert f"served model @ {url} added to the Model box" in said and "stays chosen" in said, said
    w.vetting.go_to(1)  # another spectrum fills the box again: the choice stays
    qtbot.waitUntil(lambda: w.vetting.row == 1)
    assert panel.choice() == DEMO
    w.close()
    w2 = make_window()  # the next session: the settings file as saved
    open_and_wait(w2, demo_archive)
    assert w2.settings.server_url == url and w2.agent_panel.choice() == DEMO
    assert any(isinstance(c, ModelServer) for c in w2.agent_panel.choices())
    # the server chosen by the user is chosen again at the next start
    box = w2.agent_panel.model_box
    box.setCurrentIndex(next(i for i, c in enumerate(w2.agent_panel.choices()) if isinstance(c, ModelServer)))
    w2.close()
    w3 = make_window()
    open_and_wait(w3, demo_archive)
    assert isinstance(w3.agent_panel.choice(), ModelServer)


def test_a_server_set_in_settings_is_chosen_when_nothing_usable_was(qtbot, make_window, tmp_path):
    """No model installed and no demo spectrum shown: the empty model box takes the server, and says so."""
    from speco3.engine.choice import ModelServer

    w = make_window()
    assert w.agent_panel.choice() is None
    url = "http://127.0.0.1:9"

    _set_server_url(w, url)
    assert isinstance(w.agent_panel.choice(), ModelServer)
    assert w.statusBar().currentMessage() == f"served model @ {url} added to the Model box and chosen"

"""Text from files, stores and peers is shown as text (speco3.gui.text): hostile file names and header values cannot
hide, widen or restyle the vetting screen (pytest-qt offscreen; the window test leaves a 1366×768 screenshot)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gui

HIDE = "<!--hidden.fits"
WIDE = "<img width=6000 height=40 src=x>.fits"
BANNER = "<span style='color:red;font-size:48pt'>CV CONFIRMED</span>"


def rendered(rich: str) -> str:
    """What Qt draws for a rich-text string: its plain text."""
    from PySide6.QtGui import QTextDocument

    doc = QTextDocument()
    doc.setHtml(rich)
    return doc.toPlainText()


def _spectrum(name: str, subclass: str = "CV", unit: str = "", note: str | None = None):
    from speco3.spectra.model import Spectrum, SpectrumMeta

    w = np.linspace(3700, 9100, 2000)
    meta = SpectrumMeta(survey="LAMOST", data_release="DR7", file_name=name, cls="STAR", subclass=subclass,
                        redshift=0.01, redshift_source="<i>pipeline</i>", note=note)
    return Spectrum(w, 100 + np.sin(w / 50), np.ones(w.size), meta=meta, flux_unit=unit)


@pytest.mark.parametrize("name", [HIDE, WIDE, "a&amp;b <b>bold</b>.fits"])
def test_viewer_header_shows_file_values_as_written(qtbot, name):
    from speco3.gui.viewer import SpectrumViewer

    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    viewer.resize(700, 400)
    viewer.show()
    viewer.set_spectrum(_spectrum(name, BANNER, unit="<img width=3000 src=y>", note="<!-- the rest"))
    qtbot.waitExposed(viewer)
    text = rendered(viewer.header.text())
    assert text.startswith(name + " · LAMOST DR7 · STAR " + BANNER + " · z = 0.01000 (<i>pipeline</i>)"), text
    assert "S/N" in text or "frame" in text  # what follows the file's values is still there
    assert text.endswith("<!-- the rest")
    assert viewer.header.sizeHint().width() < 1400 and viewer.width() == 700
    axis = viewer.plot.getPlotItem().getAxis("left")
    assert rendered(axis.label.toHtml()).strip() == "Flux (<img width=3000 src=y>)"


def test_labels_and_tooltips_with_markup_stay_text(qtbot):
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QLabel

    from speco3.gui.text import esc, literal, message, tooltip

    assert tooltip("plain path/a.fits") == "plain path/a.fits"  # unchanged where Qt would not guess rich text
    tip = tooltip(WIDE + "\nsecond line")
    assert rendered(tip) == WIDE + "\nsecond line"
    assert esc(BANNER) == "&lt;span style='color:red;font-size:48pt'&gt;CV CONFIRMED&lt;/span&gt;"
    assert literal("Hα {value} }{").format(value=1.0) == "Hα {value} }{"
    box = message(None, "t", BANNER)
    qtbot.addWidget(box)
    assert box.textFormat() == Qt.TextFormat.PlainText
    label = QLabel(BANNER, textFormat=Qt.TextFormat.PlainText)
    qtbot.addWidget(label)
    plain = QLabel("CV CONFIRMED")
    qtbot.addWidget(plain)
    assert label.sizeHint().height() == plain.sizeHint().height()  # no 48 pt line


def test_window_with_a_hostile_file_keeps_its_size(qtbot, make_window, demo_archive, open_and_wait, tmp_path):
    """A real FITS file named like markup, with a SUBCLASS styled as a red banner, in the archive: the table, the
    header and the window show the characters; the window stays 1366×768. Screenshot: tmp or SPECO3_SHOT_DIR."""
    from astropy.io import fits

    from speco3.demo import CATALOGUE, write_demo_spectrum

    hostile = demo_archive / (WIDE.replace(".fits", "") + HIDE)
    write_demo_spectrum(hostile, CATALOGUE[0], 0)
    fits.setval(hostile, "SUBCLASS", value=BANNER)
    w = make_window()
    w.resize(1366, 768)
    open_and_wait(w, demo_archive)
    model = w.table_model
    model.fetch_all()
    row = next(r for r in range(model.loaded_rows()) if model.entry(r).file_name == hostile.name)
    w.vetting.go_to(row)
    qtbot.waitUntil(lambda: w.viewer.spectrum is not None and w.viewer.spectrum.name == hostile.name, timeout=10000)
    qtbot.wait(200)
    text = rendered(w.viewer.header.text())
    assert text.startswith(hostile.name + " · ") and BANNER in text, text
    assert (w.width(), w.height()) == (1366, 768)
    assert w.viewer.header.height() < 80  # two lines of text, not a 48 pt banner
    shots = Path(os.environ.get("SPECO3_SHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    assert w.grab().save(str(shots / "hostile-file-1366x768.png"))


def test_a_stored_trace_from_elsewhere_replays_as_text(qtbot):
    """A trace received from a colleague or a cluster run (untrusted JSON): its verdict, answer and model id are
    shown as their characters in the verdict line."""
    from speco3.agent.steps import Outcome, VerdictStep
    from speco3.agent.trace import Trace
    from speco3.gui.agent_panel import AgentPanel

    panel = AgentPanel()
    qtbot.addWidget(panel)
    trace = Trace(model={"model_id": BANNER})
    trace.add(VerdictStep(turn=1, outcome=Outcome.YES, verdict=BANNER, answer=WIDE + " & more"))
    panel.show_trace(trace, HIDE)
    shown = rendered(panel.verdict.text())
    assert shown.startswith(BANNER + " — model " + BANNER) and WIDE + " & more" in shown, shown
    assert rendered(panel.transcript.toHtml()).startswith(HIDE)

"""Fixtures of the desktop-app tests: a demo archive, a main window with a scripted engine, helpers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gui_qtcheck import our_worker_threads, qt_garbage

from speco3.demo import write_demo_archive

# A session that zooms once and answers; replayed from the start for every episode.
SCRIPT = [
    "<think>The continuum is blue and Balmer lines look like emission. Let me zoom on Hβ.</think>\n"
    "<tool_call>\n{\"name\": \"spectral_visualization_tool\", \"arguments\": "
    "{\"label\": \"Zoom on Hβ region\", \"wavelength_range\": [4800, 4920]}}\n</tool_call>",
    "<think>Hβ is a strong emission line and He II 4686 is present.</think>\n"
    "<answer>\\boxed{YES}</answer> Balmer and He II emission on a blue continuum.",
]


@pytest.fixture(scope="session")
def demo_master(tmp_path_factory) -> Path:
    return write_demo_archive(tmp_path_factory.mktemp("demo-master") / "demo")[0].parent


@pytest.fixture
def demo_archive(demo_master, tmp_path) -> Path:
    """A private copy of the demo archive (tests may add files)."""
    target = tmp_path / "archive"
    shutil.copytree(demo_master, target)
    return target


class EngineFactory:
    """Engine opener for tests: a `ScriptedEngine` per call, recording what was opened."""

    def __init__(self, outputs=None, delay_s: float = 0.0):
        self.outputs = list(outputs or SCRIPT)
        self.delay_s = delay_s
        self.opened: list[str] = []
        self.engines = []

    def __call__(self, model_id, settings):
        from speco3.engine.base import ModelInfo
        from speco3.engine.scripted import ScriptedEngine

        self.opened.append(model_id)
        eng = ScriptedEngine(self.outputs, delay_s=self.delay_s, settings=settings,
                             info=ModelInfo(model_id=model_id, quant="Q4_K_M"))
        self.engines.append(eng)
        return eng


@pytest.fixture
def engine_factory():
    return EngineFactory()


@pytest.fixture
def fake_models(monkeypatch):
    """Pretend one model is installed (the engine comes from the test's engine factory)."""
    from speco3.engine.choice import InstalledModel
    from speco3.gui.agent_panel import ModelEntry

    entries = [ModelEntry(InstalledModel("test-model"), "test-model (Q4_K_M)")]
    monkeypatch.setattr("speco3.gui.main_window.installed_models", lambda: entries)


@pytest.fixture
def make_window(qtbot, engine_factory):
    """Factory of main windows (closed at teardown); dialogs are suppressed."""
    from PySide6.QtWidgets import QApplication

    from speco3.gui.main_window import MainWindow
    from speco3.gui.settings import AppSettings

    QApplication.instance().setProperty("speco3_no_dialogs", True)
    windows = []

    def make(settings=None, opener=None):
        settings = settings or AppSettings.load()
        settings.vetter = settings.vetter or "tester"
        w = MainWindow(settings=settings, engine_opener=opener or engine_factory)
        w.show()  # not qtbot.addWidget: the window deletes itself when closed (WA_DeleteOnClose); closed below
        windows.append(w)
        return w

    yield make
    from shiboken6 import isValid

    for w in windows:
        if isValid(w) and w.isVisible():
            w.close()


@pytest.fixture(autouse=True)
def qt_objects_die_on_gui_thread(request):
    """After every GUI test: no worker thread of ours is left running, and none of our Qt objects is left for the
    garbage collector (windows closed here are deleted by Qt, on this thread, as the app does at the end of its loop;
    pyqtgraph's own Python-owned menus are collected by the GUI-thread collector the main window installs)."""
    yield
    if "qapp" not in request.fixturenames and "qtbot" not in request.fixturenames:
        return
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    for w in QApplication.topLevelWidgets():
        w.close()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    running = our_worker_threads()
    assert not running, f"worker threads still running after the windows closed: {running}"
    leaked = [name for name in qt_garbage() if name.startswith("speco3.")]
    assert not leaked, f"Qt objects of ours left to the cyclic garbage collector: {leaked}"
    from speco3.gui.collector import restore_automatic_garbage_collection

    restore_automatic_garbage_collection()  # the next non-GUI test runs with Python's default collector


@pytest.fixture
def open_and_wait(qtbot):
    """``open_and_wait(window, folder)``: open an archive, wait until indexed and a spectrum is current."""

    def run(window, folder, timeout=30000) -> None:
        window.open_archive(folder)
        qtbot.waitUntil(lambda: window.index is not None and window.vetting.entry is not None, timeout=timeout)

    return run


@pytest.fixture
def key(qtbot):
    """``key(window, Qt.Key.X)``: press a key with the archive table focused (as a vetter would)."""
    from PySide6.QtCore import Qt

    def press(window, qt_key, modifier=None) -> None:
        qtbot.keyClick(window.archive.table, qt_key, modifier or Qt.KeyboardModifier.NoModifier)

    return press


@pytest.fixture
def store_with_adapter(tiny_gguf, tmp_path):
    """The model store (the test's data folder) with the tiny F32 and F16 pairs and an adapter made for F32."""
    from speco3_base.fileio import sha256_file
    from speco3_converters.lora import convert_lora
    from speco3_models.store import ModelStore
    from speco3_testkit.tinylora import make_random_lora

    text, mmproj = tiny_gguf("F32")
    store = ModelStore()
    store.import_pair(text, mmproj, "tiny-f32", copy=False)
    store.import_pair(*tiny_gguf("F16"), "tiny-f16", copy=False)
    res = convert_lora(make_random_lora(tmp_path / "peft"), text, tmp_path / "cv-lora.gguf",
                       base_sha256=sha256_file(text), base_name="tiny-f32")
    return store, store.add_adapter(res.path)


@pytest.fixture
def shown_viewer(qtbot):
    """``shown_viewer(redshift)``: a 700×400 `SpectrumViewer` on screen with a smooth 3700–9100 Å spectrum."""
    import numpy as np

    from speco3.gui.viewer import SpectrumViewer
    from speco3.spectra.model import Spectrum, SpectrumMeta

    def make(redshift: float = 0.0) -> SpectrumViewer:
        viewer = SpectrumViewer()
        qtbot.addWidget(viewer)
        viewer.resize(700, 400)
        viewer.show()
        w = np.linspace(3700, 9100, 3909)
        viewer.set_spectrum(Spectrum(w, 100 + np.sin(w / 50), np.ones(w.size), meta=SpectrumMeta(redshift=redshift)))
        qtbot.waitExposed(viewer)
        return viewer

    return make

"""Model manager and settings dialogs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from speco3.engine.base import EngineSettings
from speco3.gui.dialogs import ModelManagerDialog, SettingsDialog
from speco3.gui.settings import AppSettings

pytestmark = pytest.mark.gui


class StubStore:
    """The part of `ModelStore` the dialog uses, in memory (the real store is tested in tests/models)."""

    def __init__(self):
        rec = SimpleNamespace(path="/m/text.gguf")
        self.models = {"spec-o3-7b-Q4_K_M": SimpleNamespace(
            name="spec-o3-7b-Q4_K_M", text=rec, mmproj=SimpleNamespace(path="/m/mmproj.gguf"), quant="Q4_K_M",
            mmproj_quant="F16", hidden_size=3584, n_layers=28, created="2026-11-29",
            provenance=SimpleNamespace(describe=lambda: "imported"))}
        self.verified = []

    def list(self):
        return list(self.models.values())

    def get(self, name):
        return self.models[name]

    def verify(self, name, progress=None):
        progress("hashing", 5, 10)
        self.verified.append(name)
        return SimpleNamespace(lines=lambda: [f"{name}: OK"])

    def remove(self, name):
        return self.models.pop(name)


def test_model_manager_lists_verifies_and_reports_offline_pull(qtbot, monkeypatch):
    store = StubStore()
    dlg = ModelManagerDialog(store=store)
    qtbot.addWidget(dlg)
    assert dlg.list.count() == 1
    dlg.list.setCurrentRow(0)
    assert "Q4_K_M" in dlg.details.toPlainText() and "3584" in dlg.details.toPlainText()
    dlg.verify()
    qtbot.waitUntil(lambda: "OK" in dlg.details.toPlainText(), timeout=10000)
    assert store.verified == ["spec-o3-7b-Q4_K_M"]
    dlg.pull_name.setEditText("spec-o3-7b")
    dlg.pull()
    qtbot.waitUntil(lambda: "offline mode is on" in dlg.details.toPlainText(), timeout=10000)  # HF_HUB_OFFLINE
    monkeypatch.setattr("speco3.gui.dialogs.QMessageBox.question",
                        lambda *a, **k: __import__("PySide6.QtWidgets").QtWidgets.QMessageBox.StandardButton.Yes)
    dlg.list.setCurrentRow(0)
    dlg.remove()
    assert dlg.list.count() == 0 and "No model installed" in dlg.details.toPlainText()


def test_model_manager_on_an_empty_real_store(qtbot):
    dlg = ModelManagerDialog()
    qtbot.addWidget(dlg)
    assert dlg.list.count() == 0
    assert "spec-o3 models import" in dlg.details.toPlainText()


def test_settings_dialog_writes_settings_and_rejects_conflicts(qtbot):
    s = AppSettings()
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    dlg.vetter.setText("M. Jia")
    dlg.threads.setValue(6)
    dlg.gpu_layers.setValue(0)
    dlg.image_tokens.setValue(640)
    dlg.kv_type.setCurrentText("q8_0")
    assert dlg.parallel.value() == EngineSettings().n_seq  # the engine's default number of sequences
    dlg.parallel.setValue(2)
    dlg.key_edits["next"].setText("Y")  # clashes with YES
    dlg.accept()
    assert "bound to both" in dlg.error.text() and s.vetter == ""
    dlg.key_edits["next"].setText("J")
    dlg.accept()
    assert (s.vetter, s.n_threads, s.n_gpu_layers, s.image_max_tokens) == ("M. Jia", 6, 0, 640)
    assert s.keymap == {"next": "J"}
    assert s.kv_type == "q8_0" and s.engine_settings().kv_type == "q8_0"
    assert s.parallel == 2 and s.engine_settings().n_seq == 2


def test_settings_file_with_a_bad_parallel_value_keeps_the_default(tmp_path):
    import json

    path = tmp_path / "desktop.json"
    path.write_text(json.dumps({"parallel": 0, "n_ctx": 8192}))
    assert AppSettings.load(path).parallel == EngineSettings().n_seq
    path.write_text(json.dumps({"parallel": 3}))
    assert AppSettings.load(path).engine_settings().n_seq == 3


def test_settings_file_with_an_unknown_kv_type_keeps_the_default(tmp_path):
    import json

    path = tmp_path / "desktop.json"
    path.write_text(json.dumps({"kv_type": "q4_0", "n_ctx": 8192}))
    s = AppSettings.load(path)
    assert s.kv_type == "f16" and s.n_ctx == 8192


def test_settings_model_server_tab(qtbot, tmp_path):
    s = AppSettings()
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    dlg.server_url.setText("gpu-box:8080")  # no scheme
    dlg.accept()
    assert "http(s)://" in dlg.error.text() and s.server_url == ""
    dlg.server_url.setText("https://gpu-box:8080/v1")
    dlg.server_key_env.setText("SPECO3_KEY")
    dlg.accept()
    assert (s.server_url, s.server_api_key_env) == ("https://gpu-box:8080/v1", "SPECO3_KEY")
    cfg = s.server_config()
    assert cfg.url == "https://gpu-box:8080" and cfg.api_key_env == "SPECO3_KEY" and cfg.model is None
    s.save(tmp_path / "d.json")
    again = AppSettings.load(tmp_path / "d.json")
    assert again.server_config().url == "https://gpu-box:8080" and AppSettings().server_config() is None


def test_model_manager_stays_open_while_its_job_runs_and_joins_it(qtbot):
    """Closing the dialog mid-job is refused with a note (its worker would outlive the widgets); after the job
    finishes it closes, and no worker thread is left."""
    import threading

    from gui_qtcheck import our_worker_threads

    gate = threading.Event()

    class SlowStore(StubStore):
        def verify(self, name, progress=None):
            gate.wait(20)
            return super().verify(name, progress)

    store = SlowStore()
    dlg = ModelManagerDialog(store=store)
    qtbot.addWidget(dlg)
    dlg.show()
    dlg.list.setCurrentRow(0)
    dlg.verify()
    assert our_worker_threads() == ["speco3-model-job"] and not dlg.close_box.isEnabled()
    dlg.reject()
    assert dlg.isVisible() and "closes when it has finished" in dlg.details.toPlainText()
    gate.set()
    qtbot.waitUntil(lambda: "OK" in dlg.details.toPlainText(), timeout=10000)
    assert our_worker_threads() == [] and dlg.close_box.isEnabled()
    dlg.reject()
    assert not dlg.isVisible()


def test_settings_dialog_switches_samp(qtbot):
    s = AppSettings()
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    assert not dlg.samp.isChecked()  # off by default
    dlg.samp.setChecked(True)
    dlg.samp_match.setValue(12)
    dlg.accept()
    assert s.samp_enabled is True and s.samp_match_arcsec == 12


def test_settings_dialog_fits_a_1366x768_screen_without_a_horizontal_scrollbar_or_cut_labels(qtbot):
    """The dialog opened cramped at 1366×768 (a horizontal scrollbar, labels and check boxes cut): it now opens as
    wide as its widest page within the screen; only a page taller than the screen scrolls, vertically."""
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QCheckBox, QLabel

    dlg = SettingsDialog(AppSettings())
    qtbot.addWidget(dlg)
    dlg.fit_to(QRect(0, 0, 1366, 728))  # 768 less a task bar
    dlg.show()
    assert dlg.width() <= 1366 and dlg.height() <= 728
    for i in range(dlg.tabs.count()):
        dlg.tabs.setCurrentIndex(i)
        qtbot.wait(10)
        area = dlg.tabs.widget(i)
        assert not area.horizontalScrollBar().isVisible(), dlg.tabs.tabText(i)
        words = area.widget().findChildren(QLabel) + area.widget().findChildren(QCheckBox)
        cut = [w.text() for w in words if w.isVisible() and w.width() < w.sizeHint().width()]
        assert cut == [], (dlg.tabs.tabText(i), cut)

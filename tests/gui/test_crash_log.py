"""Uncaught GUI exceptions go to the log and to a dialog naming the log; Help → Open log folder; the model
manager shows the memory fit of a model before download."""

from __future__ import annotations

import logging
import sys

import pytest

from speco3 import applog
from speco3.gui import crash

pytestmark = [pytest.mark.gui]


@pytest.fixture
def log_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECO3_LOG_DIR", str(tmp_path / "logs"))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    path = applog.setup_logging("spec-o3-desktop")
    yield path
    for h in root.handlers:
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)


def test_uncaught_exception_is_logged_and_shown_once(qtbot, log_file, monkeypatch):
    previous = sys.excepthook
    crash.install_excepthook()
    try:
        for _ in range(2):  # a second error while the dialog is open adds no second dialog
            try:
                raise KeyError("no such column 'flux'")
            except KeyError:
                sys.excepthook(*sys.exc_info())
        boxes = sys.excepthook.boxes
        assert len(boxes) == 1
        box = boxes[0]
        qtbot.addWidget(box)
        assert box.isVisible() and str(log_file) in box.text() and "KeyError" in box.text()
        assert "Help → Open log folder" in box.text()
        applog.file_handler().flush()
        text = log_file.read_text()
        assert text.count("uncaught exception: KeyError") == 2 and "Traceback (most recent call last)" in text
        box.close()
        assert not crash._showing
    finally:
        sys.excepthook = previous


def test_help_menu_opens_the_log_folder(make_window, monkeypatch, tmp_path):
    opened = []
    monkeypatch.setattr(crash.QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    w = make_window()
    help_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Help")
    action = next(a for a in help_menu.actions() if a.text() == "Open log folder")
    action.trigger()
    assert opened == [str(applog.log_path().parent)] and applog.log_path().parent.is_dir()


def test_model_manager_shows_the_fit_before_download(qtbot):
    from speco3.gui.dialogs import ModelManagerDialog

    dlg = ModelManagerDialog()
    qtbot.addWidget(dlg)
    dlg.pull_name.setCurrentText("spec-o3-7b")
    text = dlg.fit_label.text()
    assert text.startswith("spec-o3-7b (Q4_K_M): ")
    assert "fits on this machine: " in text or " needs " in text
    assert "GiB" in text

"""The app with its data folder on a read-only place (#42): it browses and vets with the decisions kept in memory,
says so in the status bar, and writes them out once the user chooses a data folder that can be written.

The folder is read-only for real, also as root (`speco3_testkit.readonly`: permissions, or a tmpfs remounted ro).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from speco3.gui.settings import AppSettings
from speco3.gui.vetting import store_path_for
from speco3.vetting import VettingStore
from speco3_testkit.readonly import read_only_folder


def test_read_only_data_folder_browses_in_memory_then_saves_to_a_chosen_place(
        qtbot, make_window, demo_archive, tmp_path, open_and_wait, key):
    ro = tmp_path / "ro-data"
    with read_only_folder(ro):
        settings = AppSettings.load()
        settings.data_folder = str(ro)
        w = make_window(settings)
        open_and_wait(w, demo_archive)  # indexed and a spectrum shown: the archive is browsed
        assert w.table_model.loaded_rows() > 0
        assert w.vetting.store.is_in_memory
        assert w.note_label.isVisible() and "data folder is read-only" in w.note_label.text()
        shown = w.statusBar().currentMessage()  # also the warning dialog's text (dialogs are off in tests)
        assert str(ro) in shown and "read-only" in shown and "kept in memory only" in shown
        key(w, Qt.Key.Key_Y)  # vetting goes on, in memory
        assert [d.decision for d in w.vetting.store.decisions(w.vetting.task_id)] == ["YES"]
        assert not any(Path(ro).iterdir())  # nothing was written there
        # the user chooses a data folder that can be written: the decision made meanwhile goes there
        w.settings.data_folder = str(tmp_path / "data")
        w._store_place_changed()
        target = store_path_for(w.archive_root, tmp_path / "data")
        assert w.vetting.store.path == target and not w.vetting.store.is_in_memory
        assert not w.note_label.isVisible()
        key(w, Qt.Key.Key_N)
    with VettingStore(target, readonly=True) as store:
        assert sorted(d.decision for d in store.decisions()) == ["NO", "YES"]


def test_a_cache_folder_that_cannot_be_written_is_named_and_the_archive_still_opens(
        qtbot, make_window, demo_archive, tmp_path, open_and_wait, monkeypatch):
    """The archive index lives in the cache folder: under a regular file (ENOTDIR, whoever runs) the app indexes in
    a temporary folder and says so once in the status bar, naming the folder, and keeps saying it in the red note
    (the messages that follow the opening, the store's line and "resumed at …", do not hide it)."""
    (tmp_path / "file").write_text("x")
    cache = tmp_path / "file" / "cache"
    monkeypatch.setenv("SPECO3_CACHE_DIR", str(cache))
    w = make_window()
    shown: list[str] = []
    w.statusBar().messageChanged.connect(shown.append)
    open_and_wait(w, demo_archive)
    assert w.table_model.loaded_rows() > 0 and w.index is not None
    said = [m for m in shown if "cache folder" in m]
    assert len(said) == 1 and f"cache folder {cache} cannot be written (Not a directory)" in said[0], shown
    qtbot.wait(3000)  # the opening's later messages come and go
    assert w.note_label.isVisible() and w.note_label.textFormat() == Qt.TextFormat.PlainText
    assert f"{cache} cannot be written" in w.note_label.text()
    assert "Not a directory" in w.note_label.toolTip() and "for this run only" in w.note_label.toolTip()

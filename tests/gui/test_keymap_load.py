"""Keymaps from desktop.json are validated on load: conflicting or unknown entries fall back, with a warning."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from speco3.gui.keymap import DEFAULT_KEYS, Keymap
from speco3.gui.settings import AppSettings

pytestmark = pytest.mark.gui


def test_conflicting_overrides_go_back_to_defaults():
    km = Keymap.from_settings({"next": "Y", "bogus": "K", "previous": "Ctrl+", "smooth_more": "J"})
    assert km.keys["next"] == DEFAULT_KEYS["next"] and km.keys["decide_yes"] == "Y"
    assert km.keys["smooth_more"] == "J" and km.keys["previous"] == DEFAULT_KEYS["previous"]
    assert km.conflicts() == []
    text = " | ".join(km.problems)
    assert "unknown action 'bogus'" in text and "unparsable key 'Ctrl+' for previous" in text
    assert "key Y of next also bound to decide_yes" in text
    # two overrides on one key: both go back; a swap of two keys is no conflict
    both = Keymap.from_settings({"zoom_in": "Q", "zoom_out": "Q"})
    assert both.keys["zoom_in"] == "=" and both.keys["zoom_out"] == "-" and len(both.problems) == 2
    swap = Keymap.from_settings({"next": "Left", "previous": "Right"})
    assert swap.keys["next"] == "Left" and swap.problems == []
    # a reset can free a default that another override took: resolved until no conflict is left
    chain = Keymap.from_settings({"next": "Y", "decide_no": "Right"})
    assert chain.conflicts() == [] and chain.keys["decide_no"] == "N" and chain.keys["next"] == "Right"


def test_window_warns_and_uses_defaults_for_a_broken_keymap_file(qtbot, make_window, demo_archive, open_and_wait):
    path = AppSettings.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"vetter": "kb", "keymap": {"next": "Y", "no_such_action": "K", "decide_no": "J"}}))
    w = make_window(settings=AppSettings.load())
    assert "keymap" in w.statusBar().currentMessage() and "decide_yes" in w.statusBar().currentMessage()
    open_and_wait(w, demo_archive)
    qtbot.keyClick(w.archive.table, Qt.Key.Key_Y)  # Y still decides YES (and advances)
    assert [d.decision for d in w.vetting.store.decisions("cv")] == ["YES"] and w.vetting.row == 1
    qtbot.keyClick(w.archive.table, Qt.Key.Key_Right)  # next is back on its default key
    assert w.vetting.row == 2
    qtbot.keyClick(w.archive.table, Qt.Key.Key_J)  # a valid override still applies
    assert [d.decision for d in w.vetting.store.decisions("cv")][-1] == "NO"
    assert json.loads(path.read_text())["keymap"]["next"] == "Y"  # the user's file is not rewritten behind them

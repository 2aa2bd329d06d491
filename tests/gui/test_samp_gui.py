"""SAMP in the desktop app: off by default; sends to a real peer; the peer drives the selection (pytest-qt)."""

from __future__ import annotations

import os
import threading

import pytest

import sampkit
from sampkit import POINT_AT, SPECTRUM_LOAD, TABLE_LOAD

pytestmark = [pytest.mark.gui, pytest.mark.allow_network_loopback]
samp_env, hub, recorder = sampkit.samp_env, sampkit.hub, sampkit.recorder  # fixtures


def _samp_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "speco3-samp" and t.is_alive()]


def test_samp_is_off_by_default(make_window):
    w = make_window()
    assert w.settings.samp_enabled is False
    assert w.samp.link is None and not w.samp.toggle.isChecked()
    assert w.samp.status.text() == "SAMP off"
    assert not w.samp.send_spectrum_action.isEnabled()


def test_no_hub_is_a_status_message(qtbot, samp_env, make_window):
    w = make_window()
    w.samp.toggle.setChecked(True)
    qtbot.waitUntil(lambda: "no SAMP hub running" in w.statusBar().currentMessage(), timeout=10000)
    assert w.settings.samp_enabled is True  # the switch is remembered
    w.samp.toggle.setChecked(False)
    assert w.samp.link is None and not _samp_threads()


def test_send_and_receive_with_a_peer(qtbot, recorder, make_window, demo_archive, open_and_wait):
    from speco3.interop.messages import HIGHLIGHT, SELECT_ROWS

    w = make_window()
    open_and_wait(w, demo_archive)
    w.samp.toggle.setChecked(True)
    qtbot.waitUntil(lambda: w.samp.status.text().startswith("SAMP on"), timeout=10000)
    qtbot.waitUntil(lambda: "(1 peers)" in w.samp.status.text(), timeout=10000)
    assert any("Recorder" in a.text() for a in w.samp.peers_menu.actions())

    # send: spectrum, queue table, position
    w.samp.send_spectrum()
    params = recorder.wait_for(SPECTRUM_LOAD)
    assert params["name"] == w.vetting.spectrum.name
    w.samp.send_table()
    tparams = recorder.wait_for(TABLE_LOAD)
    from astropy.table import Table

    from speco3.interop.messages import local_path

    sent = Table.read(local_path(tparams["url"]), format="votable")
    assert len(sent) == w.table_model.loaded_rows() == 20
    assert list(sent["key"]) == [w.table_model.entry(r).key for r in range(20)]
    w.samp.point_at()
    assert float(recorder.wait_for(POINT_AT)["ra"]) == pytest.approx(w.samp.position()[0])

    # receive: TOPCAT highlights row 5 of the table sent, then selects rows 7 and 3
    me = recorder.id_of("Spec-o3 Desktop")
    threading.Thread(target=recorder.call, args=(me, HIGHLIGHT, {"table-id": tparams["table-id"], "row": "5"}),
                     daemon=True).start()
    qtbot.waitUntil(lambda: w.vetting.row == 5, timeout=10000)
    assert w.vetting.entry.key == sent["key"][5]
    threading.Thread(target=recorder.call, daemon=True, args=(
        me, SELECT_ROWS, {"table-id": tparams["table-id"], "row-list": ["7", "3"]})).start()
    qtbot.waitUntil(lambda: w.table_model.is_candidate_list and w.table_model.loaded_rows() == 2, timeout=10000)
    assert w.vetting.entry.key == sent["key"][7]

    # Aladin points at a position: the nearest archive spectrum (within the tolerance) becomes current
    w.table_model.set_entries(None)
    qtbot.waitUntil(lambda: w.table_model.loaded_rows() == 20, timeout=5000)
    target = w.table_model.entry(11)
    threading.Thread(target=recorder.call, daemon=True, args=(
        me, POINT_AT, {"ra": repr(target.ra + 1.0 / 3600), "dec": repr(target.dec)})).start()
    qtbot.waitUntil(lambda: w.vetting.entry is not None and w.vetting.entry.key == target.key, timeout=10000)
    threading.Thread(target=recorder.call, daemon=True, args=(
        me, POINT_AT, {"ra": repr((target.ra + 0.5) % 360), "dec": repr(target.dec)})).start()
    qtbot.waitUntil(lambda: "no spectrum within 5″" in w.statusBar().currentMessage(), timeout=10000)

    # a candidate list arrives as a VOTable: it becomes the vetting queue through the candidate-list loader (the
    # user said "always" for this peer before: test_a_table_from_a_peer_asks_before_it_replaces_the_queue)
    w.samp.consent.remembered["Recorder"] = True
    cand = demo_archive / "candidates.vot"
    threading.Thread(target=recorder.call, daemon=True, args=(
        me, TABLE_LOAD, {"url": cand.resolve().as_uri(), "name": "cands"})).start()
    qtbot.waitUntil(lambda: w.table_model.is_candidate_list and w.table_model.loaded_rows() == 14, timeout=10000)

    # garbage from the peer: a status message, the window carries on
    threading.Thread(target=recorder.call, daemon=True, args=(me, HIGHLIGHT, {"row": "zz"})).start()
    qtbot.waitUntil(lambda: "ignored table.highlight.row" in w.statusBar().currentMessage(), timeout=10000)

    folder = w.samp.link.files.path
    w.close()  # closeEvent stops SAMP: threads joined, temporary files gone
    assert w.samp.link is None and not _samp_threads() and not folder.exists()


def test_hub_shutdown_shows_in_the_status(qtbot, hub, make_window):
    w = make_window()
    w.samp.toggle.setChecked(True)
    qtbot.waitUntil(lambda: w.samp.status.text().startswith("SAMP on"), timeout=10000)
    hub.stop()
    qtbot.waitUntil(lambda: w.samp.status.text() == "SAMP: hub lost", timeout=15000)
    assert not w.samp.send_spectrum_action.isEnabled()


def test_a_table_from_a_peer_asks_before_it_replaces_the_queue(qtbot, hub, recorder, make_window, demo_archive,
                                                                open_and_wait):
    """No: the queue stays. Yes with "always": loaded, remembered per peer name and saved; the next table from that
    name loads without a question. The question shows the peer's name as plain text."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication, QMessageBox

    from speco3.gui.settings import AppSettings

    w = make_window()
    open_and_wait(w, demo_archive)
    w.samp.toggle.setChecked(True)
    qtbot.waitUntil(lambda: w.samp.status.text().startswith("SAMP on"), timeout=10000)
    cand = (demo_archive / "candidates.vot").resolve().as_uri()
    hostile = sampkit.Recorder(hub, name="<b style='font-size:40pt'>TOPCAT</b>")
    app = QApplication.instance()
    app.setProperty("speco3_no_dialogs", False)

    def offer(peer) -> QMessageBox:
        me = peer.id_of("Spec-o3 Desktop")
        threading.Thread(target=peer.call, args=(me, TABLE_LOAD, {"url": cand, "name": "cands"}), daemon=True).start()
        qtbot.waitUntil(lambda: w.samp.asking is not None, timeout=10000)
        return w.samp.asking

    try:
        box = offer(hostile)
        assert box.textFormat() == Qt.TextFormat.PlainText and "“<b style='font-size:40pt'>TOPCAT</b>”" in box.text()
        if os.environ.get("SPECO3_SHOT_DIR"):  # for people to look at
            box.grab().save(os.path.join(os.environ["SPECO3_SHOT_DIR"], "samp-table-question.png"))
        box.button(QMessageBox.StandardButton.No).click()
        qtbot.waitUntil(lambda: "not loaded" in w.statusBar().currentMessage(), timeout=5000)
        assert not w.table_model.is_candidate_list and w.samp.asking is None

        box = offer(recorder)
        assert "“Recorder”" in box.text()
        box.checkBox().setChecked(True)
        box.button(QMessageBox.StandardButton.Yes).click()
        qtbot.waitUntil(lambda: w.table_model.is_candidate_list and w.table_model.loaded_rows() == 14, timeout=10000)
        assert w.settings.samp_table_peers == {"Recorder": True}
        assert AppSettings.load().samp_table_peers == {"Recorder": True}  # saved with the settings

        w.table_model.set_entries(None)
        qtbot.waitUntil(lambda: not w.table_model.is_candidate_list, timeout=5000)
        me = recorder.id_of("Spec-o3 Desktop")
        threading.Thread(target=recorder.call, args=(me, TABLE_LOAD, {"url": cand, "name": "cands"}),
                         daemon=True).start()
        qtbot.waitUntil(lambda: w.table_model.is_candidate_list and w.table_model.loaded_rows() == 14, timeout=10000)
        assert w.samp.asking is None  # remembered: not asked again
    finally:
        app.setProperty("speco3_no_dialogs", True)
        hostile.close()


def test_remembered_answers_are_read_back_with_their_types_checked(tmp_path):
    from speco3.gui.settings import AppSettings
    from speco3.interop.consent import QueueConsent

    raw = {"samp_table_peers": {"topcat": True, "Aladin": False, "odd": "yes"}, "samp_max_table_mb": -3}
    s = AppSettings.from_dict(raw)
    assert s.samp_table_peers == {"topcat": True, "Aladin": False} and s.samp_max_table_mb == 64
    consent = QueueConsent(s.samp_table_peers)
    assert consent.known("topcat") is True and consent.known("Aladin") is False and consent.known("x") is None
    assert consent.answer("  new\npeer ", True, remember=False) and consent.known("new peer") is None
    consent.answer("  new\npeer ", False, remember=True)
    assert s.samp_table_peers["new peer"] is False  # the settings' own dict: saved with them
    s.save(tmp_path / "desktop.json")
    assert AppSettings.load(tmp_path / "desktop.json").samp_table_peers == s.samp_table_peers

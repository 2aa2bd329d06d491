"""The desktop app on JSAMP's hub (pytest-qt): the Peers menu shows what a wildcard subscriber takes, the toolbar's
sends reach JSAMP's snooper, and JSAMP's messagesender drives the window (highlight, select, point, load a table)."""

from __future__ import annotations

import pytest

import javapeers
import sampkit
from sampkit import POINT_AT, SPECTRUM_LOAD, TABLE_LOAD

pytestmark = [pytest.mark.gui, pytest.mark.allow_network_loopback, pytest.mark.java]
samp_env = sampkit.samp_env
java, jsamp_hub, probe, snooper = javapeers.java, javapeers.jsamp_hub, javapeers.probe, javapeers.snooper


def _answered(qtbot, sent: javapeers.SentMessage) -> str:
    qtbot.waitUntil(sent.done, timeout=60000)  # the window keeps its event loop while JSAMP waits for the reply
    status, out = sent.wait(5)
    assert status == "samp.ok", out
    return out


def test_app_on_jsamp_hub_sends_to_snooper_and_obeys_messagesender(qtbot, snooper, java, probe, make_window,
                                                                   demo_archive, open_and_wait):
    from astropy.table import Table

    from speco3.interop.messages import HIGHLIGHT, SELECT_ROWS, local_path

    w = make_window()
    open_and_wait(w, demo_archive)
    w.samp.toggle.setChecked(True)
    qtbot.waitUntil(lambda: "(2 peers)" in w.samp.status.text(), timeout=20000)  # the snooper and the probe
    labels = [a.text() for a in w.samp.peers_menu.actions()]
    assert "snoop — spectra, tables, sky positions" in labels, labels
    assert "Probe — no shared message types" in labels, labels

    w.samp.send_spectrum()
    assert f'"name": "{w.vetting.spectrum.name}"' in javapeers.snooped(snooper, SPECTRUM_LOAD)
    w.samp.point_at()
    assert '"ra"' in javapeers.snooped(snooper, POINT_AT)
    w.samp.send_table()
    logged = javapeers.snooped(snooper, TABLE_LOAD)
    table_id = next(t.strip('",') for t in logged.split() if t.strip('",').startswith("speco3-"))
    url = w.samp.link.files.path.joinpath(f"{table_id}.vot").resolve().as_uri()
    sent = Table.read(local_path(url), format="votable")
    assert len(sent) == w.table_model.loaded_rows() == 20
    qtbot.waitUntil(lambda: "table.load.votable → snoop: warning" in w.samp.last_status, timeout=10000)

    me = probe.id_of("Spec-o3 Desktop")
    _answered(qtbot, javapeers.message_sender(java, HIGHLIGHT, {"table-id": table_id, "url": url, "row": "5"}, me))
    qtbot.waitUntil(lambda: w.vetting.row == 5, timeout=10000)
    assert w.vetting.entry.key == sent["key"][5]

    _answered(qtbot, javapeers.message_sender(java, SELECT_ROWS, {"table-id": table_id, "row-list": ["7", "3"]}, me))
    qtbot.waitUntil(lambda: w.table_model.is_candidate_list and w.table_model.loaded_rows() == 2, timeout=10000)
    assert w.vetting.entry.key == sent["key"][7]

    w.table_model.set_entries(None)
    qtbot.waitUntil(lambda: w.table_model.loaded_rows() == 20, timeout=5000)
    target = w.table_model.entry(11)
    _answered(qtbot, javapeers.message_sender(
        java, POINT_AT, {"ra": repr(target.ra + 1.0 / 3600), "dec": repr(target.dec)}, me))
    qtbot.waitUntil(lambda: w.vetting.entry is not None and w.vetting.entry.key == target.key, timeout=10000)

    w.samp.consent.remembered["jsamp-sender"] = True  # the user said "always" for messagesender's name
    cand = (demo_archive / "candidates.vot").resolve().as_uri()
    _answered(qtbot, javapeers.message_sender(java, TABLE_LOAD, {"url": cand, "name": "cands"}, me))
    qtbot.waitUntil(lambda: w.table_model.is_candidate_list and w.table_model.loaded_rows() == 14, timeout=10000)

    folder = w.samp.link.files.path
    w.close()
    assert w.samp.link is None and not folder.exists()

"""SAMP against the reference implementation: JSAMP's hub, its snooper and its messagesender (Debian ``jsamp``).

The snooper subscribes by wildcards only (``spectrum.*``, ``table.load.*``, ``coord.*``), so every send here
reaches it only through the hub's own wildcard rules (``getSubscribedClients``). It answers calls with
``samp.warning`` ("Message logged, not acted on"), which the standard counts as done with warnings.
"""

from __future__ import annotations

import pytest

import javapeers
import sampkit
from sampkit import POINT_AT, SPECTRUM_LOAD, TABLE_LOAD
from speco3.interop.messages import HIGHLIGHT, SELECT_ROWS, local_path

pytestmark = [pytest.mark.allow_network_loopback, pytest.mark.java]
samp_env, link = sampkit.samp_env, sampkit.link  # fixtures
java, jsamp_hub, probe, snooper = javapeers.java, javapeers.jsamp_hub, javapeers.probe, javapeers.snooper
LAMOST = "lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz"


def _store(path):
    from speco3.vetting import Decision, ModelVerdict, SpectrumInfo, VettingStore

    with VettingStore(path) as store:
        for i, (verdict, decision) in enumerate([("YES", "YES"), ("NO", None)]):
            key = f"/archive/s{i}.fits#0"
            store.record_spectrum(SpectrumInfo(key, f"s{i}.fits", ra=10.0 + i, dec=-5.0))
            store.record_model_verdict(ModelVerdict(key, "cv", verdict, verdict, "m"))
            if decision:
                store.record_decision(Decision(key, "cv", decision, vetter="t"))
    return path


def test_cli_status_send_and_send_table_reach_the_snooper_by_wildcards(snooper, spectra_dir, tmp_path, capsys):
    from speco3.cli import main

    assert main(["samp", "status", "--timeout", "5"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("snoop"))
    assert "takes spectra, tables, sky positions" in line, out

    assert main(["samp", "send", f"{spectra_dir / LAMOST}#0", "--point", "--timeout", "5"]) == 0
    out = capsys.readouterr().out
    assert "spectrum -> snoop: warning: Message logged, not acted on" in out, out
    assert "position -> snoop: warning" in out, out
    logged = javapeers.snooped(snooper, SPECTRUM_LOAD)
    assert "ssa:Access.Reference" in logged and "file:" in logged
    assert '"ra"' in javapeers.snooped(snooper, POINT_AT)

    assert main(["samp", "send-table", str(_store(tmp_path / "results.sqlite")), "--timeout", "5"]) == 0
    assert "table -> snoop: warning" in capsys.readouterr().out
    assert '"name": "spec-o3 results"' in javapeers.snooped(snooper, TABLE_LOAD)


def test_link_sends_to_wildcard_subscriber_and_receives_from_messagesender(link, snooper, java, probe, spectra_dir,
                                                                           tmp_path):
    """The app's client on JSAMP's hub: peers listed with what they take; JSAMP's messagesender drives it."""
    from astropy.table import Table

    from speco3.interop.tables import store_table
    from speco3.spectra import read_spectrum
    from speco3.vetting import VettingStore

    assert link.connect().result(15) is True
    snoop = next(p for p in link.peers if p.name == "snoop")
    assert snoop.accepts == (SPECTRUM_LOAD, TABLE_LOAD, POINT_AT)
    assert set(javapeers.SNOOPER_MTYPES) <= set(snoop.mtypes)  # declared as patterns, matched by the hub
    assert [p.name for p in link.peers_for(SPECTRUM_LOAD)] == ["snoop"]
    spectrum = read_spectrum(spectra_dir / LAMOST)
    assert link.send_spectrum(spectrum).result(20) == {"snoop": "warning: Message logged, not acted on"}
    javapeers.snooped(snooper, SPECTRUM_LOAD)

    with VettingStore(_store(tmp_path / "results.sqlite"), readonly=True) as store:
        table, keys = store_table(store)
    link.send_table(table, keys, "results").result(20)
    logged = javapeers.snooped(snooper, TABLE_LOAD)
    table_id = next(w.strip('",') for w in logged.split() if w.strip('",').startswith("speco3-"))
    url = link.files.path.joinpath(f"{table_id}.vot").resolve().as_uri()
    assert len(Table.read(local_path(url), format="votable")) == 2

    # messagesender -> this app: each reply is samp.ok and becomes an event with the right content
    me = probe.id_of("Spec-o3 Desktop")
    calls = [(HIGHLIGHT, {"table-id": table_id, "url": url, "row": "1"}),
             (SELECT_ROWS, {"table-id": table_id, "url": url, "row-list": ["1", "0"]}),
             (POINT_AT, {"ra": "10.5", "dec": "-5.25"}),
             (TABLE_LOAD, {"url": url, "table-id": "from-jsamp", "name": "back"})]
    for mtype, params in calls:
        status, out = javapeers.message_sender(java, mtype, params, me).wait(60)
        assert status == "samp.ok", out
    ev = link.events.wait(lambda e: type(e).__name__ == "Highlight")
    assert ev.keys == (keys[1],) and ev.sender
    assert link.events.wait(lambda e: type(e).__name__ == "SelectRows").keys == (keys[1], keys[0])
    pos = link.events.wait(lambda e: type(e).__name__ == "PointAt")
    assert (pos.ra, pos.dec) == (10.5, -5.25)
    loaded = link.events.wait(lambda e: type(e).__name__ == "LoadTable")
    assert loaded.name == "back" and len(Table.read(loaded.path, format="votable")) == 2

    # garbage from JSAMP: a samp.error reply with the reason, the link carries on
    status, out = javapeers.message_sender(java, HIGHLIGHT, {"table-id": table_id, "row": "zz"}, me).wait(60)
    assert status == "samp.error" and "'row' is not an integer" in out, out
    assert link.connected


def test_stilts_sends_a_table_the_app_reads(link, java, jsamp_hub, probe, demo_votable):
    """STILTS (JSAMP inside) sends a table with ``omode=samp``: the app, a careful peer, still takes it (the
    URL it gets is checked by `speco3.interop.fetch`), replies ``samp.ok`` and has the table's rows."""
    from pathlib import Path

    from astropy.table import Table

    assert link.connect().result(15) is True
    me = probe.wait_registered("Spec-o3 Desktop")  # by id: the script would split the name at its blank
    sender = java.start("stilts-tosamp", [javapeers.require("stilts"), "tpipe", f"in={demo_votable}",
                                          "omode=samp", f"client={me}"])
    sender.proc.wait(120)
    assert "Response samp.ok from" in sender.output(), sender.output()[-2000:]
    loaded = link.events.wait(lambda e: type(e).__name__ == "LoadTable", timeout=60)
    assert len(Table.read(loaded.path, format="votable")) == 3, loaded
    # served by JSAMP's own HTTP server on loopback (seen: http://127.0.0.1:PORT/stilts-table/1/table.votable), as
    # TOPCAT serves the tables it sends: fetched into the link's private folder
    assert loaded.url.startswith("http://127.0.0.1:") and Path(loaded.path).parent == link.files.path, loaded


@pytest.fixture
def demo_votable(tmp_path):
    from astropy.table import Table

    path = tmp_path / "cands.vot"
    Table({"obsid": [1, 2, 3]}).write(path, format="votable")
    return path

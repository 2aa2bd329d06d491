"""``spec-o3 samp``: send spectra, vetting tables and positions to TOPCAT, SPLAT-VO or Aladin over SAMP.

``samp status`` lists the hub's applications; ``samp send FILE[#N]`` sends a spectrum (VOTable or FITS copy) to
the spectrum viewers, ``--point`` also points sky viewers at its position; ``samp send-table results.sqlite``
sends the vetting store's table (verdicts, p_yes where present, decisions) to table viewers. The receivers are
the applications the hub names as subscribed (``getSubscribedClients``: the hub applies SAMP's wildcard rules, so
a peer subscribed to ``table.*`` gets ``table.load.votable``). Every call waits at most ``--timeout`` seconds for
the hub and for each peer's reply; the exit status is 1 when no peer took the message (took: answered ``samp.ok``,
or ``samp.warning``, done with warnings). The copies are kept in ``<cache>/samp-outbox`` (mode 0700) for a day,
not removed on exit: a peer may reply before it loads the file, and this process ends right after the reply;
copies older than a day are removed on the next send. Only hubs on this machine are used.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import Future
from typing import TYPE_CHECKING

from speco3.errors import Speco3Error

if TYPE_CHECKING:  # astropy's SAMP loads only when a SAMP command runs
    from speco3.interop.samp import SampLink

OUTBOX = "samp-outbox"  # under the cache folder: copies sent by `samp send` / `send-table`
OUTBOX_MAX_AGE_S = 24 * 3600.0


class SampCliError(Speco3Error):
    """A SAMP command failed; the message says why."""


def register(sub) -> None:
    p = sub.add_parser("samp", help="exchange spectra and tables with TOPCAT, SPLAT-VO and Aladin (SAMP)")
    ss = p.add_subparsers(dest="samp_command", metavar="ACTION", required=True)
    def add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the hub and each reply")
        parser.add_argument("--to", metavar="APP", help="only this application (name as the hub lists it)")

    st = ss.add_parser("status", help="show the SAMP hub and the applications registered with it")
    st.add_argument("--timeout", type=float, default=5.0)
    st.set_defaults(func=cmd_status)
    s = ss.add_parser("send", help="send a spectrum (spectrum.load.ssa-generic)")
    s.add_argument("spectrum", metavar="FILE[#N]")
    s.add_argument("--format", choices=("votable", "fits"), default="votable", help="copy sent (default votable)")
    s.add_argument("--point", action="store_true", help="also send the position (coord.pointAt.sky)")
    add(s)
    s.set_defaults(func=cmd_send)
    t = ss.add_parser("send-table", help="send a vetting store's table (table.load.votable)")
    t.add_argument("store", metavar="RESULTS.sqlite")
    t.add_argument("--task", help="only this task")
    add(t)
    t.set_defaults(func=cmd_send_table)


def _link(timeout: float) -> SampLink:
    from speco3.config import cache_dir
    from speco3.interop.files import Outbox
    from speco3.interop.samp import SampError, SampLink

    # No status printer: every failure of a command also raises, and `main` prints it once as "error: …".
    link = SampLink(None, timeout=timeout, ping_interval=3600, files=Outbox(cache_dir() / OUTBOX, OUTBOX_MAX_AGE_S))
    try:
        link.connect().result(timeout + 5)
    except (SampError, TimeoutError) as exc:
        link.stop(timeout=2)
        raise SampCliError(str(exc) or "the SAMP hub did not answer") from exc
    return link


def _recipient(link: SampLink, name: str | None) -> str | None:
    if not name:
        return None
    for peer in link.peers:
        if peer.name.lower() == name.lower() or peer.id == name:
            return peer.id
    known = ", ".join(p.name for p in link.peers) or "none"
    raise SampCliError(f"no application called {name!r} on the hub (registered: {known})")


def _finish(link: SampLink, futures: list[tuple[str, Future[dict[str, str]]]], timeout: float) -> int:
    from speco3.interop.hubs import delivered
    from speco3.interop.samp import SampError

    taken = False  # exit 0 when some peer took some message (the spectrum, even if no sky viewer took the position)
    try:
        for what, fut in futures:
            try:
                results = fut.result(timeout * 4 + 10)
            except (SampError, TimeoutError) as exc:
                print(f"{what}: {exc}", file=sys.stderr)
                continue
            for peer, result in results.items():
                print(f"{what} -> {peer}: {result}")
            taken = taken or any(delivered(r) for r in results.values())
    finally:
        link.stop(timeout=timeout)
    return 0 if taken else 1


def cmd_status(args) -> int:
    link = _link(args.timeout)
    try:
        print(f"connected to the SAMP hub as {link.name}")
        for peer in link.peers:
            takes = ", ".join(peer.capabilities) or "nothing this app sends"
            print(f"  {peer.name:<24} {peer.id:<8} {len(peer.mtypes):>3} message types; takes {takes}")
        if not link.peers:
            print("  no other application is registered")
    finally:
        link.stop(timeout=args.timeout)
    return 0


def cmd_send(args) -> int:
    from speco3.spectra import read_spectrum

    spec = read_spectrum(args.spectrum)
    link = _link(args.timeout)
    try:
        to = _recipient(link, args.to)
        futures = [("spectrum", link.send_spectrum(spec, args.format, to))]
        if args.point:
            if spec.meta.ra is None or spec.meta.dec is None:
                print(f"{spec.name}: no RA/Dec in the file; position not sent", file=sys.stderr)
            else:
                futures.append(("position", link.point_at(spec.meta.ra, spec.meta.dec, to)))
    except BaseException:
        link.stop(timeout=args.timeout)
        raise
    return _finish(link, futures, args.timeout)


def cmd_send_table(args) -> int:
    from pathlib import Path

    from speco3.interop.tables import store_table
    from speco3.vetting import VettingStore

    with VettingStore(args.store, readonly=True) as store:
        table, keys = store_table(store, args.task)
    if not len(table):
        raise SampCliError(f"{args.store}: no verdicts or decisions to send" + (f" for task {args.task}" if args.task
                                                                              else ""))
    link = _link(args.timeout)
    try:
        fut = link.send_table(table, keys, f"spec-o3 {Path(args.store).stem}", _recipient(link, args.to))
    except BaseException:
        link.stop(timeout=args.timeout)
        raise
    return _finish(link, [("table", fut)], args.timeout)

"""``spec-o3 export results.sqlite --csv/--votable/--fits/--html OUT``: the tables and the audit report."""

from __future__ import annotations

import argparse

from speco3.errors import Speco3Error
from speco3.vetting.export import check_target, export
from speco3.vetting.report import report_path, write_report
from speco3.vetting.store import VettingStore


def register(sub) -> None:
    e = sub.add_parser("export", help="export a vetting store as CSV, VOTable, FITS or an HTML report")
    e.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    e.add_argument("--csv", metavar="OUT")
    e.add_argument("--votable", metavar="OUT")
    e.add_argument("--fits", metavar="OUT")
    e.add_argument("--html", metavar="OUT", help="HTML audit report: a folder (existing, or ending in /) gets "
                                                 "OUT/index.html; any other OUT is written as OUT.html")
    e.add_argument("--task", help="only this task")
    e.add_argument("--copy-images", action="store_true", help="HTML: copy images beside the report (default: embed)")
    e.add_argument("--force", action="store_true", help="replace output files that exist (never the store itself)")
    e.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    targets = [(fmt, getattr(args, fmt)) for fmt in ("csv", "votable", "fits", "html") if getattr(args, fmt)]
    if not targets:
        raise Speco3Error("nothing to export: give --csv, --votable, --fits and/or --html OUT")
    with VettingStore(args.store, readonly=True) as store:
        for fmt, out in targets:  # every target checked before the first is written
            check_target(store, report_path(out) if fmt == "html" else out, overwrite=args.force)
        for fmt, out in targets:
            if fmt == "html":
                out = write_report(store, out, task=args.task, embed_images=not args.copy_images,
                                   overwrite=args.force)
            else:
                export(store, out, fmt, task=args.task, overwrite=args.force)
            print(f"{fmt}: wrote {out}")
    return 0


__all__ = ["cmd_export", "register"]

"""``spec-o3 export results.sqlite --csv/--votable/--fits/--html OUT``: the tables and the audit report (one
option per format of `speco3.vetting.export_formats.FORMATS`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from speco3.cli.options import default_render
from speco3.errors import Speco3Error
from speco3.vetting.export import check_target
from speco3.vetting.export_formats import FORMATS, ExportOptions
from speco3.vetting.store import VettingStore
from speco3.vetting.trace_roots import RootRefused, check_root


def register(sub) -> None:
    names = list(FORMATS.values())
    listed = ", ".join(f.title for f in names[:-1]) + (f" or {names[-1].title}" if len(names) > 1 else names[0].title)
    e = sub.add_parser("export", help=f"export a vetting store as {listed}")
    e.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    for fmt in names:
        e.add_argument(f"--{fmt.name}", metavar="OUT", help=fmt.help)
    e.add_argument("--task", help="only this task")
    e.add_argument("--copy-images", action="store_true", help="HTML: copy images beside the report (default: embed)")
    e.add_argument("--trace-root", action="append", default=[], metavar="DIR",
                   help="HTML: also read traces in DIR (repeatable), beside the store's own folder and the trusted "
                   "trace folders of your configuration (an absolute existing folder, not / or the home folder)")
    e.add_argument("--force", action="store_true", help="replace output files that exist (never the store itself)")
    e.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    targets = [(fmt, out) for fmt in FORMATS.values() if (out := getattr(args, fmt.name, None))]
    if not targets:
        raise Speco3Error("nothing to export: give " + ", ".join(f"--{n}" for n in list(FORMATS)[:-1])
                          + f" and/or --{list(FORMATS)[-1]} OUT")
    options = ExportOptions(task=args.task, overwrite=args.force, embed_images=not args.copy_images,
                            render=default_render(), trace_roots=trace_root_args(args.trace_root))  # the training renderer: the report's PNGs of its size
    with VettingStore(args.store, readonly=True) as store:
        for fmt, out in targets:  # every target checked before the first is written
            check_target(store, fmt.target(out), overwrite=args.force)
        for fmt, out in targets:
            print(f"{fmt.name}: wrote {fmt(store, out, options)}")
    return 0


def trace_root_args(values: list[str]) -> tuple[Path, ...]:
    """The ``--trace-root`` folders (relative ones taken from the current folder), each checked (`check_root`)."""
    try:
        return tuple(check_root(Path(v).expanduser().absolute()) for v in values)
    except RootRefused as exc:
        raise Speco3Error(f"--trace-root {exc}") from None


__all__ = ["cmd_export", "register", "trace_root_args"]

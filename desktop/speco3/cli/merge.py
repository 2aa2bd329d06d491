"""``spec-o3 merge OUT IN…``: merge vetting stores (the shards of ``vet --shard I/N``, or several vetters' stores)."""

from __future__ import annotations

import json
import sys

from speco3.errors import Speco3Error
from speco3.vetting.trace_roots import adopt_traces

EXIT_CONFLICTS = 4


def register(sub) -> None:
    p = sub.add_parser(
        "merge", help="merge vetting stores (vet --shard outputs, several vetters) into one",
        description="Merge the vetting stores IN… into OUT (created when missing; what it holds is kept). The inputs "
        "are only read. Model runs and human decisions found in more than one store are kept once; when the "
        "latest human decisions on one spectrum differ between stores, the merge stops and lists them (nothing is "
        "written) unless --on-conflict latest is given, which keeps every decision and makes the one made last "
        "the current one. The merge is one SQLite transaction: interrupted, OUT stays as it was. Rows are renumbered "
        "in time order: close the desktop app on OUT before merging into it.")
    p.add_argument("out", metavar="OUT", help="merged vetting store (SQLite)")
    p.add_argument("inputs", nargs="+", metavar="IN", help="vetting stores to merge")
    p.add_argument("--on-conflict", choices=("fail", "latest"), default="fail",
                   help="different human decisions on one spectrum: stop without writing (fail, the default) or "
                   "merge with the decision made last as the current one (latest)")
    p.set_defaults(func=cmd_merge)


def cmd_merge(args) -> int:
    from speco3.vetting.merge import merge_stores

    try:
        report = merge_stores(args.out, args.inputs, on_conflict=args.on_conflict)
    except ValueError as exc:
        raise Speco3Error(str(exc)) from None
    for c in report.conflicts:
        said = "; ".join(f"{d['decision']} by {d['vetter'] or '?'} at {d['decided_at']} in {d['store']}"
                         for d in c["decisions"])
        print(f"conflict: {c['spectrum_key']} (task {c['task']}): {said}", file=sys.stderr)
    if report.written:  # the inputs' own traces, read through OUT from now on: trusted when outside OUT's folder
        for folder in report.trace_folders:
            if note := adopt_traces(folder, args.out):
                print(note, file=sys.stderr)
    print(json.dumps({**report.to_dict(), "conflicts": len(report.conflicts)}))
    if report.conflicts and not report.written:
        print(f"{len(report.conflicts)} conflicting decisions: nothing written. Settle them in the stores, or "
              "merge with --on-conflict latest", file=sys.stderr)
        return EXIT_CONFLICTS
    return 0

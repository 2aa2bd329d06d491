"""``spec-o3 store relocate STORE NEW [--old OLD]``: re-root a vetting store whose archive folder moved (its keys are
absolute paths), after checking that the archive is the same (`speco3.vetting.archive_store.relocate`)."""

from __future__ import annotations

import argparse
import json
import os

from speco3.errors import StoreError
from speco3.vetting.archive_store import Relocation, RelocationRefused, relocate
from speco3.vetting.store import ARCHIVE_ROOT_STATE, VettingStore


def register(sub) -> None:
    p = sub.add_parser("store", help="look after a vetting store (relocate it to a moved archive)")
    ss = p.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    r = ss.add_parser(
        "relocate", help="re-root a store onto its archive's new folder (after mv night1 /data/night1)",
        description="A store names its spectra by absolute path (PATH#N), so after its archive folder moved the app "
        "refuses the store and sees none of its decisions. This re-roots every spectrum key (verdicts, decisions, "
        "notes, the audit sample, claims), the file paths it noted and the trace folders kept inside the archive "
        "folder onto NEW, and names NEW as the store's archive, in one SQLite transaction (a run killed in it "
        "leaves the store as it was). First each file the store holds rows of must be at its relative path under "
        "NEW with the size the store noted when it screened it (--sha256: and the same sha256); when some are "
        "missing it says how many and changes nothing (--allow-missing re-roots them all the same), and when any "
        "differs, or the store already holds spectra under NEW, it refuses. The store must not be open in the app "
        "nor screened by a running vet. Exit status 0 relocated (or --dry-run: it would be), 1 refused.")
    r.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    r.add_argument("new", metavar="NEW", help="the archive's folder now")
    r.add_argument("--old", metavar="OLD", help="the folder its keys name (default: the archive the store was made "
                   "for, as spec-o3 vet and the app record it)")
    r.add_argument("--allow-missing", action="store_true",
                   help="re-root even when some files are not in NEW (their rows move with the rest)")
    r.add_argument("--sha256", action="store_true", help="also compare each file's sha256 with the store's (reads "
                   "every file)")
    r.add_argument("--dry-run", action="store_true", help="only say what would be re-rooted")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(func=cmd_relocate)


def cmd_relocate(args: argparse.Namespace) -> int:
    old = args.old
    if not old:
        with VettingStore(args.store, readonly=True) as store:
            named = store.get_state(ARCHIVE_ROOT_STATE)
        if not isinstance(named, str) or not named:
            raise StoreError(f"{args.store}: names no archive folder: say which folder its keys name with --old")
        old = named
    if not os.path.isdir(os.path.expanduser(args.new)):
        raise StoreError(f"{args.new}: no such folder")
    try:
        plan, changed = relocate(args.store, old, args.new, allow_missing=args.allow_missing,
                                 hash_files=args.sha256, dry_run=args.dry_run)
    except RelocationRefused as exc:
        if args.json:  # a script gets what was found (found, missing…) in the case that matters; the reason too
            print(json.dumps(_as_json(args.store, exc.plan, relocated=False, rows={}) | {"error": exc.reason},
                             indent=1))
        raise  # the message on stderr, exit status 1
    if args.json:
        print(json.dumps(_as_json(args.store, plan, relocated=not args.dry_run, rows=changed), indent=1))
    else:
        print(plan.describe())
        print(f"dry run: {args.store} would be re-rooted onto {plan.new}" if args.dry_run else
              f"{args.store} re-rooted onto {plan.new}: {sum(changed.values()):,} rows in one transaction")
    return 0


def _as_json(store: str, plan: Relocation, *, relocated: bool, rows: dict[str, int]) -> dict[str, object]:
    """The ``--json`` object: the plan's counts, whether the store was re-rooted and the rows changed per column."""
    return {"store": str(store), "old": plan.old, "new": plan.new, "relocated": relocated, "keys": plan.keys,
            "files": plan.files, "found": plan.found, "missing": plan.missing, "changed": plan.changed,
            "outside": plan.outside, "rows": rows}


__all__ = ["cmd_relocate", "register"]

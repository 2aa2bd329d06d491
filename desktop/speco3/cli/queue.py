"""``spec-o3 queue STORE [--order p_yes|uncertainty|queue] [--abstained]``: the screened spectra for triage, likely
positives first, or the most uncertain first, optionally only those where the model abstained."""

from __future__ import annotations

import argparse
import json

from speco3.agent.confidence import abstain_reason, uncertainty
from speco3.errors import StoreError
from speco3.vetting.store import VettingStore
from speco3.vetting.triage import ORDERS, QUEUE_FIELDS, queue_rows


def register(sub) -> None:
    q = sub.add_parser("queue", help="list screened spectra for triage by the model's confidence",
                       description="The vetting queue of a store, ordered by the model's confidence: 'p_yes' puts "
                       "likely positives first, 'uncertainty' the spectra with p_yes closest to 0.5 first, 'queue' "
                       "keeps the store's order. Spectra without p_yes go last.")
    q.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    q.add_argument("--task", help="only this task")
    q.add_argument("--order", choices=ORDERS, default="p_yes")
    q.add_argument("--abstained", action="store_true", help="only spectra where the model abstained")
    q.add_argument("--undecided", action="store_true", help="only spectra without a human decision")
    q.add_argument("--audit", action="store_true",
                   help="only the spectra of the task's audit draw (spec-o3 triage --draw), in draw order: decide "
                   "them in this order, their decisions then count as random labels")
    q.add_argument("--limit", type=int, help="at most N rows")
    q.add_argument("--json", action="store_true", help="print the rows as JSON")
    q.set_defaults(func=cmd_queue)


def _queue_json(row: dict) -> dict:
    """A queue row for ``--json``: the stored fields plus ``uncertainty`` and why the model abstained."""
    out = {k: row.get(k) for k in QUEUE_FIELDS}
    outcomes = rollout_outcomes(row)
    k = row.get("rollouts") or len(outcomes)
    out["uncertainty"] = uncertainty(row.get("p_yes"))
    out["abstain_reason"] = (abstain_reason(k, outcomes.count("YES"), outcomes.count("NO"))
                             if row.get("abstained") and outcomes else None)
    return out


def rollout_outcomes(row: dict) -> list[str]:
    """The K outcomes of an export row (stored comma-joined: ``"YES,NO,format_error"``)."""
    text = row.get("rollout_outcomes") or ""
    return [o for o in text.split(",") if o]


def cmd_queue(args: argparse.Namespace) -> int:
    if args.audit and not args.task:
        raise StoreError("--audit needs --task (the draw belongs to one task)")
    with VettingStore(args.store, readonly=True) as store:
        rows = queue_rows(store, args.task, args.order, abstained_only=args.abstained,
                          undecided_only=args.undecided, limit=args.limit, audit=args.audit)
    if args.json:
        print(json.dumps([_queue_json(r) for r in rows], indent=1))
        return 0
    model = [str(r.get("model_verdict") or r.get("model_outcome") or "-") for r in rows]
    human = [str(r.get("decision") or "-") for r in rows]
    wm, wh = max([5, *map(len, model)]), max([5, *map(len, human)])  # outcomes such as no_answer are wider
    print(f"{'p_yes':>5} {'K':>2} {'agree':>5} {'':3} {'model':{wm}} {'human':{wh}} spectrum")
    for r, m, h in zip(rows, model, human, strict=True):
        p = "  —  " if r.get("p_yes") is None else f"{r['p_yes']:5.2f}"
        agree = "  —  " if r.get("agreement") is None else f"{r['agreement']:5.2f}"
        print(f"{p} {r.get('rollouts') or 1:>2} {agree} {'ABS' if r.get('abstained') else '':3} "
              f"{m:{wm}} {h:{wh}} {r['spectrum_key']} ({r['task']})")
    return 0


__all__ = ["cmd_queue", "register", "rollout_outcomes"]

"""``spec-o3 queue STORE [--order p_yes|uncertainty|queue] [--abstained]``: the screened spectra for triage, likely
positives first, or the most uncertain first, optionally only those where the model abstained."""

from __future__ import annotations

import argparse
import json

from speco3.agent.adaptive import STOP_FIXED
from speco3.agent.confidence import describe_outcome, uncertainty
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
                   help="only the task's audit sample (spec-o3 triage --draw), in its drawn order: decide them in "
                   "this order, their decisions then count as random labels")
    q.add_argument("--limit", type=int, help="at most N rows")
    q.add_argument("--json", action="store_true", help="print the rows as JSON")
    q.set_defaults(func=cmd_queue)


def _queue_json(row: dict) -> dict:
    """A queue row for ``--json``: the stored fields (with what the run came to, why it gives no verdict to act on,
    the rollouts used of the budget and why no more ran) plus ``uncertainty``."""
    out = {k: row.get(k) for k in QUEUE_FIELDS}
    out["uncertainty"] = uncertainty(row.get("p_yes"))
    return out


def _rollouts_used(row: dict) -> str:
    """``4`` for a fixed K, ``2/8 agreed`` for adaptive rollouts (used of the budget, and why no more ran)."""
    k = row.get("k_used") or row.get("rollouts") or 1
    stop = row.get("stop_reason")
    if not stop or stop == STOP_FIXED:
        return str(k)
    return f"{k}/{row.get('k_max') or '?'} {stop}"


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
    # the model column: what the run came to with its reason, as every surface names it ("tie: 1 YES / 1 NO")
    model = [describe_outcome(str(r.get("model_outcome") or "-"), r.get("abstain_reason") or "") for r in rows]
    used = [_rollouts_used(r) for r in rows]
    human = [str(r.get("decision") or "-") for r in rows]
    wm, wk, wh = max([5, *map(len, model)]), max([2, *map(len, used)]), max([5, *map(len, human)])
    print(f"{'p_yes':>5} {'K':>{wk}} {'agree':>5} {'human':{wh}} {'model':{wm}} spectrum")
    for r, m, k, h in zip(rows, model, used, human, strict=True):
        p = "  —  " if r.get("p_yes") is None else f"{r['p_yes']:5.2f}"
        agree = "  —  " if r.get("agreement") is None else f"{r['agreement']:5.2f}"
        print(f"{p} {k:>{wk}} {agree} {h:{wh}} {m:{wm}} {r['spectrum_key']} ({r['task']})")
    return 0


__all__ = ["cmd_queue", "register", "rollout_outcomes"]

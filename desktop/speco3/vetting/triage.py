"""Triage of the vetting queue by the model's confidence: the one ordering used by the CLI and the app.

Orders (`ORDERS`):

``p_yes``
    Likely positives first: the highest vote share ``p_yes`` first; among equal shares, the higher mean token
    probability ``p_yes_token`` first (when recorded).
``uncertainty``
    The most uncertain first: ``p_yes`` closest to 0.5 first (a tie of the rollouts before a 2:1 split before a
    unanimous vote); among equal distances, ``p_yes_token`` closest to 0.5 first.
``queue``
    The order the items came in (no sorting).

Items without ``p_yes`` (not screened, or no rollout answered) go last in both sorted orders, in their incoming
order; the sort is stable. The abstention filter keeps the items whose model run abstained (``abstained`` true).
Works on anything with those attributes or keys (export rows, `ModelVerdict`, the app's table rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

ORDERS = ("queue", "p_yes", "uncertainty")
ORDER_LABELS = {"queue": "archive order", "p_yes": "likely positives first", "uncertainty": "most uncertain first"}


def _number(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]  # any value: float() raises TypeError on the rest, caught here
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def field_getter(name: str) -> Callable[[Any], Any]:
    """``item[name]`` for mappings, ``item.name`` otherwise (None when missing)."""
    def get(item: object) -> object:
        if item is None:
            return None
        if isinstance(item, dict):
            return item.get(name)
        return getattr(item, name, None)
    return get


def rank(p_yes: object, p_yes_token: object, order: str) -> tuple:
    """The sort key of one item under ``order`` (see module doc)."""
    p, t = _number(p_yes), _number(p_yes_token)
    if order == "p_yes":
        return (p is None, -(p or 0.0), t is None, -(t or 0.0))
    if order == "uncertainty":
        return (p is None, abs((p or 0.0) - 0.5), t is None, abs((t or 0.0) - 0.5))
    if order == "queue":
        return ()
    raise ValueError(f"unknown triage order {order!r} (one of {', '.join(ORDERS)})")


def triage(
    items: Iterable[T],
    order: str = "p_yes",
    *,
    abstained_only: bool = False,
    verdict_of: Callable[[T], Any] | None = None,
) -> list[T]:
    """``items`` filtered (``abstained_only``) and sorted by ``order``.

    ``verdict_of(item)`` gives the object holding ``p_yes``, ``p_yes_token`` and ``abstained`` (default: the
    item itself).
    """
    if order not in ORDERS:
        raise ValueError(f"unknown triage order {order!r} (one of {', '.join(ORDERS)})")
    of = verdict_of or (lambda item: item)
    get_p, get_t, get_a = field_getter("p_yes"), field_getter("p_yes_token"), field_getter("abstained")
    out: Sequence[T] = list(items)
    if abstained_only:
        out = [i for i in out if bool(get_a(of(i)))]
    if order == "queue":
        return list(out)
    return sorted(out, key=lambda i: rank(get_p(of(i)), get_t(of(i)), order))


#: What ``spec-o3 queue --json`` reports per spectrum.
QUEUE_FIELDS = ("spectrum_key", "task", "model_verdict", "model_outcome", "p_yes", "p_yes_token", "rollouts",
                "agreement", "abstained", "abstain_reason", "format_failures", "rollout_outcomes", "k_used", "k_max",
                "stop_reason", "decision")


def queue_rows(store, task: str | None = None, order: str = "p_yes", *, abstained_only: bool = False,
               undecided_only: bool = False, limit: int | None = None, audit: bool = False) -> list[dict[str, Any]]:
    """The screened spectra of a vetting store (export rows, `speco3.vetting.export.export_rows`) in triage
    ``order``; optionally only the abstentions and/or the spectra without a human decision, at most ``limit``.
    ``audit``: only the spectra of the task's audit draw, in draw order (`speco3.vetting.stopping`), whatever
    ``order`` says: the order in which their decisions count as random labels."""
    from speco3.vetting.export import export_rows

    rows = [r for r in export_rows(store, task) if r.get("model_outcome")]
    if undecided_only:
        rows = [r for r in rows if not r.get("decision")]
    if audit:
        if not task:
            raise ValueError("the audit draw belongs to one task: name it")
        rows = sorted((r for r in rows if r.get("audit_draw")), key=lambda r: r["audit_draw"])
        return triage(rows, "queue", abstained_only=abstained_only)[:limit]
    return triage(rows, order, abstained_only=abstained_only)[:limit]


__all__ = ["ORDERS", "ORDER_LABELS", "QUEUE_FIELDS", "field_getter", "queue_rows", "rank", "triage"]

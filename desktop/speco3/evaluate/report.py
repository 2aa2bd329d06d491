"""Evaluation outputs: ``summary.json``, ``items.csv`` (one row per item) and ``report.html`` with static figures.

The figures are drawn with matplotlib (Agg, no display) and embedded as data URIs, so the report is one file:
F1 per task beside the published figures of the checkpoint (`speco3_models.catalog`), the render similarity per
item when the benchmark shipped images, and, with YES probabilities (K rollouts), a reliability diagram and a
risk–coverage curve. Files are written atomically (`speco3.fileio.write_atomic`).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import logging
from pathlib import Path

import jinja2

from speco3 import __version__
from speco3.evaluate.run import RESULT_FIELDS
from speco3.fileio import write_atomic

logger = logging.getLogger(__name__)


def published_figures() -> dict[str, dict]:
    """Published SpecVI-Bench F1 (%) of the catalogued checkpoints: ``{name: {"macro": f, "tasks": {...}}}``."""
    try:
        from speco3_models.catalog import catalog
    except ImportError:  # pragma: no cover - the catalog ships with the app
        return {}
    return {m.name: {"macro": m.published_macro_f1, "tasks": dict(m.published_task_f1)} for m in catalog()
            if m.published_macro_f1 is not None}


def _figure_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def figures(summary: dict, rows: list[dict], published: dict | None = None) -> dict[str, str]:
    """The report's figures as data URIs (an empty dict when matplotlib is missing); ``published``: the checkpoint's
    benchmark figures to set beside the F1 bars (None on your own labels, where they compare with nothing)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: the report has no figures")
        return {}
    out = {}
    tasks = list(summary["tasks"])
    if tasks:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ours = [100 * summary["tasks"][t]["f1"] for t in tasks]
        ax.bar([i - 0.2 for i in range(len(tasks))], ours, width=0.4, label="this run")
        for name, fig_pub in (published or {}).items():
            if fig_pub["tasks"]:
                ax.bar([i + 0.2 for i in range(len(tasks))], [fig_pub["tasks"].get(t, 0) for t in tasks],
                       width=0.4, label=f"{name} (published)", alpha=0.6)
                break
        ax.set_xticks(range(len(tasks)), tasks)
        ax.set_ylabel("F1 (%)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8)
        out["f1"] = _figure_uri(fig)
    sims = [r["render_similarity"] for r in rows if r.get("render_similarity") is not None]
    if sims:
        fig, ax = plt.subplots(figsize=(5, 2.8))
        ax.hist(sims, bins=20, range=(-1, 1))
        ax.set_xlabel("similarity of our full view to the shipped image")
        ax.set_ylabel("items")
        out["similarity"] = _figure_uri(fig)
    if summary.get("reliability"):
        bins = [b for b in summary["reliability"] if b["n"]]
        fig, ax = plt.subplots(figsize=(4, 4))
        ax.plot([0, 1], [0, 1], "k--", lw=1)
        ax.plot([b["confidence"] for b in bins], [b["frequency"] for b in bins], "o-")
        ax.set_xlabel("YES probability (share of rollouts)")
        ax.set_ylabel("observed YES frequency")
        out["reliability"] = _figure_uri(fig)
    if summary.get("risk_coverage"):
        curve = summary["risk_coverage"]
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([p["abstained"] for p in curve], [p["accuracy"] for p in curve], label="abstaining on the least sure")
        point = summary.get("abstention")
        if point:
            ax.plot([point["abstained"]], [point["accuracy_answered"]], "o", color="C3",
                    label="at the abstention thresholds")
            ax.legend(fontsize=7)
        ax.set_xlabel("share of abstentions")
        ax.set_ylabel("accuracy of the answered")
        out["risk_coverage"] = _figure_uri(fig)
    return out




def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def compare_table(report: dict) -> dict:
    """The ``--compare`` report as a table: a header (build, model, macro-F1, F1 per task, Δ macro-F1 against the
    reference, verdict agreement, items changed, first-turn KL and top-1 agreement) and one row of text per build,
    the reference first."""
    builds = report.get("builds") or {}
    tasks = sorted({t for b in builds.values() for t in b.get("f1", {})})
    head = ["build", "model", "macro-F1 (%)", *(f"F1 {t} (%)" for t in tasks), "Δ macro-F1 (points)",
            "same outcome", "items changed", "first turn: mean KL", "first turn: top-1 agreement"]
    rows = []
    for name, b in builds.items():
        ref = name == report.get("reference")
        delta, agree, first = b.get("macro_f1_delta"), b.get("verdict_agreement"), b.get("first_turn") or {}
        rows.append([name + (" (reference)" if ref else ""), str(b.get("model_id", "")), _pct(b.get("macro_f1")),
                     *(_pct(b.get("f1", {}).get(t)) for t in tasks),
                     "—" if ref else ("n/a" if delta is None else f"{100 * delta:+.1f}"),
                     "—" if ref else ("n/a" if agree is None else f"{100 * agree:.0f}% of {b.get('items', 0)}"),
                     "—" if ref else str(len(b.get("changed", []))),
                     "—" if ref or first.get("mean_kl") is None else f"{first['mean_kl']:.4f}",
                     "—" if ref or first.get("top1_agreement") is None else f"{100 * first['top1_agreement']:.0f}%"])
    return {"head": head, "rows": rows}


def write_outputs(out_dir: str | Path, summary: dict, rows: list[dict], *, title: str = "",
                  extra: dict | None = None, benchmark: bool = True) -> dict[str, Path]:
    """Write ``summary.json``, ``items.csv`` and ``report.html`` into ``out_dir``; returns their paths.
    ``benchmark`` False (a vetting store scored against your own decisions): no published figures beside them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "summary.json", "csv": out / "items.csv", "html": out / "report.html"}
    # ``--compare``: the builds' comparison is part of the summary (as ``--json`` prints it), and a table in the report
    text = json.dumps({**summary, **({"compare": extra} if extra else {})}, indent=1, sort_keys=True)
    write_atomic(paths["json"], lambda tmp: tmp.write_text(text, encoding="utf-8"))
    buf = io.StringIO()
    fields = list(RESULT_FIELDS) + sorted({k for r in rows for k in r} - set(RESULT_FIELDS))
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(paths["csv"], lambda tmp: tmp.write_text(buf.getvalue(), encoding="utf-8", newline=""))
    env = jinja2.Environment(loader=jinja2.PackageLoader("speco3.evaluate", "templates"), autoescape=True)
    published = published_figures() if benchmark else {}
    html = env.get_template("report.html.jinja").render(title=title, summary=summary, published=published,
                                             figs=figures(summary, rows, published), version=__version__,
                                             compare=compare_table(extra) if extra else None)
    write_atomic(paths["html"], lambda tmp: tmp.write_text(html, encoding="utf-8"))
    return paths

"""HTML audit report of a vetting store: per spectrum the full view, the zooms, the reasoning, both verdicts.

With K rollouts the model line carries the confidence (p_yes, agreement, format failures, abstained) and the
rollouts are shown side by side: each with its seed, outcome, the zoom windows it asked for and the images it saw.

The report reads each model verdict's trace folder (`speco3.agent.Trace`). Images are embedded as data URIs
(one self-contained file) or copied into ``<report>_files/`` beside the report. jinja2 with autoescape: model
text, comments and file names are escaped. Written atomically.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jinja2

from speco3 import __version__
from speco3.agent.adaptive import describe_use
from speco3.agent.confidence import describe_outcome
from speco3.agent.steps import AssistantStep, PromptStep, ToolStep
from speco3.agent.trace import TraceError
from speco3.errors import Speco3Error, StoreError
from speco3.spectra import View, read_spectrum
from speco3.vetting.export import check_target, export_rows, write_atomic
from speco3.vetting.records import flag_words, now_iso
from speco3.vetting.store import ARCHIVE_ROOT_STATE, VettingStore

logger = logging.getLogger(__name__)

REASONING_CHARS = 600


class DrawnImage(Protocol):
    """What the report needs of a rendered view (`speco3.render.RenderedImage`)."""

    @property
    def png(self) -> bytes: ...

    @property
    def width(self) -> int: ...

    @property
    def height(self) -> int: ...


#: The model's renderer as the caller hands it in (this layer imports no Qt).
RenderFn = Callable[[View], DrawnImage]


@dataclass
class ReportImage:
    src: str
    caption: str
    width: int
    height: int


@dataclass
class RolloutColumn:
    """One rollout beside the others: how it sampled and ended, the windows it asked for and what it saw."""

    idx: int
    head: str
    outcome: str
    verdict: str | None
    windows: list[str] = field(default_factory=list)
    zooms: list[ReportImage] = field(default_factory=list)
    reasoning: str = ""
    answer: str = ""
    trace_error: str | None = None


@dataclass
class ReportEntry:
    row: dict[str, Any]
    full: ReportImage | None = None
    zooms: list[ReportImage] = field(default_factory=list)
    turns: list[dict[str, str]] = field(default_factory=list)
    answer: str = ""
    trace_error: str | None = None
    confidence: str = ""
    rollouts: list[RolloutColumn] = field(default_factory=list)
    outcome: str = ""  # what the model run came to, with its reason ("tie: 1 YES / 1 NO"; `describe_outcome`)
    evidence: list[ReportImage] = field(default_factory=list)  # the vetter's evidence windows, drawn
    drawn_error: str | None = None  # why the spectrum could not be drawn for them


def confidence_text(row: dict[str, Any]) -> str:
    """``p_yes 0.67 (2 YES / 1 NO of K=3, agreement 0.67, 1 format failure) · abstained: split evidence, …``, with
    ``2 of up to 8 rollouts (stopped: …)`` for adaptive rollouts (empty without K)."""
    k = row.get("rollouts")
    if not k or row.get("p_yes") is None and not row.get("rollout_outcomes"):
        return ""
    outcomes = (row.get("rollout_outcomes") or "").split(",")
    yes, no = outcomes.count("YES"), outcomes.count("NO")
    parts = [f"p_yes {row['p_yes']:.2f}" if row.get("p_yes") is not None else "p_yes —"]
    use = describe_use(k, row.get("k_max"), row.get("stop_reason"))  # "K=4", or "2 of up to 8 rollouts (…)"
    detail = f"{yes} YES / {no} NO " + (f"of {use}" if use.startswith("K=") else f"from {use}")
    if row.get("agreement") is not None:
        detail += f", agreement {row['agreement']:.2f}"
    if row.get("format_failures"):
        detail += f", {row['format_failures']} format failure{'s' if row['format_failures'] > 1 else ''}"
    parts[0] += f" ({detail})"
    if row.get("p_yes_token") is not None:
        parts.append(f"P(YES) at the answer token {row['p_yes_token']:.2f}")
    if row.get("abstained"):
        parts.append(describe_outcome("abstained", row.get("abstain_reason") or ""))
    return " · ".join(parts)


def _window_text(window: list) -> str:
    lo, hi, label = (list(window) + [None, None, None])[:3]
    rng = f"{lo:g}–{hi:g} Å" if isinstance(lo, int | float) and isinstance(hi, int | float) else "unusable range"
    return f"{rng}{' · ' + str(label) if label else ''}"


def _rollout_columns(store: VettingStore, row: dict[str, Any], images: _Images, roots: Sequence[Path] = ()
                     ) -> list[RolloutColumn]:
    """The rollouts of a model run with K > 1, each from its own trace folder."""
    if not row.get("model_run_id") or (row.get("rollouts") or 1) < 2:
        return []
    columns = []
    for r in store.rollouts(row["model_run_id"]):
        col = RolloutColumn(r.idx, f"Rollout {r.idx + 1} · seed {r.seed} · T={r.temperature:g}"
                            + (f" · P(YES) {r.p_yes_token:.2f}" if r.p_yes_token is not None else ""),
                            r.outcome, r.verdict, [_window_text(w) for w in r.windows], answer=_short(r.answer, 300))
        if r.trace_dir:
            try:
                trace = store.load_trace(r.trace_dir, roots)
            except TraceError as exc:
                col.trace_error = str(exc)
            else:
                stem = f"{row.get('name') or 'spectrum'}-{row['task']}-r{r.idx}"
                for step in trace.tool_steps():
                    if step.image is not None:
                        col.zooms.append(ReportImage(images.src(step.image.png, f"{stem}-{step.turn}"),
                                                     f"turn {step.turn}", step.image.width, step.image.height))
                thoughts = [s.reasoning for s in trace.steps if isinstance(s, AssistantStep) and s.reasoning]
                col.reasoning = _short(" … ".join(thoughts), 400)
        columns.append(col)
    return columns


def _short(text: str, limit: int = REASONING_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class _Images:
    """Turns PNG bytes into ``src`` attributes: data URIs, or files in a folder beside the report."""

    def __init__(self, report: Path, embed: bool):
        self.embed = embed
        self.folder = report.with_name(report.stem + "_files")
        self.count = 0

    def src(self, png: bytes, stem: str) -> str:
        if self.embed:
            return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.count += 1
        name = f"{self.count:05d}-{''.join(c if c.isalnum() or c in '-_.' else '_' for c in stem)[:60]}.png"
        (self.folder / name).write_bytes(png)
        return f"{self.folder.name}/{name}"


def _draw_for_vetter(entry: ReportEntry, row: dict[str, Any], images: _Images, render_view: RenderFn) -> None:
    """The spectrum as the model's renderer draws it, for a decision without a model run (the full view), and each
    evidence window the vetter marked (observed frame), read from the spectrum's file."""
    windows = row.get("evidence_windows") or []
    if not row.get("path") or not (windows or (row.get("decision") and not row.get("trace_dir"))):
        return
    try:
        spectrum = read_spectrum(row["path"], int(row.get("hdu_index") or 0))
    except (Speco3Error, OSError, ValueError, IndexError) as exc:
        entry.drawn_error = f"{row['path']}: {exc}"
        return
    stem = f"{row.get('name') or 'spectrum'}-{row['task']}"
    if not row.get("trace_dir"):
        img = render_view(View(spectrum))
        entry.full = ReportImage(images.src(img.png, stem + "-full"), "Full spectrum (rest frame), drawn for the "
                                 "report", img.width, img.height)
    for i, w in enumerate(windows):
        img = render_view(View(spectrum, (w.lo, w.hi), frame="observed", title=w.label or f"Evidence {i + 1}"))
        entry.evidence.append(ReportImage(images.src(img.png, f"{stem}-evidence-{i + 1}"),
                                          f"Evidence {i + 1}: {w.label + ' — ' if w.label else ''}"
                                          f"{w.lo:g}–{w.hi:g} Å (observed)", img.width, img.height))


def _entry(row: dict[str, Any], images: _Images, store: VettingStore, render: RenderFn | None = None,
           roots: Sequence[Path] = ()) -> ReportEntry:
    entry = ReportEntry(row, confidence=confidence_text(row),
                        outcome=describe_outcome(row.get("model_outcome") or "", row.get("abstain_reason") or ""))
    entry.rollouts = _rollout_columns(store, row, images, roots)
    if render is not None:
        _draw_for_vetter(entry, row, images, render)
    if not row.get("trace_dir"):
        return entry
    try:
        trace = store.load_trace(row["trace_dir"], roots)
    except TraceError as exc:
        entry.trace_error = str(exc)
        return entry
    stem = f"{row.get('name') or 'spectrum'}-{row['task']}"
    for step in trace.steps:
        if isinstance(step, PromptStep) and step.image is not None:
            entry.full = ReportImage(images.src(step.image.png, stem + "-full"), "Full spectrum (rest frame)",
                                     step.image.width, step.image.height)
        elif isinstance(step, AssistantStep):
            entry.turns.append({"turn": str(step.turn), "reasoning": _short(step.reasoning or step.content),
                                "stop": step.stop_reason})
        elif isinstance(step, ToolStep):
            rng = step.wavelength_range
            caption = f"Turn {step.turn}: {step.label or 'zoom'}"
            if rng is not None:
                caption += f" — {rng[0]:g}–{rng[1]:g} Å"
            if step.image is not None:
                entry.zooms.append(ReportImage(images.src(step.image.png, f"{stem}-{step.turn}"), caption,
                                               step.image.width, step.image.height))
            else:
                entry.turns.append({"turn": str(step.turn), "reasoning": f"Tool: {step.response_text}",
                                    "stop": "tool"})
    final = trace.final
    entry.answer = _short(final.answer, 1200) if final else ""
    return entry


def default_title(store: VettingStore, rows: list[dict[str, Any]]) -> str:
    """"Spec-o3 vetting report — <archive folder>": the folder the store vets (recorded by the app and `spec-o3 vet`;
    the app names its stores by a hash of the archive path, which says nothing to a reader), else the exported
    spectra's common folder, else the store's file name."""
    root = store.get_state(ARCHIVE_ROOT_STATE)
    if isinstance(root, str) and root:
        return f"Spec-o3 vetting report — {Path(root).name}"
    folders = {os.path.dirname(str(r["spectrum_key"]).rsplit("#", 1)[0]) for r in rows if r.get("spectrum_key")}
    try:
        common = os.path.commonpath(sorted(folders)) if folders else ""
    except ValueError:  # paths on different drives (Windows) or mixed absolute and relative
        common = ""
    name = Path(common).name if common and common != os.sep else store.path.name
    return f"Spec-o3 vetting report — {name}"


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("speco3.vetting", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["flag_words"] = flag_words
    return env.get_template("report.html.jinja")


def report_path(out: str | os.PathLike) -> Path:
    """Where the report given as ``out`` goes: ``out/index.html`` for a folder (an existing one, or a name ending in
    a path separator), ``out`` itself when it ends in ``.html``/``.htm``, ``out.html`` otherwise."""
    text = os.fspath(out)
    path = Path(text).expanduser()
    if text.endswith(("/", os.sep)) or path.is_dir():
        return path / "index.html"
    if path.suffix.lower() in (".html", ".htm"):
        return path
    return path.with_name(path.name + ".html")


def write_report(
    store: VettingStore,
    path: str | Path,
    *,
    task: str | None = None,
    embed_images: bool = True,
    title: str | None = None,
    overwrite: bool = False,
    render: RenderFn | None = None,
    trace_roots: Sequence[Path] = (),
) -> Path:
    """Write the HTML audit report of ``store`` (atomically) to :func:`report_path` of ``path``; return where it went.

    An existing report is replaced only with ``overwrite``, and never when it is the store itself (`check_target`).
    With ``render`` (the model's renderer, `speco3.render.render_view`: the caller's, this layer draws no Qt) a
    human decision without a model run gets the spectrum's full view, and every decision its evidence windows,
    drawn from the spectrum's file. Traces are read only inside `VettingStore.trace_roots` (the store's folder,
    the configured trusted roots) and ``trace_roots`` (``export --trace-root``)."""
    path = check_target(store, report_path(path), overwrite=overwrite)
    images = _Images(path, embed_images)
    rows = export_rows(store, task)
    entries = [_entry(r, images, store, render, trace_roots) for r in rows]
    summary = store.summary()
    html = _template().render(
        title=title or default_title(store, rows),
        generated=now_iso()[:19].replace("T", " ") + " UTC", version=__version__, store=str(store.path),
        summary=summary["tasks"], entries=entries,
    )
    try:
        write_atomic(path, lambda tmp: tmp.write_text(html, encoding="utf-8"))
    except OSError as exc:
        if not embed_images:
            shutil.rmtree(images.folder, ignore_errors=True)
        raise StoreError(f"{path}: cannot write report ({exc.strerror or exc})") from exc
    logger.info("wrote report of %d spectra to %s", len(entries), path)
    return path

"""HTML audit report of a vetting store: per spectrum the full view, the zooms, the reasoning, both verdicts.

The report reads each model verdict's trace folder (`speco3.agent.Trace`). Images are embedded as data URIs
(one self-contained file) or copied into ``<report>_files/`` beside the report. jinja2 with autoescape: model
text, comments and file names are escaped. Written atomically.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from speco3 import __version__
from speco3.agent.steps import AssistantStep, PromptStep, ToolStep
from speco3.agent.trace import Trace, TraceError
from speco3.errors import StoreError
from speco3.vetting.export import export_rows, write_atomic
from speco3.vetting.records import now_iso
from speco3.vetting.store import VettingStore

logger = logging.getLogger(__name__)

REASONING_CHARS = 600


@dataclass
class ReportImage:
    src: str
    caption: str
    width: int
    height: int


@dataclass
class ReportEntry:
    row: dict[str, Any]
    full: ReportImage | None = None
    zooms: list[ReportImage] = field(default_factory=list)
    turns: list[dict[str, str]] = field(default_factory=list)
    answer: str = ""
    trace_error: str | None = None


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


def _entry(row: dict[str, Any], images: _Images) -> ReportEntry:
    entry = ReportEntry(row)
    if not row.get("trace_dir"):
        return entry
    try:
        trace = Trace.load(row["trace_dir"])
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


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("speco3.vetting", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
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
) -> Path:
    """Write the HTML audit report of ``store`` (atomically) to :func:`report_path` of ``path``; return where it went."""
    path = report_path(path)
    images = _Images(path, embed_images)
    rows = export_rows(store, task)
    entries = [_entry(r, images) for r in rows]
    summary = store.summary()
    html = _template().render(
        title=title or f"Spec-o3 vetting report — {store.path.name}",
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

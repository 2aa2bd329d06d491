"""An auditable record of one episode: every step, the task, the spectrum, the model and the settings.

`Trace.save(folder)` writes ``trace.json`` plus one PNG per image exactly as the model saw it (``00-full.png``,
``01-zoom-6500-6600.png``, …) and ``prompt.txt`` (the conversation text with image placeholders); `Trace.load`
reads it back. Views are stored as their range/frame/title (the spectrum is referenced by its address).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import platform
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from speco3 import __version__
from speco3.agent.protocol import render_prompt
from speco3.agent.steps import STEP_TYPES, Outcome, PromptStep, Step, ToolStep, VerdictStep, ViewSpec
from speco3.errors import Speco3Error
from speco3.fileio import contained, write_text_atomic
from speco3.imaging import FACTOR, MAX_PNG_BYTES, PreparedImage, png_problem

logger = logging.getLogger(__name__)

TRACE_FORMAT = 1
TRACE_FILE = "trace.json"
#: Largest trace.json read (eight turns of 100,000-character outputs are under 10 MB).
MAX_TRACE_BYTES = 64 << 20


class TraceError(Speco3Error):
    """A trace folder cannot be read."""


def versions() -> dict[str, str]:
    """Versions of what produced a trace."""
    return dict(_versions())


@functools.cache
def _versions() -> dict[str, str]:  # package metadata is read once per process (~15 ms a call)
    out = {"speco3": __version__, "python": platform.python_version()}
    for dist in ("numpy", "astropy", "llama_cpp_python"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def spectrum_ref(spectrum) -> dict[str, Any]:
    """What identifies a spectrum in a trace."""
    m = spectrum.meta
    return {
        "address": spectrum.address, "name": spectrum.name, "path": m.path, "index": m.index, "survey": m.survey,
        "object_id": m.object_id, "ra": m.ra, "dec": m.dec, "redshift": m.redshift, "n_pixels": spectrum.n_pixels,
    }


def _image_file(step: Step, n: int) -> str:
    if isinstance(step, ToolStep) and step.wavelength_range is not None:
        a, b = step.wavelength_range
        return f"{n:02d}-zoom-{a:g}-{b:g}.png"
    return f"{n:02d}-full.png"


#: Deeper structures (only a model's garbage tool arguments get there) are not copied into the JSON; the
#: assistant step's verbatim text still holds them.
MAX_JSON_DEPTH = 64


def _jsonable(value: object, depth: int = 0) -> object:
    if isinstance(value, Outcome):
        return value.value
    if isinstance(value, ViewSpec):
        return value.to_dict()
    if isinstance(value, tuple | list | dict) and depth >= MAX_JSON_DEPTH:
        return f"<nested deeper than {MAX_JSON_DEPTH} levels; see the assistant text>"
    if isinstance(value, tuple | list):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    return value


@dataclass
class Trace:
    """All steps of one episode plus its context."""

    task_id: str = ""
    task_text: str = ""
    prompt_version: str = ""
    spectrum: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=versions)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    steps: list[Step] = field(default_factory=list)
    prompt_text: str = ""
    image_files: dict[int, str] = field(default_factory=dict, repr=False)  # step index -> PNG file name

    # -- building ----------------------------------------------------------------------------------
    def add(self, step: Step) -> Step:
        self.steps.append(step)
        if isinstance(step, PromptStep):
            self.task_id = self.task_id or step.task_id
            self.task_text = self.task_text or step.task_text
        if isinstance(step, VerdictStep) and step.extra.get("conversation"):
            self.prompt_text = render_prompt(step.extra["conversation"])
        return step

    def record(self, steps) -> Trace:
        """Add all ``steps`` now (e.g. the list a worker collected); returns the trace."""
        for step in steps:
            self.add(step)
        return self

    def follow(self, steps):
        """Pass steps through while adding them, for live use: ``for step in trace.follow(run_episode(...))``."""
        for step in steps:
            yield self.add(step)

    # -- reading -----------------------------------------------------------------------------------
    @property
    def final(self) -> VerdictStep | None:
        return self.steps[-1] if self.steps and isinstance(self.steps[-1], VerdictStep) else None

    @property
    def outcome(self) -> Outcome | None:
        return self.final.outcome if self.final else None

    @property
    def verdict(self) -> str | None:
        return self.final.verdict if self.final else None

    def tool_steps(self) -> list[ToolStep]:
        return [s for s in self.steps if isinstance(s, ToolStep)]

    def images(self) -> list[tuple[Step, PreparedImage]]:
        """(step, image) for every image the model saw, in order."""
        return [(s, s.image) for s in self.steps if isinstance(s, PromptStep | ToolStep) and s.image is not None]

    # -- files -------------------------------------------------------------------------------------
    def to_dict(self, image_files: dict[int, str] | None = None) -> dict[str, Any]:
        steps = []
        for i, step in enumerate(self.steps):
            d: dict[str, Any] = {"kind": step.kind}
            for f in fields(step):
                if f.name in ("view", "image"):
                    continue
                value = getattr(step, f.name)
                if f.name == "extra":
                    value = {k: v for k, v in value.items() if k != "conversation"}
                d[f.name] = _jsonable(value)
            img = getattr(step, "image", None)
            if img is not None:
                d["image"] = {"file": (image_files if image_files is not None else self.image_files).get(i), "width": img.width, "height": img.height,
                              "grid": list(img.grid), "sha256": img.sha256}
            steps.append(d)
        return {
            "format": TRACE_FORMAT, "task_id": self.task_id, "task_text": self.task_text,
            "prompt_version": self.prompt_version, "spectrum": self.spectrum, "model": self.model,
            "settings": self.settings, "versions": self.versions, "created": self.created, "steps": steps,
        }

    def save(self, folder: str | Path) -> Path:
        """Write ``trace.json``, the PNGs and ``prompt.txt`` into ``folder`` (created); return the JSON path."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[int, str] = {}
        n = 0
        for i, step in enumerate(self.steps):
            img = getattr(step, "image", None)
            if img is None:
                continue
            name = _image_file(step, n)
            (folder / name).write_bytes(img.png)
            files[i] = name
            n += 1
        self.image_files = files
        if self.prompt_text:
            # Model text may hold lone surrogates (invalid UTF-8): written as \udXXX escapes, never an error.
            (folder / "prompt.txt").write_text(self.prompt_text, encoding="utf-8", errors="backslashreplace")
        target = folder / TRACE_FILE
        # backslashreplace turns a lone surrogate inside a JSON string into its \udXXX escape, which
        # json.loads reads back as the same character: the model's text round-trips exactly.
        text = json.dumps(self.to_dict(files), ensure_ascii=False, indent=1, allow_nan=True)
        return write_text_atomic(target, text, errors="backslashreplace")

    @classmethod
    def load(cls, folder: str | Path) -> Trace:
        """Read a trace folder written by `save`. Raises `TraceError`."""
        folder = Path(folder)
        path = folder / TRACE_FILE if folder.is_dir() else folder
        folder = path.parent
        try:
            if path.name == TRACE_FILE:  # a trace.json or prompt.txt linked out of its folder is not read
                path = contained(folder, TRACE_FILE)
        except ValueError as exc:
            raise TraceError(f"{path}: not shown: {exc}") from exc
        try:
            with path.open("rb") as fh:
                raw = fh.read(MAX_TRACE_BYTES + 1)
            if len(raw) > MAX_TRACE_BYTES:
                raise TraceError(f"{path}: larger than the {MAX_TRACE_BYTES >> 20} MB a trace may have")
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError) as exc:
            raise TraceError(f"{path}: cannot read trace ({exc})") from exc
        except RecursionError as exc:  # the parser recurses once per nesting level
            raise TraceError(f"{path}: not a Spec-o3 trace (JSON nested too deeply)") from exc
        if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
            raise TraceError(f"{path}: not a Spec-o3 trace (format {data.get('format') if isinstance(data, dict) else '?'})")
        trace = cls(**{k: data.get(k, v) for k, v in (
            ("task_id", ""), ("task_text", ""), ("prompt_version", ""), ("spectrum", {}), ("model", {}),
            ("settings", {}), ("versions", {}), ("created", ""))})
        for i, d in enumerate(data.get("steps", [])):
            trace.steps.append(_step_from_dict(d, folder, path))
            if (d.get("image") or {}).get("file"):
                trace.image_files[i] = d["image"]["file"]
        with contextlib.suppress(ValueError, OSError, UnicodeDecodeError):
            prompt = contained(folder, "prompt.txt")
            if prompt.is_file():
                with prompt.open("rb") as fh:
                    trace.prompt_text = fh.read(MAX_TRACE_BYTES).decode("utf-8")
        return trace


def _step_from_dict(d: dict, folder: Path, path: Path) -> Step:
    cls = STEP_TYPES.get(str(d.get("kind")))
    if cls is None:
        raise TraceError(f"{path}: unknown step kind {d.get('kind')!r}")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in d or f.name in ("view", "image"):
            continue
        value = d[f.name]
        if f.name == "view_spec" and value is not None:
            value = ViewSpec.from_dict(value)
        elif f.name == "outcome":
            value = Outcome(value)
        elif f.name == "wavelength_range" and value is not None:
            value = tuple(value)
        kwargs[f.name] = value
    img = d.get("image")
    if img and img.get("file"):
        try:
            file = contained(folder, img["file"])
            w, h = int(img["width"]), int(img["height"])
        except (ValueError, TypeError, KeyError) as exc:
            raise TraceError(f"{path}: step image refused: {exc}") from exc
        try:
            with file.open("rb") as fh:
                png = fh.read(MAX_PNG_BYTES + 1)
        except OSError as exc:
            raise TraceError(f"{path}: image {img['file']} missing ({exc.strerror})") from exc
        why = png_problem(png, w, h)
        if why:
            raise TraceError(f"{path}: image {img['file']} refused: {why}")
        kwargs["image"] = PreparedImage(png=png, width=w, height=h, grid=(w // FACTOR, h // FACTOR),
                                        sha256=img.get("sha256", ""))
    return cls(**kwargs)

"""The task library: what question the model is asked, and which lines the viewer marks.

Built-in tasks are the five SpecVI-Bench classes, stored as JSON files in ``speco3/agent/tasks/``. Users add or
override tasks with files in ``config_dir()/tasks/*.json`` of the same form::

    {"id": "cv", "target_class": "Cataclysmic Variable (CV)",
     "question": "Analyze the provided spectrum to determine if it is a **Cataclysmic Variable (CV)**.",
     "primary_indicators": ["..."], "secondary_indicators": ["..."],
     "output_format": "**Required Output Format:** ...",          (optional: the standard one)
     "text": "...",                                                (optional: the whole task text, verbatim)
     "lines": [{"name": "Hα", "wavelength": 6564.61, "kind": "emission"}]}   (rest wavelengths, vacuum, Å)

A bad file raises `speco3.errors.TaskError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from speco3.agent.protocol import protocol_fingerprint
from speco3.config import config_dir
from speco3.errors import TaskError

logger = logging.getLogger(__name__)

LINE_KINDS = ("emission", "absorption", "band", "line")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,39}$")
DEFAULT_OUTPUT_FORMAT = (
    "**Required Output Format:**\nReason step by step inside <think></think> tags, using the spectral visualization "
    "tool to zoom into the wavelength regions that decide the question. Then give your final answer as "
    "<answer>\\boxed{YES}</answer> or <answer>\\boxed{NO}</answer>, followed by a brief justification based on the "
    "features you observed."
)


@dataclass(frozen=True)
class Line:
    """A spectral line or molecular band head that the viewer marks.

    ``wavelength`` is the rest wavelength in Å, **vacuum** (the viewer converts it to air for spectra in air).
    The name carries the usual designation, which by astronomers' convention is the rounded *air* wavelength:
    ``"He II 4686"`` for 4687.02 Å in vacuum.
    """

    name: str
    wavelength: float
    kind: str = "line"  # one of LINE_KINDS


@dataclass(frozen=True)
class Task:
    """A yes/no vetting question for the model."""

    id: str
    target_class: str
    question: str
    primary_indicators: tuple[str, ...] = ()
    secondary_indicators: tuple[str, ...] = ()
    output_format: str = DEFAULT_OUTPUT_FORMAT
    lines: tuple[Line, ...] = ()
    verbatim_text: str | None = None
    source: str = "builtin"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def text(self) -> str:
        """The task text of the first user turn (after the image and ``\\n``)."""
        if self.verbatim_text is not None:
            return self.verbatim_text
        out = [self.question, "", "**Key Visual Indicators:**"]
        if self.primary_indicators:
            out.append("Primary:")
            out += [f"- {s}" for s in self.primary_indicators]
        if self.secondary_indicators:
            out.append("Secondary:")
            out += [f"- {s}" for s in self.secondary_indicators]
        out += ["", self.output_format]
        return "\n".join(out)

    @property
    def prompt_version(self) -> str:
        """12-hex digest of the protocol strings and this task text (recorded with every verdict)."""
        h = hashlib.sha256(protocol_fingerprint().encode())
        h.update(self.text.encode("utf-8"))
        return h.hexdigest()[:12]


def _req(d: dict, key: str, typ: type, where: str, optional: bool = False) -> Any:
    if key not in d or d[key] is None:
        if optional:
            return None
        raise TaskError(f"{where}: missing field '{key}'")
    value = d[key]
    if not isinstance(value, typ) or (isinstance(value, str) and not value.strip()):
        kind = "a non-empty string" if typ is str else f"a {typ.__name__}"
        raise TaskError(f"{where}: field '{key}' must be {kind}, got {value!r:.80}")
    return value


def _strings(d: dict, key: str, where: str) -> tuple[str, ...]:
    items = d.get(key, [])
    if not isinstance(items, list):
        raise TaskError(f"{where}: field '{key}' must be a list of strings")
    for i, s in enumerate(items):
        if not isinstance(s, str) or not s.strip():
            raise TaskError(f"{where}: field '{key}[{i}]' must be a non-empty string")
    return tuple(items)


def task_from_dict(d: Any, where: str) -> Task:
    """Validate a task mapping; ``where`` names its origin in error messages."""
    if not isinstance(d, dict):
        raise TaskError(f"{where}: a task file must hold a JSON object")
    tid = _req(d, "id", str, where)
    if not _ID_RE.match(tid):
        raise TaskError(f"{where}: field 'id' must be 1-40 lower-case letters, digits, '-' or '_', got {tid!r}")
    target = _req(d, "target_class", str, where)
    text = _req(d, "text", str, where, optional=True)
    question = _req(d, "question", str, where, optional=text is not None) or text.splitlines()[0]
    output_format = _req(d, "output_format", str, where, optional=True) or DEFAULT_OUTPUT_FORMAT
    if text is None and "\\boxed{" not in output_format:
        raise TaskError(f"{where}: field 'output_format' must ask for <answer>\\boxed{{YES}}</answer> or NO")
    raw_lines = d.get("lines", [])
    if not isinstance(raw_lines, list):
        raise TaskError(f"{where}: field 'lines' must be a list")
    lines = []
    for i, ln in enumerate(raw_lines):
        at = f"{where}: field 'lines[{i}]"
        if not isinstance(ln, dict):
            raise TaskError(f"{at}' must be an object with name and wavelength")
        name = ln.get("name")
        wl = ln.get("wavelength")
        kind = ln.get("kind", "line")
        if not isinstance(name, str) or not name.strip():
            raise TaskError(f"{at}.name' must be a non-empty string")
        if isinstance(wl, bool) or not isinstance(wl, (int, float)) or not (500.0 <= wl <= 100000.0):
            raise TaskError(f"{at}.wavelength' must be a rest wavelength in Å (500-100000), got {wl!r}")
        if kind not in LINE_KINDS:
            raise TaskError(f"{at}.kind' must be one of {', '.join(LINE_KINDS)}, got {kind!r}")
        lines.append(Line(name, float(wl), kind))
    known = {"id", "target_class", "question", "primary_indicators", "secondary_indicators", "output_format",
             "text", "lines"}
    return Task(
        id=tid, target_class=target, question=question,
        primary_indicators=_strings(d, "primary_indicators", where),
        secondary_indicators=_strings(d, "secondary_indicators", where),
        output_format=output_format, lines=tuple(lines), verbatim_text=text, source=where,
        extra={k: v for k, v in d.items() if k not in known},
    )


def load_task_file(path: str | Path) -> Task:
    """Read and validate one task file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TaskError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise TaskError(f"{path}: not valid JSON ({exc})") from exc
    task = task_from_dict(data, str(path))
    if task.id != path.stem:
        logger.info("task file %s defines task id %r", path, task.id)
    return task


def builtin_tasks() -> dict[str, Task]:
    """The five SpecVI-Bench tasks shipped with the package."""
    out: dict[str, Task] = {}
    folder = resources.files("speco3.agent") / "tasks"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            task = task_from_dict(data, f"builtin:{entry.name}")
            out[task.id] = replace(task, source="builtin")
    return out


def user_task_dir() -> Path:
    return config_dir() / "tasks"


def load_tasks(user_dir: str | Path | None = None, *, errors: list[TaskError] | None = None) -> dict[str, Task]:
    """Built-in tasks plus user task files (a user file with a built-in id overrides it).

    Parameters
    ----------
    user_dir : path, optional
        Folder of user task files (default ``config_dir()/tasks``).
    errors : list, optional
        When given, bad user files are skipped and their `TaskError` appended here; otherwise the first one raises.
    """
    tasks = builtin_tasks()
    folder = Path(user_dir) if user_dir is not None else user_task_dir()
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            try:
                task = load_task_file(path)
            except TaskError as exc:
                if errors is None:
                    raise
                logger.warning("%s", exc)
                errors.append(exc)
                continue
            tasks[task.id] = task
    return tasks


def get_task(task_id: str, user_dir: str | Path | None = None) -> Task:
    """One task by id (user files included). Raises `TaskError` naming the known ids."""
    tasks = load_tasks(user_dir)
    if task_id not in tasks:
        raise TaskError(f"unknown task {task_id!r}; known tasks: {', '.join(sorted(tasks))}")
    return tasks[task_id]

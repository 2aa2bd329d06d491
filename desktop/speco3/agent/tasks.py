"""The task library: what question the model is asked, and which lines the viewer marks.

Built-in tasks are the five SpecVI-Bench classes, stored as JSON files in ``speco3/agent/tasks/``. Users add or
override tasks with files in ``config_dir()/tasks/*.json`` of the same form::

    {"id": "cv", "target_class": "Cataclysmic Variable (CV)",
     "question": "Analyze the provided spectrum to determine if it is a **Cataclysmic Variable (CV)**.",
     "primary_indicators": ["..."], "secondary_indicators": ["..."],
     "output_format": "**Required Output Format:** ...",          (optional: the standard one)
     "text": "...",                                                (optional: the whole task text, verbatim)
     "lines": [{"name": "Hα", "wavelength": 6564.61, "kind": "emission"}],  (rest wavelengths, vacuum, Å)
     "lora": "cv-lora.gguf:1.0"}                                    (optional: the task's LoRA adapter, FILE[:SCALE])

A bad file raises `speco3.errors.TaskError` naming the file and the field. ``lora`` has the syntax of the command
line's ``--lora`` (`speco3.engine.base.LoraAdapter.parse`); a relative path is relative to the task file's folder.
`new_task_dict` writes a new task in the phrasing the model was trained with (`question_for`), `save_task_file`
validates and writes one (``spec-o3 tasks new`` and the app's task editor).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from speco3.agent.protocol import protocol_fingerprint
from speco3.config import config_dir
from speco3.engine.base import LoraAdapter
from speco3.errors import Speco3Error, TaskError
from speco3.fileio import write_text_atomic
from speco3.spectra.linelists import LINE_KINDS, Line  # the one home of a line (re-exported here)
from speco3_base.errors import ModelFileError
from speco3_models.adapters import AdapterInfo, read_adapter

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,39}$")
DEFAULT_OUTPUT_FORMAT = (
    "**Required Output Format:**\nReason step by step inside <think></think> tags, using the spectral visualization "
    "tool to zoom into the wavelength regions that decide the question. Then give your final answer as "
    "<answer>\\boxed{YES}</answer> or <answer>\\boxed{NO}</answer>, followed by a brief justification based on the "
    "features you observed."
)
#: The question sentence of the trained phrasing (every built-in task asks it so; `question_for`).
QUESTION_TEMPLATE = "Analyze the provided spectrum to determine if it is a **{target_class}**."


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
    lora: LoraAdapter | None = None  # the task's adapter (path resolved against the task file's folder)
    lora_spec: str | None = field(default=None, compare=False, hash=False)  # its ``lora`` as the file wrote it
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


@overload
def _req(d: dict, key: str, typ: type[_T], where: str, optional: Literal[False] = False) -> _T: ...
@overload
def _req(d: dict, key: str, typ: type[_T], where: str, optional: Literal[True]) -> _T | None: ...
def _req(d: dict, key: str, typ: type[_T], where: str, optional: bool = False) -> _T | None:
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


def _lora(d: dict, where: str, base_dir: Path | None) -> LoraAdapter | None:
    spec = _req(d, "lora", str, where, optional=True)
    if spec is None:
        return None
    adapter = LoraAdapter.parse(spec.strip())
    if not math.isfinite(adapter.scale):
        raise TaskError(f"{where}: field 'lora' must be FILE or FILE:SCALE with a finite scale, got {spec!r}")
    path = Path(adapter.path).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    if path.suffix.lower() != ".gguf":
        raise TaskError(f"{where}: field 'lora' must name a LoRA adapter .gguf file (spec-o3 convert-lora), "
                        f"got {spec!r}")
    if not path.is_file():
        raise TaskError(f"{where}: field 'lora': no adapter file {path}")
    return replace(adapter, path=str(path))


def task_from_dict(d: object, where: str, base_dir: str | Path | None = None) -> Task:
    """Validate a task mapping; ``where`` names its origin in error messages, ``base_dir`` is the folder a relative
    ``lora`` path is relative to (the task file's; default: the working folder)."""
    if not isinstance(d, dict):
        raise TaskError(f"{where}: a task file must hold a JSON object")
    tid = _req(d, "id", str, where)
    if not _ID_RE.match(tid):
        raise TaskError(f"{where}: field 'id' must be 1-40 lower-case letters, digits, '-' or '_', got {tid!r}")
    target = _req(d, "target_class", str, where)
    text = _req(d, "text", str, where, optional=True)
    if text is None:
        question = _req(d, "question", str, where)
    else:  # a full prompt text: the question defaults to its first line
        question = _req(d, "question", str, where, optional=True) or text.splitlines()[0]
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
             "text", "lines", "lora"}
    return Task(
        id=tid, target_class=target, question=question,
        primary_indicators=_strings(d, "primary_indicators", where),
        secondary_indicators=_strings(d, "secondary_indicators", where),
        output_format=output_format, lines=tuple(lines), verbatim_text=text, source=where,
        lora=_lora(d, where, Path(base_dir) if base_dir is not None else None),
        lora_spec=d["lora"] if isinstance(d.get("lora"), str) else None,
        extra={k: v for k, v in d.items() if k not in known},
    )


#: Largest task file read (a task is a few kB of text); larger files are refused unread.
MAX_TASK_FILE_BYTES = 1 << 20
#: Deepest nesting of lists and objects a task file may have (the schema needs 3).
MAX_TASK_DEPTH = 16


def _nesting(value: object) -> int:
    """How deeply lists and objects nest in a parsed JSON value (iterative: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_TASK_DEPTH:
                stack.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def load_task_file(path: str | Path) -> Task:
    """Read and validate one task file; every way it can be malformed (unreadable, over `MAX_TASK_FILE_BYTES`,
    not JSON, nested deeper than `MAX_TASK_DEPTH`, wrong fields) raises `TaskError` naming it."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_TASK_FILE_BYTES + 1)
    except OSError as exc:
        raise TaskError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if len(raw) > MAX_TASK_FILE_BYTES:
        raise TaskError(f"{path}: too large for a task file (over {MAX_TASK_FILE_BYTES // 1024} kB)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TaskError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError as exc:  # the parser recurses once per nesting level
        raise TaskError(f"{path}: not a task file (JSON nested too deeply)") from exc
    if _nesting(data) > MAX_TASK_DEPTH:
        raise TaskError(f"{path}: not a task file (JSON nested more than {MAX_TASK_DEPTH} levels deep)")
    task = task_from_dict(data, str(path), path.parent)
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
                exc.path = path
                if errors is None:
                    raise
                logger.warning("%s", exc)
                errors.append(exc)
                continue
            tasks[task.id] = task
    return tasks


def check_task_adapter(task: Task) -> AdapterInfo | None:
    """Read the header of a task's adapter (None without one): a `TaskError` naming the field ``lora`` when the file
    is not a LoRA adapter GGUF for Qwen2.5-VL. Which base it fits is checked when a model loads it."""
    if task.lora is None:
        return None
    try:
        return read_adapter(task.lora.path)
    except ModelFileError as exc:
        raise TaskError(f"{task.source}: field 'lora': {exc}") from exc


#: The adapter choice that runs the base model alone, a task's own adapter off (``--lora none``; in the app the
#: model box's "base only" entry).
NO_LORA = "none"


def run_adapters(chosen: Sequence[str], task: Task | None, *, server: bool = False) -> tuple[LoraAdapter, ...]:
    """The LoRA adapters a run of ``task`` applies, for the command line and the app alike.

    ``chosen``: the adapters the user chose (``--lora``'s ``FILE[:SCALE]`` specs; the app's model box entry): with
    none chosen, the task's own (its file's ``lora``), else none; ``[NO_LORA]``: none, the base model. ``server``:
    the model runs on a chat server, which loads its adapters itself — any adapter is refused then.

    Raises
    ------
    Speco3Error
        ``none`` given with adapter files, or adapters for a chat server.
    """
    specs = [s for s in chosen if s.strip()]
    if any(s.strip().lower() == NO_LORA for s in specs):
        if len(specs) > 1:
            raise Speco3Error("--lora none runs the base model: give it alone, without adapter files")
        return ()
    adapters = tuple(LoraAdapter.parse(s) for s in specs) if specs else (
        (task.lora,) if task is not None and task.lora is not None else ())
    if adapters and server:
        which = "--lora" if specs else f"task {task.id if task else '?'}'s adapter (its \"lora\" field)"
        raise Speco3Error(f"{which} applies adapters in the local llama.cpp engine; a chat server (--server, the app's "
                          "Model server) loads its adapters itself (llama-server --lora, vLLM --lora-modules); "
                          "--lora none (the app: the model box's \"base only\" entry) runs without")
    return adapters


def question_for(target_class: str) -> str:
    """The question sentence of the trained phrasing for a class name (as the built-in tasks ask it)."""
    return QUESTION_TEMPLATE.format(target_class=target_class.strip())


def task_to_dict(task: Task, folder: str | Path | None = None) -> dict[str, Any]:
    """A task as its file holds it. ``lora``: as the file wrote it when the task is to be written in ``folder`` and
    that is its file's folder (a relative path stays relative to it); else the resolved path, a scale other than 1
    appended."""
    out: dict[str, Any] = {"id": task.id, "target_class": task.target_class, "question": task.question,
                           "primary_indicators": list(task.primary_indicators),
                           "secondary_indicators": list(task.secondary_indicators),
                           "output_format": task.output_format,
                           "lines": [{"name": ln.name, "wavelength": ln.wavelength, "kind": ln.kind}
                                     for ln in task.lines]}
    if task.verbatim_text is not None:
        out["text"] = task.verbatim_text
    if task.lora is not None:
        same_folder = folder is not None and task.source != "builtin" and \
            Path(task.source).parent.resolve() == Path(folder).resolve()
        out["lora"] = task.lora_spec if same_folder and task.lora_spec is not None else \
            task.lora.path + (f":{task.lora.scale:g}" if task.lora.scale != 1 else "")
    return {**out, **task.extra}


def new_task_dict(task_id: str, target_class: str, like: Task | None = None) -> dict[str, Any]:
    """A new task in the trained phrasing: the question sentence for ``target_class``, indicator lists to fill, the
    standard output format, and the lines of ``like`` (none without it)."""
    return {"id": task_id, "target_class": target_class.strip(), "question": question_for(target_class),
            "primary_indicators": [], "secondary_indicators": [], "output_format": DEFAULT_OUTPUT_FORMAT,
            "lines": [{"name": ln.name, "wavelength": ln.wavelength, "kind": ln.kind}
                      for ln in (like.lines if like is not None else ())]}


def save_task_file(data: dict[str, Any], folder: str | Path | None = None, *, force: bool = False) -> tuple[Path, Task]:
    """Validate a task mapping and write it as ``FOLDER/<id>.json`` (default: the user task folder).

    Raises
    ------
    TaskError
        A bad field (named), or the file exists and ``force`` is not set; nothing is written then.
    """
    folder = Path(folder) if folder is not None else user_task_dir()
    tid = data.get("id") if isinstance(data, dict) else None
    path = folder / f"{tid}.json"
    task = task_from_dict(data, str(path), folder)
    if path.exists() and not force:
        raise TaskError(f"{path}: a task file of that name exists (overwrite it with --force, or choose another id)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise TaskError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    return path, replace(task, source=str(path))


def get_task(task_id: str, user_dir: str | Path | None = None) -> Task:
    """One task by id (user files included). Raises `TaskError` naming the known ids; a bad user file is skipped
    with a warning unless it is the file of the task asked for, whose error is raised."""
    errors: list[TaskError] = []  # another task's bad file does not stop this one (it is logged)
    tasks = load_tasks(user_dir, errors=errors)
    for exc in errors:
        if exc.path is not None and exc.path.stem == task_id:
            raise exc  # the user's own file for this task is broken: never fall back to another definition
    if task_id not in tasks:
        unread = f"; {len(errors)} task file(s) could not be read, first: {errors[0]}" if errors else ""
        raise TaskError(f"unknown task {task_id!r}; known tasks: {', '.join(sorted(tasks))}{unread}")
    return tasks[task_id]

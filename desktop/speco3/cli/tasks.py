"""``spec-o3 tasks list|validate|new``: the task library (`speco3.agent.tasks`) from the command line.

- ``tasks list [--json]``: every task (built-in and user files) with its class, source, lines and adapter; a bad
  user file is listed with its error (exit 0, said on stderr).
- ``tasks validate FILE...``: each file OK, or the `TaskError` naming the field; exit 1 when any is bad.
- ``tasks new ID --class NAME [--from TASK] [--dir DIR] [--force]``: a task file in the trained phrasing, in the
  user task folder (or DIR), never overwriting one without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from speco3.agent.tasks import (
    Task,
    check_task_adapter,
    get_task,
    load_task_file,
    load_tasks,
    new_task_dict,
    save_task_file,
    user_task_dir,
)
from speco3.errors import TaskError


def register(sub) -> None:
    p = sub.add_parser("tasks", help="list, check and create vetting tasks (the question the model is asked)")
    tsub = p.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    s = tsub.add_parser("list", help="the built-in and user tasks")
    s.add_argument("--json", action="store_true", help="print them as JSON")
    s.set_defaults(func=cmd_list)
    s = tsub.add_parser("validate", help="check task files (exit 1 when one is bad, naming the field)")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.set_defaults(func=cmd_validate)
    s = tsub.add_parser("new", help="write a new task file in the phrasing the model was trained with")
    s.add_argument("id", help="task id: 1-40 lower-case letters, digits, '-' or '_' (the file is ID.json)")
    s.add_argument("--class", dest="target_class", required=True, metavar="NAME",
                   help="the class the question asks about, e.g. \"Be Star\"")
    s.add_argument("--from", dest="like", metavar="TASK", help="copy the lines the viewer marks from this task")
    s.add_argument("--dir", metavar="DIR", help=f"folder to write to (default: the user task folder, {user_task_dir()})")
    s.add_argument("--force", action="store_true", help="overwrite an existing file")
    s.set_defaults(func=cmd_new)


def _adapter(task: Task) -> str | None:
    if task.lora is None:
        return None
    return task.lora.path + (f":{task.lora.scale:g}" if task.lora.scale != 1 else "")


def _row(task: Task) -> dict:
    return {"id": task.id, "class": task.target_class, "source": "builtin" if task.source == "builtin" else "user",
            "file": None if task.source == "builtin" else task.source, "lines": len(task.lines),
            "adapter": _adapter(task), "prompt_version": task.prompt_version}


def cmd_list(args: argparse.Namespace) -> int:
    errors: list[TaskError] = []
    tasks = load_tasks(errors=errors)
    rows = [_row(t) for t in tasks.values()]
    if args.json:
        print(json.dumps({"tasks": rows, "user_dir": str(user_task_dir()), "errors": [str(e) for e in errors]},
                         indent=1, ensure_ascii=False))
    else:
        for r in rows:
            where = "builtin" if r["file"] is None else f"user {r['file']}"
            print(f"{r['id']:<12} {r['class']:<32} {r['lines']:>3} lines  {where}"
                  + (f"  adapter {r['adapter']}" if r["adapter"] else ""))
        for e in errors:
            print(f"BAD          {e}")
        print(f"user task folder: {user_task_dir()}")
    if errors:
        print(f"{len(errors)} user task file(s) could not be read and were skipped (see above)", file=sys.stderr)
    return 0


def _check(path: Path) -> str:
    task = load_task_file(path)
    info = check_task_adapter(task)
    notes = [f"task {task.id} ({task.target_class})", f"{len(task.lines)} lines"]
    if info is not None:
        notes.append(f"adapter {Path(info.path).name}: {info.describe()}")
    if task.verbatim_text is None and not task.primary_indicators:
        notes.append("warning: no primary indicators")
    return ", ".join(notes)


def cmd_validate(args: argparse.Namespace) -> int:
    bad = 0
    for name in args.files:
        try:
            print(f"OK   {name}: {_check(Path(name))}")
        except TaskError as exc:
            bad += 1
            print(f"BAD  {exc}")
    if bad:
        print(f"{bad} of {len(args.files)} task file(s) are bad", file=sys.stderr)
    return 1 if bad else 0


def cmd_new(args: argparse.Namespace) -> int:
    like = get_task(args.like) if args.like else None
    data = new_task_dict(args.id, args.target_class, like)
    path, task = save_task_file(data, args.dir, force=args.force)
    print(path)
    print(f"task {task.id}: \"{task.question}\"\n"
          f"edit {path.name}: fill primary_indicators (the features that decide it) and secondary_indicators, "
          + ("check" if task.lines else "add") + " the lines the viewer marks (rest wavelengths, vacuum, Å), "
          "optionally \"lora\": \"ADAPTER.gguf[:SCALE]\"; then `spec-o3 tasks validate " + str(path) + "`")
    return 0


__all__ = ["register"]

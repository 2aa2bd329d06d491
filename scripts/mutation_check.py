"""Hand-rolled mutation check: does a test file notice when a module's arithmetic is changed?

Each mutant changes one AST node of MODULE (a comparison operator, an arithmetic operator, ``and``/``or``, a ``not``
dropped, ``min``/``max`` swapped, a numeric constant moved by one, ``True``/``False`` swapped), is written into a
copy of the source tree, and the TESTS are run against it (``pytest -x -q``). A mutant is *killed* when the tests
fail; the survivors are listed with their line, to be read: some are equivalent (they change nothing observable).

Run: ``.venv/bin/python scripts/mutation_check.py desktop/speco3/agent/adaptive.py tests/agent/test_adaptive.py``
(``--only-functions f,g`` limits the mutants to those functions). Prints JSON: mutants, killed, score, survivors.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


def _in_docstring(node: ast.AST, parents: dict) -> bool:
    p = parents.get(node)
    return isinstance(p, ast.Expr)


def mutants(tree: ast.Module, only: set[str] | None):
    """(description, mutated tree) for every mutation point."""
    parents: dict[ast.AST, ast.AST] = {}
    func_of: dict[ast.AST, str] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                func_of.setdefault(node, fn.name)
    nodes = list(ast.walk(tree))
    for idx, node in enumerate(nodes):
        if only is not None and func_of.get(node) not in only:
            continue
        edits = []
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                if type(op) in SWAP_CMP:
                    edits.append((f"{type(op).__name__} -> {SWAP_CMP[type(op)].__name__}",
                                  lambda n, j=j: n.ops.__setitem__(j, SWAP_CMP[type(n.ops[j])]())))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            edits.append((f"{type(node.op).__name__} -> {SWAP_BIN[type(node.op)].__name__}",
                          lambda n: setattr(n, "op", SWAP_BIN[type(n.op)]())))
        elif isinstance(node, ast.BoolOp):
            edits.append(("and <-> or", lambda n: setattr(n, "op", ast.Or() if isinstance(n.op, ast.And) else ast.And())))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            edits.append(("not dropped", None))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            edits.append((f"{node.func.id} -> {'max' if node.func.id == 'min' else 'min'}",
                          lambda n: setattr(n.func, "id", "max" if n.func.id == "min" else "min")))
        elif isinstance(node, ast.Constant) and not _in_docstring(node, parents):
            v = node.value
            if isinstance(v, bool):
                edits.append((f"{v} -> {not v}", lambda n: setattr(n, "value", not n.value)))
            elif isinstance(v, int | float):
                edits.append((f"{v!r} -> {v + 1!r}", lambda n: setattr(n, "value", n.value + 1)))
        for what, edit in edits:
            mutated = copy.deepcopy(tree)
            target = list(ast.walk(mutated))[idx]
            if edit is None:  # drop the `not`: replace the UnaryOp by its operand in its parent
                parent = {c: p for p in ast.walk(mutated) for c in ast.iter_child_nodes(p)}[target]
                for field, value in ast.iter_fields(parent):
                    if value is target:
                        setattr(parent, field, target.operand)
                    elif isinstance(value, list):
                        for k, item in enumerate(value):
                            if item is target:
                                value[k] = target.operand
            else:
                edit(target)
            yield f"line {node.lineno}: {what} (in {func_of.get(node, 'module level')})", mutated


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("module", help="the source file to mutate (under desktop/)")
    p.add_argument("tests", nargs="+", help="test files to run against each mutant")
    p.add_argument("--only-functions", help="comma-separated function names to mutate (default: all)")
    p.add_argument("--timeout", type=int, default=120)
    args = p.parse_args(argv)
    repo = Path(__file__).resolve().parents[1]
    module = Path(args.module).resolve()
    rel = module.relative_to(repo / "desktop")
    tree = ast.parse(module.read_text(encoding="utf-8"))
    only = set(args.only_functions.split(",")) if args.only_functions else None
    killed, survivors, total = 0, [], 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "desktop"
        shutil.copytree(repo / "desktop", root, ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(root), str(repo / "converters"), str(repo / "models")]), "PYTHONDONTWRITEBYTECODE": "1"}
        base = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args.tests],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=args.timeout)
        if base.returncode != 0:
            print(base.stdout[-2000:], file=sys.stderr)
            raise SystemExit("the tests fail on the unmutated module")
        for what, mutated in mutants(tree, only):
            total += 1
            (root / rel).write_text(ast.unparse(mutated), encoding="utf-8")
            try:
                r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                    *args.tests], cwd=repo, env=env, capture_output=True, text=True,
                                   timeout=args.timeout)
                dead = r.returncode != 0
            except subprocess.TimeoutExpired:
                dead = True
            killed += dead
            if not dead:
                survivors.append(what)
            print(f"{'killed  ' if dead else 'SURVIVED'} {what}", file=sys.stderr, flush=True)
    print(json.dumps({"module": str(rel), "mutants": total, "killed": killed,
                      "score": round(killed / total, 3) if total else None, "survivors": survivors}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

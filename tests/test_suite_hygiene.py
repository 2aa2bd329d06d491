"""The test sources hold no check that cannot fail (issue 18): an AST scan of every ``tests/**/*.py`` file.

Patterns refused (each one let a test stay green while the behaviour it names was broken):

- ``pass``: a statement that does nothing as the body of a test, an ``if`` or an ``except`` claims coverage or
  swallows a failure (``class X(Exception): pass`` in a class body is allowed);
- ``np.isfinite(...)`` / ``math.isfinite(...)`` on a timing (an expression naming seconds, time, elapsed or
  duration): a measured duration is always finite; bound it instead;
- ``assert True``, ``assert <non-empty constant>`` and ``assert ... or True``;
- membership in a whole enumeration (``x in set(Outcome) - {...}``, ``x in list(Outcome)``): it accepts the
  failure members too; name the outcomes that are right.

`ALLOWED` lists the places where a pattern is legitimate, each with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# (path relative to tests/, enclosing function or "<module>", pattern) -> why it is legitimate. Keep it short.
ALLOWED: dict[tuple[str, str, str], str] = {}

_TIMING_WORDS = ("second", "time", "elapsed", "duration")


def _is_isfinite(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "isfinite" or isinstance(func, ast.Name) and func.id == "isfinite"


def _whole_enum(node: ast.expr) -> bool:
    """``set(Enum)`` / ``list(Enum)`` / ``tuple(Enum)`` (a capitalised name), possibly minus something."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        return _whole_enum(node.left)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "list", "tuple")
            and len(node.args) == 1 and isinstance(node.args[0], (ast.Name, ast.Attribute))
            and (node.args[0].id if isinstance(node.args[0], ast.Name) else node.args[0].attr)[:1].isupper())


def _always_true(test: ast.expr) -> bool:
    if isinstance(test, ast.Constant):
        return bool(test.value)
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(_always_true(v) for v in test.values)


class _Scanner(ast.NodeVisitor):
    def __init__(self, source: str):
        self.source = source
        self.where = ["<module>"]
        self.found: list[tuple[int, str, str]] = []  # (line, enclosing function, pattern)

    def _add(self, node: ast.AST, pattern: str) -> None:
        self.found.append((node.lineno, self.where[-1], pattern))

    def visit_FunctionDef(self, node):  # noqa: N802 - ast.NodeVisitor naming
        self.where.append(node.name)
        self.generic_visit(node)
        self.where.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):  # noqa: N802
        for stmt in node.body:  # `class Boom(Exception): pass` is a declaration, not a check
            if not isinstance(stmt, ast.Pass):
                self.visit(stmt)
        for deco in node.decorator_list:
            self.visit(deco)

    def visit_Pass(self, node):  # noqa: N802
        self._add(node, "pass")

    def visit_Assert(self, node):  # noqa: N802
        if _always_true(node.test):
            self._add(node, "assert that is always true")
        self.generic_visit(node)

    def visit_Compare(self, node):  # noqa: N802
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In) and _whole_enum(right):
                self._add(node, "membership in a whole enumeration")
        self.generic_visit(node)

    def visit_Call(self, node):  # noqa: N802
        if _is_isfinite(node.func) and node.args:
            text = (ast.get_source_segment(self.source, node.args[0]) or "").lower()
            if any(word in text for word in _TIMING_WORDS):
                self._add(node, "isfinite on a timing")
        self.generic_visit(node)


def scan_source(source: str) -> list[tuple[int, str, str]]:
    """``(line, enclosing function, pattern)`` for every refused pattern in one test module's source."""
    scanner = _Scanner(source)
    scanner.visit(ast.parse(source))
    return scanner.found


def test_scanner_finds_every_pattern():
    """The scan itself can fail: each refused pattern in a sample module is reported, the allowed forms are not."""
    sample = '''
import math
import numpy as np

class Boom(Exception):
    pass

def test_claims_coverage():
    if hasattr(os, "mkfifo"):
        pass

def test_swallows():
    try:
        run()
    except ValueError:
        pass

def test_timing(res, t0):
    assert np.isfinite(res["seconds"])
    assert math.isfinite(time.monotonic() - t0)
    assert np.all(np.isfinite(flux))

def test_always():
    assert True
    assert res or True
    assert "message"

def test_outcome(final):
    assert final.outcome in set(Outcome) - {Outcome.CANCELLED}
    assert final.outcome in {Outcome.YES, Outcome.NO}
'''
    found = [(line, where, pattern) for line, where, pattern in scan_source(sample)]
    assert found == [
        (10, "test_claims_coverage", "pass"),
        (16, "test_swallows", "pass"),
        (19, "test_timing", "isfinite on a timing"),
        (20, "test_timing", "isfinite on a timing"),
        (24, "test_always", "assert that is always true"),
        (25, "test_always", "assert that is always true"),
        (26, "test_always", "assert that is always true"),
        (29, "test_outcome", "membership in a whole enumeration"),
    ]


def test_no_test_holds_a_check_that_cannot_fail():
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 40  # the scan really walks the suite
    problems, used = [], set()
    for path in files:
        rel = path.relative_to(TESTS).as_posix()
        for line, where, pattern in scan_source(path.read_text(encoding="utf-8")):
            key = (rel, where, pattern)
            if key in ALLOWED:
                used.add(key)
            else:
                problems.append(f"{rel}:{line} in {where}: {pattern}")
    assert not problems, "checks that cannot fail (see this module's docstring):\n" + "\n".join(problems)
    assert used == set(ALLOWED), f"allowlist entries that no longer match anything: {set(ALLOWED) - used}"

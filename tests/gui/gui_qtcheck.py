"""Checks that Qt objects are destroyed by Qt on the GUI thread, not by Python's garbage collector elsewhere."""

from __future__ import annotations

import gc
import threading
import types


def qt_garbage() -> list[str]:
    """Qt objects that only Python's cyclic garbage collector would destroy (valid, owned by Python, unreachable).

    The collector runs on whichever thread allocates: a worker thread that collects a window destroys its widget
    tree there, which deadlocks Qt (see `speco3.gui.workers`). The app must let Qt delete its objects instead.
    """
    from PySide6.QtCore import QObject
    from shiboken6 import isValid, ownedByPython

    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
                 if isinstance(o, QObject) and isValid(o) and ownedByPython(o)]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    gc.collect()
    return found


def _refs(obj) -> list:
    """What ``obj`` keeps alive, as a job handed to a worker would: a function's closure and defaults (not its
    module's globals, which live on regardless), a bound method's object, everything else's referents."""
    if isinstance(obj, types.ModuleType):
        return []
    if isinstance(obj, types.FunctionType):
        cells = [c.cell_contents for c in (obj.__closure__ or ()) if c.cell_contents is not None]
        return cells + list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
    if isinstance(obj, types.MethodType):
        return [obj.__self__, obj.__func__]
    return gc.get_referents(obj)


def qt_objects_reachable(root, max_depth: int = 8) -> list[str]:
    """Qt objects that ``root`` keeps alive (breadth first, up to ``max_depth`` references deep)."""
    from PySide6.QtCore import QObject

    seen: set[int] = set()
    found: list[str] = []
    level = [root]
    for _ in range(max_depth):
        nxt = []
        for obj in level:
            if id(obj) in seen or isinstance(obj, (type, str, bytes, int, float)):
                continue
            seen.add(id(obj))
            if isinstance(obj, QObject):
                found.append(type(obj).__qualname__)
                continue
            nxt.extend(_refs(obj))
        level = nxt
    return found


def our_worker_threads() -> list[str]:
    """Names of the app's worker threads still alive (they are all named ``speco3-…``)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("speco3-")]

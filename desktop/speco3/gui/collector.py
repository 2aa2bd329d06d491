"""Python's garbage collection on the GUI thread (see `speco3.gui.workers` for the thread rules it serves)."""

from __future__ import annotations

import gc

_collector = None


def collect_garbage_on_gui_thread() -> None:
    """Turn Python's automatic garbage collection into a timer on the GUI thread (idempotent; call on that thread).

    Python-owned Qt objects in reference cycles exist inside pyqtgraph (a ViewBox and its context menu, say). The
    automatic collector runs on whichever thread allocates, so the inference thread would destroy such a menu and
    Qt deadlocks there. pyqtgraph's `GarbageCollector` disables the automatic collector and collects on a QTimer.
    """
    global _collector
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=1.0)


def restore_automatic_garbage_collection() -> None:
    """Undo `collect_garbage_on_gui_thread` after a full collection on this thread (call with no worker running)."""
    global _collector
    if _collector is not None:
        _collector.timer.stop()
        _collector = None
        gc.collect()
        gc.enable()

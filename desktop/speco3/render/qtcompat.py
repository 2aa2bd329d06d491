"""Work around a reference-count bug of PySide6 6.12 on Python < 3.12.

PySide6 6.12.0 returns ``None`` from void methods (``QPainter.drawLine``, ``setPen`` …) and ``True``/``False`` from
``SignalInstance.emit`` without taking a reference — correct for Python ≥ 3.12, where these objects are immortal,
but on Python 3.11 every call drops one reference. pyqtgraph makes thousands of such calls per repaint, so after
a few seconds of use the interpreter frees ``None`` or ``True`` and aborts ("Fatal Python error: none_dealloc").
At import we probe for the bug and, only when it is present, give ``None``, ``True`` and ``False`` a reference
count no session can exhaust — the immortality Python 3.12 gives them.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

_PINNED = False
_SINGLETONS = (None, True, False)


def bindings_leak_references() -> bool:
    """True when PySide6 drops references to ``None`` (void calls) or ``True`` (signal emit)."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        ping = Signal()

    probe = _Probe()
    before = {id(o): sys.getrefcount(o) for o in _SINGLETONS}
    for _ in range(8):
        probe.ping.emit()
        probe.setObjectName("probe")
    lost = {id(o): before[id(o)] - sys.getrefcount(o) for o in _SINGLETONS}
    for obj in _SINGLETONS:  # give back what the probe took
        for _ in range(max(0, lost[id(obj)])):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    return any(n > 4 for n in lost.values())


def pin_singletons() -> bool:
    """Apply the workaround when needed; returns True when it is in effect (idempotent)."""
    global _PINNED
    if _PINNED or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return _PINNED
    if not bindings_leak_references():
        return False
    for obj in _SINGLETONS:
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 40
    _PINNED = True
    import PySide6

    log.info("PySide6 %s drops references to None/True on Python %d.%d; singletons pinned",
             PySide6.__version__, *sys.version_info[:2])
    return True

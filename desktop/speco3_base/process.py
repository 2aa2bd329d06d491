"""Whether a process of this host is gone (`process_gone`): a screening's stale claims and a killed process's
temporary cache folder are taken over only when their owner is."""

from __future__ import annotations

import os


def process_gone(pid: int) -> bool:
    """True when process ``pid`` of this host is no more (killed, crashed; a zombie waiting to be reaped counts as
    gone). False when it lives, belongs to another user, or cannot be known (``pid`` <= 0; Windows, where signal 0
    would end the process instead of probing it)."""
    if pid <= 0 or os.name == "nt":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    try:  # Linux: a killed process stays in the table as a zombie until its parent reaps it
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:
        return False


__all__ = ["process_gone"]

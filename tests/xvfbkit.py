"""A real X server for tests: ``xserver`` starts Xvfb on a free display (it says which through ``-displayfd``) and
stops it at teardown. Used by the app's own window under Xvfb and by the Java GUI peers (TOPCAT, Aladin)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


@pytest.fixture
def xserver():
    """The display (``":N"``) of a fresh Xvfb, 1680x1050x24, no TCP."""
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.skip("Xvfb not on PATH")
    read, write = os.pipe()
    proc = subprocess.Popen([exe, "-displayfd", str(write), "-screen", "0", "1680x1050x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as fh:
        display = fh.readline().strip()  # Xvfb picks a free display and tells us which
    if not display:
        proc.kill()
        pytest.skip("Xvfb did not start")
    yield f":{display}"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)

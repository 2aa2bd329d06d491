"""The real ``spec-o3-desktop`` under Xvfb (a real X server, QT_QPA_PLATFORM=xcb): demo archive, scripted agent
session, screenshots saved under ``screenshots/`` (git-ignored) for people to look at."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

import xvfbkit

pytestmark = [pytest.mark.xvfb, pytest.mark.gui, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SHOTS = ("01-start-screen", "02-archive-and-viewer", "03-agent-streaming", "04-agent-verdict", "05-zoom-clicked",
         "06-decided-cheat-sheet")
xserver = xvfbkit.xserver  # fixture


def test_demo_under_xvfb_with_screenshots(xserver, tmp_path):
    out = REPO / "screenshots"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, DISPLAY=xserver, QT_QPA_PLATFORM="xcb")
    exe = Path(sys.executable).with_name("spec-o3-desktop")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "speco3.gui.app"]
    proc = subprocess.run(cmd + ["--screenshot-tour", str(out)], env=env, capture_output=True, text=True,
                          timeout=240)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:] + (out / "tour-error.txt").read_text() \
        if (out / "tour-error.txt").exists() else log[-3000:]
    assert "self-test: decided by key" in log
    for name in SHOTS:
        path = out / f"{name}.png"
        assert path.is_file(), name
        with Image.open(path) as img:
            assert img.width >= 1200 and img.height >= 700
            colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 200, f"{name} looks blank"

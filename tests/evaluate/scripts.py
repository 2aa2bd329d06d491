"""Scripted model answers for the evaluate tests (one script per episode, chosen by the first image's hash)."""

from __future__ import annotations

ZOOM = ('<think>Check Hα.</think>\n<tool_call>\n{"name": "spectral_visualization_tool", "arguments": '
        '{"label": "Zoom on Hα region", "wavelength_range": [6500, 6600]}}\n</tool_call>')
YES = "<think>Balmer emission.</think>\n<answer>\\boxed{YES}</answer> Strong Hα emission."
NO = "<think>No features.</think>\n<answer>\\boxed{NO}</answer> Plain continuum."
GARBAGE = "I am not sure what this is."
SCRIPTS = [[YES], [NO], [ZOOM, YES], [ZOOM, NO], [GARBAGE], [NO]]


def scripted_engine(delay_s: float = 0.0):
    from speco3.engine.scripted import ScriptedEngine

    return ScriptedEngine(scripts=SCRIPTS, delay_s=delay_s)

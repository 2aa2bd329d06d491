"""Vetting-test helpers: scripted assistant outputs and screening items (renderer and spectra from testkit)."""

from __future__ import annotations

from speco3.vetting.screening import VetItem
from speco3_testkit.spectra import make_spectrum, pillow_render  # noqa: F401 - re-exported for the vetting tests

# Scripted assistant outputs and screening items shared by the vetting tests.
ZOOM = ('<think>Check Hα.</think>\n<tool_call>\n{"name": "spectral_visualization_tool", "arguments": '
        '{"label": "Hα <b>", "wavelength_range": [6500, 6600]}}\n</tool_call>')
YES = "<think>Emission at Hα.</think>\n<answer>\\boxed{YES}</answer> Balmer emission & He II."
NO = "<think>Flat.</think><answer>\\boxed{NO}</answer> No emission."


def items(n: int, *, prefix: str = "spec") -> list[VetItem]:
    out = []
    for i in range(n):
        spec = make_spectrum(name=f"{prefix}{i:02d}.fits", seed=i)
        out.append(VetItem(key=f"/data/{prefix}{i:02d}.fits#0", load=lambda s=spec: s, name=spec.name))
    return out

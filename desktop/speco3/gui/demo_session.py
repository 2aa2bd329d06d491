"""The canned agent session of the demo archive (used only when no model is installed).

It drives the real agent loop through a `ScriptedEngine`: the zoom requests are real tool calls rendered by the
real renderer, but the *text* is canned and the final answer is the demo catalogue's ground truth. Every message
says so, and the agent panel labels the run "scripted demo — not a model". It is offered only for the demo
archive's own spectra, never for the user's data.
"""

from __future__ import annotations

import logging
import re

from speco3.agent.protocol import tool_call_text
from speco3.agent.tasks import Task
from speco3.demo import CATALOGUE
from speco3.engine.choice import SCRIPTED_LABEL
from speco3.engine.scripted import ScriptedEngine
from speco3.spectra.model import Spectrum

log = logging.getLogger(__name__)

__all__ = ["SCRIPTED_LABEL", "demo_engine", "demo_script", "demo_truth", "is_demo_spectrum"]
_DEMO_NAME = re.compile(r"spec-60001-SPECO3DEMO_sp01-(\d{3})\.fits")


def demo_truth(spectrum: Spectrum) -> str | None:
    """The task class a demo spectrum is a positive for ("" for negatives), None when not a demo spectrum."""
    m = _DEMO_NAME.match(spectrum.meta.file_name or "")
    if not m:
        return None
    i = int(m.group(1)) - 1
    return CATALOGUE[i].truth if 0 <= i < len(CATALOGUE) else None


def is_demo_spectrum(spectrum: Spectrum | None) -> bool:
    return spectrum is not None and demo_truth(spectrum) is not None


def _windows(task: Task) -> list[tuple[str, float, float]]:
    out: list[tuple[str, float, float]] = []
    for line in task.lines[:6]:
        w = line.wavelength
        lo, hi = (w - 180, w + 60) if line.kind == "band" else (w - 60, w + 60)
        out.append((f"Zoom on {line.name} region", round(lo), round(hi)))
    if not out:
        out = [("Zoom on Hβ region", 4800, 4920), ("Zoom on Hα region", 6500, 6630)]
    return out[:2]


def demo_script(spectrum: Spectrum, task: Task) -> list[str]:
    """The canned assistant outputs for ``spectrum`` and ``task`` (see module doc)."""
    truth = demo_truth(spectrum)
    target = task.target_class
    windows = _windows(task)
    outputs = []
    for i, (label, lo, hi) in enumerate(windows):
        lead = ("[Scripted demo — not a model.] This canned text shows how a session streams in. "
                f"The question is whether this is a {target}; " if i == 0 else "[Scripted demo.] ")
        outputs.append(f"<think>{lead}next I request the {label.removeprefix('Zoom on ')} "
                       f"({lo}–{hi} Å, rest frame) to show the zoom tool.</think>\n{tool_call_text([lo, hi], label)}")
    verdict = "YES" if truth == task.id else "NO"
    outputs.append(
        "<think>[Scripted demo.] A real model would weigh the zoomed features here. This scripted session "
        "instead reads the demo catalogue's ground truth for this synthetic spectrum.</think>\n"
        f"<answer>\\boxed{{{verdict}}}</answer> Scripted demo answer from the demo catalogue's ground truth, "
        "not a model's judgement."
    )
    return outputs


def demo_engine(spectrum: Spectrum, task: Task, delay_s: float = 0.01) -> ScriptedEngine:
    """A `ScriptedEngine` replaying `demo_script` (a short delay per piece makes the streaming visible)."""
    from speco3.engine.base import ModelInfo

    return ScriptedEngine(demo_script(spectrum, task), delay_s=delay_s,
                          info=ModelInfo(model_id=SCRIPTED_LABEL, quant="none"))

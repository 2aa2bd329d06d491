"""Quantization report: the same items through several builds of one checkpoint, against the most precise build.

Two kinds of figures. With the evaluation's per-item results: verdict agreement with the reference build, the
items whose outcome changed, and per-task F1 deltas (these need labels only for the deltas). Without labels: the
first-turn check runs the reference greedily for ``n_positions`` tokens on each probe item, keeps its next-token
log-probabilities, and feeds the *same* tokens to every other build (teacher forcing), so the distributions are
compared position by position: mean KL divergence KL(reference ‖ build) and top-1 agreement. It needs an engine
with logits (`speco3.engine.llama.LlamaMtmdEngine`, also behind an `EngineWorker`); other engines skip it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from speco3.agent.protocol import IM_END, first_turn_parts
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine
from speco3.imaging import prepare_image
from speco3.spectra.model import Spectrum
from speco3.spectra.view import View

# Most precise first; a build whose quant is unknown ranks last.
QUANT_ORDER = ("F32", "BF16", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_0",
               "Q3_K_M", "Q3_K_S", "Q2_K")


def quant_of(label: str, quant: str | None = None) -> str | None:
    """The quantization named by ``quant`` or found in a build label / file name (``…-q4_k_m``, ``…Q8_0.gguf``)."""
    if quant:
        return quant.upper()
    for q in QUANT_ORDER:
        if re.search(rf"(^|[^A-Za-z0-9]){re.escape(q)}($|[^A-Za-z0-9])", label, re.IGNORECASE):
            return q
    return None


def precision_rank(label: str, quant: str | None = None) -> int:
    q = quant_of(label, quant)
    return QUANT_ORDER.index(q) if q in QUANT_ORDER else len(QUANT_ORDER)


def compare_results(reference: list[dict], other: list[dict]) -> dict:
    """Verdict agreement on the items both builds ran, the items that changed, and per-task F1 deltas."""
    from speco3.evaluate.metrics import summarize

    ref = {(r["key"], r["task"]): r for r in reference}
    both = [(ref[(r["key"], r["task"])], r) for r in other if (r["key"], r["task"]) in ref]
    same = sum(a["outcome"] == b["outcome"] for a, b in both)
    changed = [{"key": a["key"], "task": a["task"], "reference": a["outcome"], "build": b["outcome"]}
               for a, b in both if a["outcome"] != b["outcome"]]
    out: dict = {"items": len(both), "verdict_agreement": same / len(both) if both else None, "changed": changed}
    labelled = [(a, b) for a, b in both if a.get("truth") in ("YES", "NO")]
    if labelled:
        s_ref = summarize([a for a, _ in labelled])
        s_b = summarize([b for _, b in labelled])
        out["f1_delta"] = {t: s_b["tasks"][t]["f1"] - s_ref["tasks"][t]["f1"] for t in s_ref["tasks"]}
        out["macro_f1_delta"] = s_b["macro_f1"] - s_ref["macro_f1"]
    return out


@dataclass
class TurnProbe:
    """Next-token log-probabilities over the first generated positions of one first turn."""

    key: str
    tokens: list[int] = field(default_factory=list)
    logprobs: list[np.ndarray] = field(default_factory=list)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max()
    return (x - np.log(np.exp(x).sum())).astype(np.float32)


def _probe_on_engine(eng, parts, n_positions: int, forced: list[int] | None) -> tuple[list[int], list[np.ndarray]]:
    """Runs on the engine's own thread: greedy (or forced) tokens and their next-token log-probabilities."""
    from speco3.engine.segments import Segment

    eng.reset()
    eng.extend(parts)
    prompt = eng.conversation()
    tokens: list[int] = []
    out: list[np.ndarray] = []
    stop = eng.tokenize(IM_END)
    limit = n_positions if forced is None else min(n_positions, len(forced))
    for i in range(limit):
        eng.restore(prompt + ([Segment("generated", list(tokens))] if tokens else []))
        eng.evaluate(reserve=1)
        lp = _log_softmax(eng.last_logits())
        out.append(lp)
        tok = forced[i] if forced is not None else int(np.argmax(lp))
        tokens.append(tok)
        if forced is None and [tok] == stop:
            break
    eng.reset()
    return tokens, out


def has_logits(engine: Engine) -> bool:
    inner = getattr(engine, "engine", engine)
    return callable(getattr(inner, "last_logits", None)) and callable(getattr(inner, "restore", None))


def probe_first_turn(engine: Engine, key: str, spectrum: Spectrum, task: Task, render: RenderFn,
                     n_positions: int, forced: TurnProbe | None = None) -> TurnProbe:
    """The first turn's next-token distributions on ``engine`` (teacher-forced on ``forced``'s tokens)."""
    image = prepare_image(render(View(spectrum, None, frame="rest")), max_tokens=engine.settings.image_max_tokens)
    parts = first_turn_parts(image, task.text)
    inner = getattr(engine, "engine", engine)
    call = getattr(engine, "call", None)
    args = (inner, parts, n_positions, forced.tokens if forced is not None else None)
    tokens, logprobs = call(_probe_on_engine, *args) if callable(call) else _probe_on_engine(*args)
    return TurnProbe(key, tokens, logprobs)


def divergence(reference: list[TurnProbe], build: list[TurnProbe]) -> dict:
    """Mean KL(reference ‖ build) per position and top-1 agreement over all probed positions."""
    kls, top1 = [], []
    by_key = {p.key: p for p in build}
    for ref in reference:
        other = by_key.get(ref.key)
        if other is None:
            continue
        for a, b in zip(ref.logprobs, other.logprobs, strict=False):
            if a.shape != b.shape:
                raise ValueError(f"vocabularies differ ({a.shape[0]} vs {b.shape[0]} tokens): not one checkpoint")
            pa = np.exp(a.astype(np.float64))
            kls.append(float(np.sum(pa * (a.astype(np.float64) - b.astype(np.float64)))))
            top1.append(int(np.argmax(a)) == int(np.argmax(b)))
    return {"positions": len(kls), "mean_kl": float(np.mean(kls)) if kls else None,
            "max_kl": float(np.max(kls)) if kls else None,
            "top1_agreement": float(np.mean(top1)) if top1 else None}

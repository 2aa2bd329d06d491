"""Seeded generator of adversarial Spec-o3 model outputs (whole episodes: one string per assistant turn).

`generate(count, seed)` cycles through `CATEGORIES` (malformed JSON, unknown tool, extra / missing arguments,
reversed / NaN / huge / string / wrong-arity ranges, several calls in one turn, endless calls, no answer, answer
plus call, 10k-100k-character outputs, odd unicode incl. lone surrogates and NULs, bad boxed answers, nested tags,
a valid zoom then an answer, and tool-call JSON nested up to 100,000 levels deep). The same seed gives the same
episodes.
"""

from __future__ import annotations

import json
import random

TOOL = "spectral_visualization_tool"

CATEGORIES = (
    "malformed_json",
    "unknown_tool",
    "extra_arguments",
    "missing_arguments",
    "reversed_range",
    "nan_range",
    "huge_range",
    "string_range",
    "wrong_arity",
    "several_calls",
    "endless_calls",
    "no_answer",
    "answer_and_call",
    "very_long",
    "odd_unicode",
    "bad_boxed",
    "nested_tags",
    "valid_then_answer",
    "deep_nesting",
)

ODD = [
    "\u202eevil\u202c",  # right-to-left override
    "\u200b\u200d\ufeff",  # zero-width characters
    "Hα Hβ He II λ4686 — “quoted” ‘x’ ✓ 光谱 🔭",
    "\x00\x01\x07\x1b[31mred\x1b[0m",
    "\ud800 lone surrogate",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ﷽",
]


def _call(args, name: str = TOOL, raw: str | None = None) -> str:
    body = raw if raw is not None else json.dumps({"name": name, "arguments": args}, ensure_ascii=False, allow_nan=True)
    return f"<tool_call>\n{body}\n</tool_call>"


def _think(rng: random.Random) -> str:
    return "<think>" + rng.choice(["Look at Balmer lines.", "Check the TiO bands.", "Hmm.", ""]) + "</think>\n"


def _answer(rng: random.Random) -> str:
    return f"<answer>\\boxed{{{rng.choice(['YES', 'NO'])}}}</answer> The evidence is shown above."


def episode(category: str, rng: random.Random) -> list[str]:
    """Return the assistant outputs of one adversarial episode of ``category``."""
    t = _think(rng)
    lo = rng.choice([3800, 4500, 6000, 6500])
    if category == "malformed_json":
        raw = rng.choice(
            [
                '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [6500, 6600]',
                "{name: spectral_visualization_tool}",
                '{"name": "spectral_visualization_tool", "arguments": "6500-6600"}',
                "[1, 2, 3]",
                "",
                "null",
                '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [6500, 6600]}}}}',
            ]
        )
        return [t + _call(None, raw=raw), _answer(rng)]
    if category == "unknown_tool":
        return [t + _call({"wavelength_range": [lo, lo + 100]}, name=rng.choice(["zoom", "rm -rf", "", "python"])), _answer(rng)]
    if category == "extra_arguments":
        return [t + _call({"wavelength_range": [lo, lo + 100], "label": "x", "color": "red", "dpi": 10**9}), _answer(rng)]
    if category == "missing_arguments":
        return [t + _call(rng.choice([{}, {"label": "Hα"}, {"range": [lo, lo + 50]}])), _answer(rng)]
    if category == "reversed_range":
        return [t + _call({"wavelength_range": [lo + 100, lo]}), _answer(rng)]
    if category == "nan_range":
        return [t + _call(None, raw='{"name": "' + TOOL + '", "arguments": {"wavelength_range": [NaN, Infinity]}}'), _answer(rng)]
    if category == "huge_range":
        return [t + _call({"wavelength_range": rng.choice([[-1e308, 1e308], [1e300, 1e301], [0, 10**400]])}), _answer(rng)]
    if category == "string_range":
        return [t + _call({"wavelength_range": rng.choice([["6500", "6600"], "6500-6600", ["a", "b"], [None, None]])}), _answer(rng)]
    if category == "wrong_arity":
        return [t + _call({"wavelength_range": rng.choice([[], [6500], [6500, 6600, 6700], [[6500], [6600]]])}), _answer(rng)]
    if category == "several_calls":
        calls = "\n".join(_call({"wavelength_range": [lo + 10 * i, lo + 10 * i + 80]}) for i in range(rng.randint(2, 6)))
        return [t + calls, _answer(rng)]
    if category == "endless_calls":
        return [t + _call({"wavelength_range": [lo, lo + 50 + i]}) for i in range(rng.randint(8, 20))]
    if category == "no_answer":
        return [rng.choice(["I am not sure.", "", "<think>thinking forever", "Maybe a star.", "\n\n\n"])]
    if category == "answer_and_call":
        return [t + _answer(rng) + "\n" + _call({"wavelength_range": [lo, lo + 100]}), _answer(rng)]
    if category == "very_long":
        filler = rng.choice(["blah ", "<think>", "{", "\\boxed{", "<tool_call>"]) * rng.randint(2000, 20000)
        return [t + filler, _answer(rng)]
    if category == "odd_unicode":
        s = rng.choice(ODD)
        return [t + s + _call({"wavelength_range": [lo, lo + 100], "label": s}), s + _answer(rng)]
    if category == "bad_boxed":
        return [rng.choice(["<answer>\\boxed{MAYBE}</answer>", "<answer></answer>", "\\boxed{}", "<answer>\\boxed{YES", "YES NO"])]
    if category == "nested_tags":
        return [
            "<think><tool_call><answer>\\boxed{YES}</answer></tool_call></think>"
            + _call(None, raw='{"name": "' + TOOL + '", "arguments": {"wavelength_range": [<tool_call>]}}'),
            _answer(rng),
        ]
    if category == "valid_then_answer":
        return [t + _call({"wavelength_range": [lo, lo + rng.choice([20, 100, 1500])], "label": "Zoom"}), _answer(rng)]
    if category == "deep_nesting":  # json.loads raises RecursionError (not ValueError) beyond ~1000 levels
        depth = rng.choice([70, 900, 5000, 100000])
        raw = '{"name": "' + TOOL + '", "arguments": {"wavelength_range": ' + "[" * depth + "]" * depth + "}}"
        return [t + _call(None, raw=raw), _answer(rng)]
    raise ValueError(category)


def generate(count: int, seed: int = 0):
    """Yield ``(category, outputs)`` for ``count`` episodes, cycling through the categories."""
    rng = random.Random(seed)
    for i in range(count):
        cat = CATEGORIES[i % len(CATEGORIES)]
        yield cat, episode(cat, rng)

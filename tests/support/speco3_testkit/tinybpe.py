"""A small byte-level BPE tokenizer with the Qwen2.5 special tokens, trained in pure Python.

Used only to build test checkpoints: a few hundred merges learned from a built-in text about spectra and
the Spec-o3 protocol, the GPT-2 byte-to-unicode alphabet (so every byte string is encodable) and the 22
added tokens of Qwen2.5 / Qwen2.5-VL in their usual order and flags. The ``tokenizer.json`` written has
Qwen2's pre-tokenizer regex, so Hugging Face ``tokenizers`` and llama.cpp (``pre = qwen2``) split text
the same way.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from functools import lru_cache
from typing import Any

logger = logging.getLogger(__name__)

QWEN2_PRETOKENIZER_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The same split with Python's ``re`` (no \p classes); only used to learn merges.
_TRAIN_SPLIT = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\w]?[^\W\d_]+|\d| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: (content, special) in Qwen2.5's order; ``<tool_call>`` & co. are added but not special.
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
)

_CORPUS = """You are a helpful assistant.
# Tools
You may call one or more functions to assist with the user query.
You are provided with function signatures within <tools></tools> XML tags:
For each function call, return a json object with function name and arguments within XML tags:
{"type": "function", "function": {"name": "spectral_visualization_tool", "description": "A tool for
visualizing spectral data with wavelength range zooming capabilities.", "parameters": {"type": "object",
"properties": {"wavelength_range": {"type": "array", "description": "Wavelength range to focus on
[min_wavelength, max_wavelength] in Angstroms"}, "label": {"type": "string", "description": "Optional label
for the spectral feature being analyzed"}}, "required": ["wavelength_range"]}}}
Analyze the provided spectrum to determine if it is a Carbon Star (C-type). Key visual indicators:
strong C2 Swan bands near 4737, 5165 and 5636 Angstroms; CN bands at 7872 and 8067; weak TiO bands.
Analyze the provided spectrum to determine if it is a Cataclysmic Variable. Look for broad Balmer
emission lines, H alpha at 6563, H beta at 4861, He II 4686 and He I 5876 emission.
Analyze the provided spectrum to determine if it is an S-type star with ZrO bands at 6474 and 5551.
Analyze the provided spectrum to determine if it is an M giant with strong TiO bands and a red continuum.
Analyze the provided spectrum to determine if it is a white dwarf with broad pressure-broadened Balmer
absorption lines and a blue continuum.
<think>The spectrum shows a red continuum with strong molecular absorption bands. I should zoom on the
Swan band region to confirm the carbon features.</think>
<tool_call>
{"name": "spectral_visualization_tool", "arguments": {"label": "Zoom on H beta region", "wavelength_range":
[4800, 4920]}}
</tool_call>
<tool_response>
Generated spectral visualization focused on wavelength range (6500, 6600) for Zoom on H alpha region.
Error: The specified wavelength range [10000, 12000] is invalid or outside the available data range
[3700.0, 9100.0].
</tool_response>
<answer>\\boxed{YES}</answer> The zoomed view confirms the Swan bands, so this is a carbon star.
<answer>\\boxed{NO}</answer> No emission lines are present, so this is not a cataclysmic variable.
Wavelength Flux Spectrum Data points range redshift rest frame observed frame LAMOST SDSS DESI survey
The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3909 0.5 1.25.
"""


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def train_merges(text: str, n_merges: int) -> list[tuple[str, str]]:
    """Learn up to ``n_merges`` BPE merges (deterministic: most frequent pair, ties by text)."""
    b2u = bytes_to_unicode()
    words = Counter("".join(b2u[b] for b in piece.encode("utf-8")) for piece in _TRAIN_SPLIT.findall(text))
    splits = {w: list(w) for w in words}
    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges:
        pairs: Counter = Counter()
        for w, count in words.items():
            sym = splits[w]
            for a, b in zip(sym, sym[1:], strict=False):
                pairs[(a, b)] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        for w in words:
            sym = splits[w]
            i, out = 0, []
            while i < len(sym):
                if i + 1 < len(sym) and sym[i] == best[0] and sym[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            splits[w] = out
    return merges


def build_tokenizer_json(n_merges: int = 600) -> tuple[dict[str, Any], dict[str, int]]:
    """Build a Qwen2-style ``tokenizer.json`` document.

    Returns
    -------
    tokenizer : dict
        The JSON document.
    added : dict
        Added-token content -> id.
    """
    b2u = bytes_to_unicode()
    vocab: dict[str, int] = {b2u[b]: b for b in range(256)}
    merges = train_merges(_CORPUS * 2, n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added: dict[str, int] = {}
    added_tokens = []
    for content, special in QWEN_ADDED_TOKENS:
        idx = len(vocab) + len(added)
        added[content] = idx
        added_tokens.append({"id": idx, "content": content, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": special})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PRETOKENIZER_REGEX}, "behavior": "Isolated",
             "invert": False},
            byte_level,
        ]},
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    logger.debug("tiny tokenizer: %d BPE tokens, %d merges, %d added", len(vocab), len(merges), len(added))
    return doc, added


def tokenizer_config(added: dict[str, int]) -> dict[str, Any]:
    """A Qwen2.5-VL-like ``tokenizer_config.json`` for :func:`build_tokenizer_json`'s tokens."""
    specials = dict(QWEN_ADDED_TOKENS)
    return {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": specials[c]} for c, i in added.items()
        },
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "model_max_length": 32768,
        "split_special_tokens": False,
        "clean_up_tokenization_spaces": False,
        "tokenizer_class": "Qwen2Tokenizer",
        # a stock ChatML template, which the converter must replace with the Spec-o3 one
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
    }

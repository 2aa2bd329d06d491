"""The Spec-o3 chat template written into every text GGUF as ``tokenizer.chat_template``.

Qwen2.5-VL's own templates are wrong for Spec-o3: the processor template has no tools and the tokenizer
template has no images. Spec-o3 was trained (RL stage) on a merged template: system turn with the Qwen2.5
tools block, images as ``<|vision_start|><|image_pad|><|vision_end|>``, assistant tool calls as
``<tool_call>`` JSON, tool results as user turns wrapped in ``<tool_response>``. The template text lives
in ``speco3_chat.jinja`` next to this module; :func:`render` renders it the way Hugging Face transformers
does (jinja2 with ``trim_blocks``/``lstrip_blocks``, ``tojson`` = ``json.dumps(ensure_ascii=False)``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

logger = logging.getLogger(__name__)

TEMPLATE_FILE = "speco3_chat.jinja"
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


@lru_cache(maxsize=1)
def speco3_chat_template() -> str:
    """Return the Spec-o3 chat template (Jinja source)."""
    return resources.files(__package__).joinpath(TEMPLATE_FILE).read_text(encoding="utf-8")


def _tojson(value: object, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


@lru_cache(maxsize=4)
def _compiled(source: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string(source)


def render(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
    template: str | None = None,
) -> str:
    """Render a conversation with the Spec-o3 template (or ``template``) like transformers does.

    Parameters
    ----------
    messages : sequence of mapping
        Chat messages (``role``, ``content`` as a string or a list of ``{"type": "text"|"image", ...}``
        parts, ``tool_calls`` for assistant turns).
    tools : sequence of mapping, optional
        Tool schemas (OpenAI function format).
    add_generation_prompt : bool
        Append ``<|im_start|>assistant\\n``.
    template : str, optional
        Another template source (e.g. one read back from a GGUF file).

    Returns
    -------
    str
        The prompt text, with ``IMAGE_PLACEHOLDER`` where images go.
    """
    compiled = _compiled(template if template is not None else speco3_chat_template())
    return compiled.render(messages=list(messages), tools=list(tools) if tools else None,
                           add_generation_prompt=add_generation_prompt)

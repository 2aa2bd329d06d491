"""The Spec-o3 chat protocol, byte for byte (docs/design.md §2; fixtures in ``tests/data/protocol/``).

The model was trained with verl's multi-turn tool agent on the Qwen2.5-VL chat template with one tool. This
module holds the exact strings (system turn, tools block, tool schema, tool-response sentences), builds the
conversation parts fed to an engine, parses what the model writes (Hermes-style ``<tool_call>`` JSON, the
``<answer>…\\boxed{X}…</answer>`` verdict with the reward function's fallbacks), and renders a conversation as text
with the ``<|vision_start|><|image_pad|><|vision_end|>`` placeholder for each image.

Conversations are sequences of `speco3.engine.base.Part` (text or prepared image). The assistant's own text is
kept verbatim, followed by the sampled ``<|im_end|>``; a tool turn follows that token directly (the RL form).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from speco3.engine.base import Message, Part
from speco3.imaging import PreparedImage

logger = logging.getLogger(__name__)

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
SYSTEM_PROMPT = "You are a helpful assistant."
TOOL_NAME = "spectral_visualization_tool"
MAX_TURNS = 8  # assistant-turn budget of an episode, as in training

#: The tool schema as the model saw it (no ``items`` entry: the training code's schema type dropped it).
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "A tool for visualizing spectral data with wavelength range zooming capabilities.",
        "parameters": {
            "type": "object",
            "properties": {
                "wavelength_range": {
                    "type": "array",
                    "description": "Wavelength range to focus on [min_wavelength, max_wavelength] in Angstroms",
                },
                "label": {"type": "string", "description": "Optional label for the spectral feature being analyzed"},
            },
            "required": ["wavelength_range"],
        },
    },
}
#: ``tojson`` of the chat template = ``json.dumps(ensure_ascii=False)`` with default separators.
TOOL_SCHEMA_JSON = json.dumps(TOOL_SCHEMA, ensure_ascii=False)


def tools_block(tools: Sequence[dict[str, Any]]) -> str:
    """The Qwen2.5 tools block the chat template appends to the system prompt for ``tools``."""
    return (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
        + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>"
    )


TOOLS_BLOCK = tools_block([TOOL_SCHEMA])
SYSTEM_TURN = f"{IM_START}system\n{SYSTEM_PROMPT}{TOOLS_BLOCK}{IM_END}\n"
GENERATION_PROMPT = f"{IM_START}assistant\n"
#: What wraps a tool message's content inside its user turn.
TOOL_RESPONSE_START = "<tool_response>\n"
TOOL_RESPONSE_END = "\n</tool_response>"
TOOL_TURN_OPEN = f"{IM_START}user\n{TOOL_RESPONSE_START}"
TOOL_RESPONSE_CLOSE = f"{TOOL_RESPONSE_END}{IM_END}\n"
TOOL_TURN_CLOSE = TOOL_RESPONSE_CLOSE + GENERATION_PROMPT

#: verl truncates tool-response text longer than this many characters (middle truncation).
MAX_TOOL_RESPONSE_CHARS = 1024
#: Version of the protocol strings; part of every task's prompt version.
PROTOCOL_VERSION = "spec-o3-rl-1"


def protocol_fingerprint() -> str:
    """Digest of every protocol string that reaches the model (changes when the protocol changes)."""
    h = hashlib.sha256()
    for s in (PROTOCOL_VERSION, SYSTEM_TURN, GENERATION_PROMPT, TOOL_TURN_OPEN, TOOL_TURN_CLOSE):
        h.update(s.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


# -- building the conversation ------------------------------------------------------------------------------
# The conversation is built once, as structured messages (`speco3.engine.base.Message`): a local engine is fed
# their chat markup (`markup`), a chat server the messages themselves (its chat template writes the same markup).
def first_turn_messages(image: PreparedImage | None, task_text: str) -> list[Message]:
    """The system message (declaring the tool) and the first user message (full-spectrum image, ``\\n``, task)."""
    content: tuple[Part, ...] = ((image,) if image is not None else ()) + ("\n" + task_text,)
    return [Message("system", (SYSTEM_PROMPT,), tools=(TOOL_SCHEMA,)), Message("user", content)]


def tool_turn_messages(image: PreparedImage | None, text: str) -> list[Message]:
    """The tool message: the zoom image (when the call succeeded) and the tool's sentence."""
    return [Message("tool", ((image,) if image is not None else ()) + (text,))]


def turn_role(message: Message) -> str:
    """The chat-markup role of a message's turn: a tool message is a user turn."""
    if message.role not in ("system", "user", "tool"):
        raise ValueError(f"unknown message role {message.role!r}")
    return "user" if message.role == "tool" else message.role


def turn_body(message: Message) -> list[Part]:
    """What a message's turn holds between ``<|im_start|>ROLE\\n`` and ``<|im_end|>``: a system message's text and
    the tools block it declares; a tool message's content wrapped in ``<tool_response>``; a user message's content."""
    if message.role == "system":
        return [*message.content, tools_block(message.tools) if message.tools else ""]
    if message.role == "tool":
        return [TOOL_RESPONSE_START, *message.content, TOOL_RESPONSE_END]
    turn_role(message)  # an unknown role raises
    return list(message.content)


def markup(messages: Sequence[Message], generation_prompt: bool = True) -> list[Part]:
    """The chat markup of ``messages`` as engine parts (text split only at images), ending with the generation
    prompt. A tool message is a user turn wrapped in ``<tool_response>``."""
    out: list[Part] = []
    for m in messages:
        out += [f"{IM_START}{turn_role(m)}\n", *turn_body(m), f"{IM_END}\n"]
    if generation_prompt:
        out.append(GENERATION_PROMPT)
    merged: list[Part] = []
    for part in out:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        elif not isinstance(part, str) or part:
            merged.append(part)
    return merged


def first_turn_parts(image: PreparedImage | None, task_text: str) -> list[Part]:
    """System turn, first user turn (full-spectrum image, ``\\n``, task text) and the generation prompt."""
    return markup(first_turn_messages(image, task_text))


def tool_turn_parts(image: PreparedImage | None, text: str) -> list[Part]:
    """A tool turn appended directly after the assistant's ``<|im_end|>`` (RL form)."""
    return markup(tool_turn_messages(image, text))


def truncate_tool_text(text: str, limit: int = MAX_TOOL_RESPONSE_CHARS) -> str:
    """verl's middle truncation of an over-long tool response."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


def render_prompt(conversation: Iterable[Part], image: str = IMAGE_PLACEHOLDER) -> str:
    """Text form of a conversation, each image written as ``image`` (default
    ``<|vision_start|><|image_pad|><|vision_end|>``; training datasets write ``<image>``)."""
    out: list[str] = []
    for part in conversation:
        if isinstance(part, PreparedImage):
            out.append(image)
        elif isinstance(part, str):
            out.append(part)
        else:
            raise TypeError(f"conversation part of type {type(part).__name__} (expected str or PreparedImage)")
    return "".join(out)


# -- what the model writes (the trained form; training data is written with these) ------------------------------
def tool_call_text(wavelength_range: Sequence[float], label: str | None = None) -> str:
    """One zoom call as the model writes it: ``<tool_call>\\n{"name": "spectral_visualization_tool", "arguments":
    {"label": …, "wavelength_range": [a, b]}}\\n</tool_call>`` (``label`` first, as in the training trajectories;
    left out when empty). `parse_tool_calls` reads it back."""
    arguments: dict[str, Any] = {"label": label} if label else {}
    arguments["wavelength_range"] = list(wavelength_range)
    return "<tool_call>\n" + json.dumps({"name": TOOL_NAME, "arguments": arguments}, ensure_ascii=False) + \
        "\n</tool_call>"


def answer_text(verdict: str, justification: str = "") -> str:
    """The final answer: ``<answer>\\boxed{YES}</answer>`` (or NO), then a short justification."""
    if verdict not in ("YES", "NO"):
        raise ValueError(f"a verdict is YES or NO, got {verdict!r}")
    return f"<answer>\\boxed{{{verdict}}}</answer>" + (f" {justification}" if justification else "")


def assistant_text(reasoning: str, action: str) -> str:
    """An assistant message: the reasoning in ``<think>`` tags, a newline, then the tool call or the answer."""
    return f"<think>{reasoning}</think>\n{action}"


# -- parsing what the model wrote ---------------------------------------------------------------------------
_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED_RE = re.compile(r"\\boxed\{([^}]*)\}")


def split_reasoning(text: str) -> tuple[str, str]:
    """Split an assistant message into (reasoning inside ``<think>``, the rest)."""
    thoughts = [m.strip() for m in _THINK_RE.findall(text)]
    rest = _THINK_RE.sub("", text).strip()
    return "\n\n".join(t for t in thoughts if t), rest


@dataclass(frozen=True)
class ParsedCall:
    """One ``<tool_call>`` as the Hermes parser reads it: the name and the decoded arguments value."""

    name: str
    arguments: object  # the decoded JSON value, as the model wrote it (checked by speco3.agent.tool)
    raw: str


def parse_tool_calls(text: str) -> list[ParsedCall]:
    """All parsable tool calls of an assistant message, in order (the first one runs).

    Like verl's Hermes parser: both tags must be present, each block must be JSON with ``name`` and
    ``arguments``; blocks that are not are skipped (an output with none ends the episode).
    """
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return []
    calls: list[ParsedCall] = []
    for block in _TOOL_CALL_RE.findall(text):
        try:
            obj = json.loads(block)
            name, arguments = obj["name"], obj["arguments"]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # RecursionError: [[[[… nested deeply
            logger.info("unparsable tool call %r: %s", block[:200], exc)
            continue
        if not isinstance(name, str):
            logger.info("tool call name is not a string: %r", name)
            continue
        calls.append(ParsedCall(name=name, arguments=arguments, raw=block))
    return calls


@dataclass(frozen=True)
class ParsedAnswer:
    """The verdict read from an assistant message.

    Attributes
    ----------
    verdict : {"YES", "NO"} or None
    method : str
        ``"answer_boxed"`` (the trained format), ``"answer_text"`` (a YES/NO word inside ``<answer>``),
        ``"boxed"`` (a lone ``\\boxed{}``), ``"bare"`` (an upper-case YES or NO outside the reasoning) or ``"none"``.
    strict : bool
        True when the message has the trained format: matched ``<think>`` tags and one ``<answer>`` with
        ``\\boxed{YES|NO}``.
    answer : str
        The text inside ``<answer>`` (or the text after the reasoning when there is none).
    """

    verdict: str | None
    method: str
    strict: bool
    answer: str


def _binary(value: str) -> str | None:
    v = value.strip().upper()
    return v if v in ("YES", "NO") else None


def parse_answer(text: str) -> ParsedAnswer:
    """Read the verdict with the fallbacks of the training reward (``compute_score``), made safer for use."""
    n_open, n_close = text.count("<think>"), text.count("</think>")
    answers = _ANSWER_RE.findall(text)
    think_ok = n_open == n_close and n_open > 0
    if answers:
        content = answers[-1].strip()
        boxed = _BOXED_RE.search(content)
        if boxed and _binary(boxed.group(1)):
            strict = think_ok and len(answers) == 1 and text.count("<answer>") == 1
            return ParsedAnswer(_binary(boxed.group(1)), "answer_boxed", strict, content)
        if not boxed:
            for word in ("YES", "NO"):  # the reward's order: YES first
                if re.search(rf"\b{word}\b", content, re.IGNORECASE):
                    return ParsedAnswer(word, "answer_text", False, content)
    _, outside = split_reasoning(text)
    boxed_all = [_binary(b) for b in _BOXED_RE.findall(text)]
    found = [b for b in boxed_all if b]
    if found:
        return ParsedAnswer(found[-1], "boxed", False, outside)
    # Bare words: upper case only, outside the reasoning, and only when unambiguous.
    bare = set(re.findall(r"\b(YES|NO)\b", outside))
    if len(bare) == 1:
        return ParsedAnswer(bare.pop(), "bare", False, outside)
    return ParsedAnswer(None, "none", False, answers[-1].strip() if answers else outside)


def format_range(values: Sequence[Any], brackets: str = "()") -> str:
    """Python's ``str`` of a tuple / list of the numbers as received (``(6500, 6600)``, ``[6500.5, 6600.0]``)."""
    seq = tuple(values) if brackets == "()" else list(values)
    return str(seq)

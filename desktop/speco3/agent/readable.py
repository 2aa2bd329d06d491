"""The model's text as a person reads it (no Qt): its thinking, its tool calls and its answer without the markup.

The raw text (``<think>…</think>``, ``<tool_call>{json}</tool_call>``, ``<answer>\\boxed{YES}</answer>``) is what the
trace stores and the protocol parses; the app's reasoning pane shows this rendering of it instead (issue #44):

    Thinking: The spectrum shows broad Balmer emission …
    → asks to zoom in on "Hα" 6500–6620 Å
    Answer: YES — strong Hα and He II 4686 emission …

`ReadableStream` renders text that arrives in pieces (a tag may be split between two tokens: the undecided tail is
held back until it is known); `readable` renders a whole message. The output is plain text (the model's output is
untrusted: the pane inserts it as text, never as HTML).
"""

from __future__ import annotations

import json
import math

from speco3.agent.protocol import TOOL_NAME

#: What each tag becomes (None: a tool call, rendered as a whole when it is closed).
_TAGS: dict[str, str | None] = {
    "<think>": "Thinking: ", "</think>": "\n", "<answer>": "\nAnswer: ", "</answer>": "\n",
    "<tool_call>": None, "</tool_call>": "", "<|im_end|>": "", "<|endoftext|>": "",
}
_BOXED = "\\boxed{"
MAX_CALL_CHARS = 4000  # a tool call longer than this is shown as it is, not held back further
MAX_BOXED_CHARS = 40


def _num(v: object) -> str | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return f"{f:g}" if math.isfinite(f) else None


def call_text(body: str) -> str:
    """One tool call's JSON as a sentence: the zoom it asks for, or what is wrong with it."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return f"→ a tool call that is not JSON: {body.strip()[:200]}\n"
    if not isinstance(obj, dict):
        return f"→ a tool call that is not an object: {body.strip()[:200]}\n"
    name, args = obj.get("name"), obj.get("arguments")
    if name != TOOL_NAME or not isinstance(args, dict):
        return f"→ calls {str(name)[:60]!r} with {str(args)[:200]}\n"
    rng = args.get("wavelength_range")
    label = args.get("label")
    what = f"“{str(label)[:80]}” " if label not in (None, "") else ""
    if isinstance(rng, list) and len(rng) == 2 and None not in (lo := _num(rng[0]), hi := _num(rng[1])):
        return f"→ asks to zoom in on {what}{lo}–{hi} Å\n"
    return f"→ asks to zoom in on {what}with a range it cannot use: {str(rng)[:100]}\n"


class ReadableStream:
    """Feed the model's raw text in pieces; each `feed` returns the readable text that is now certain."""

    def __init__(self) -> None:
        self._buf = ""
        self._in_call = False

    def feed(self, text: str) -> str:
        self._buf += text
        out: list[str] = []
        while self._buf:
            if self._in_call:
                end = self._buf.find("</tool_call>")
                if end < 0:
                    if len(self._buf) <= MAX_CALL_CHARS:
                        break  # the call is still coming
                    out.append(f"→ {self._buf}")  # too long for a call: shown as it is
                    self._buf, self._in_call = "", False
                    break
                out.append(call_text(self._buf[:end]))
                self._buf, self._in_call = self._buf[end + len("</tool_call>"):], False
                continue
            cut = [i for i in (self._buf.find("<"), self._buf.find("\\")) if i >= 0]
            i = min(cut) if cut else len(self._buf)
            out.append(self._buf[:i])
            self._buf = self._buf[i:]
            if not self._buf:
                break
            if self._buf[0] == "\\":
                if self._buf.startswith(_BOXED):
                    j = self._buf.find("}")
                    if j < 0 and len(self._buf) <= MAX_BOXED_CHARS:
                        break  # the verdict is still coming
                    if j >= 0:
                        out.append(self._buf[len(_BOXED):j])
                        self._buf = self._buf[j + 1:]
                        continue
                elif _BOXED.startswith(self._buf):
                    break  # maybe the start of \boxed{
                out.append("\\")
                self._buf = self._buf[1:]
                continue
            tag = next((t for t in _TAGS if self._buf.startswith(t)), None)
            if tag is not None:
                self._buf = self._buf[len(tag):]
                if _TAGS[tag] is None:
                    self._in_call = True
                else:
                    out.append(_TAGS[tag] or "")
                continue
            if any(t.startswith(self._buf) for t in _TAGS):
                break  # maybe the start of a tag
            out.append("<")
            self._buf = self._buf[1:]
        return "".join(out)

    def flush(self) -> str:
        """The held-back rest (a message that ended inside a tag or a tool call), as it is."""
        rest, self._buf = self._buf, ""
        if self._in_call:
            self._in_call = False
            return f"→ an unfinished tool call: {rest.strip()[:200]}\n"
        return rest


def readable(text: str) -> str:
    """A whole message of the model, readable (see module doc)."""
    stream = ReadableStream()
    return (stream.feed(text) + stream.flush()).strip()

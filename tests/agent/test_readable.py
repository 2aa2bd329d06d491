"""The model's text as the reasoning pane shows it (issue #44): no markup, the same in pieces as whole."""

from __future__ import annotations

import random

import pytest

from speco3.agent.protocol import answer_text, assistant_text, parse_answer, parse_tool_calls, tool_call_text
from speco3.agent.readable import MAX_CALL_CHARS, ReadableStream, readable

TURNS = [
    assistant_text("The continuum is blue; <maybe> a CV, a\\ b. Zoom on Hβ.", tool_call_text([4800, 4920], "Hβ")),
    assistant_text("He II 4686 is there.", answer_text("YES", "Balmer and He II emission.")),
    "<think>unclosed thinking and a half tag <tool",
    '<tool_call>{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": ["a", 5]}}</tool_call>',
    '<tool_call>not json</tool_call><tool_call>{"name": "other_tool", "arguments": {}}</tool_call>',
    "<answer>\\boxed{NO}</answer>",
]


def test_thinking_calls_and_answer_read_as_sentences():
    text = readable(TURNS[0])
    assert text.startswith("Thinking: The continuum is blue; <maybe> a CV, a\\ b.")  # its own text, as written
    assert "→ asks to zoom in on “Hβ” 4800–4920 Å" in text
    assert "<think>" not in text and "<tool_call>" not in text and '"arguments"' not in text
    assert parse_tool_calls(TURNS[0])  # the raw text (what the trace keeps) still parses
    answer = readable(TURNS[1])
    assert "Answer: YES" in answer and "\\boxed" not in answer and "<answer>" not in answer
    assert parse_answer(TURNS[1]).verdict == "YES"
    assert "range it cannot use" in readable(TURNS[3])
    assert "not JSON: not json" in readable(TURNS[4]) and "calls 'other_tool'" in readable(TURNS[4])
    assert readable(TURNS[2]) == "Thinking: unclosed thinking and a half tag <tool"


@pytest.mark.parametrize("turn", TURNS)
def test_streamed_in_any_pieces_reads_the_same_as_whole(turn):
    rng = random.Random(7)
    whole = readable(turn)
    for _ in range(100):
        stream, out, i = ReadableStream(), [], 0
        while i < len(turn):
            k = rng.randint(1, 6)
            out.append(stream.feed(turn[i:i + k]))
            i += k
        assert ("".join(out) + stream.flush()).strip() == whole


def test_an_endless_tool_call_is_not_held_back_for_ever():
    stream = ReadableStream()
    assert stream.feed("<tool_call>" + "x" * 100) == ""
    assert stream.feed("y" * MAX_CALL_CHARS).startswith("→ xxx")

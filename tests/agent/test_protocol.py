"""The protocol strings against the byte-exact fixtures, and the parsers."""

from __future__ import annotations

import json

import pytest

from speco3.agent import protocol as p
from speco3.agent.tool import invalid_range_text, no_data_text, success_text
from speco3.imaging import prepare_image
from speco3.spectra.view import View
from speco3_testkit.spectra import make_spectrum, pillow_render


@pytest.fixture
def image():
    return prepare_image(pillow_render(View(make_spectrum())))


def fixture(protocol_dir, name: str) -> str:
    return (protocol_dir / name).read_bytes().decode("utf-8")


def test_first_turn_bytes(protocol_dir, image):
    assert p.render_prompt(p.first_turn_parts(image, "TASK TEXT")) == fixture(protocol_dir, "first_turn.txt")


def test_tool_turn_image_bytes(protocol_dir, image):
    text = success_text((6500, 6600), "Zoom on Hα region")
    assert p.render_prompt(p.tool_turn_parts(image, text)) == fixture(protocol_dir, "tool_turn_image.txt")


def test_tool_turn_error_bytes(protocol_dir):
    text = invalid_range_text([10000, 12000], (3700.0, 9100.0))
    assert p.render_prompt(p.tool_turn_parts(None, text)) == fixture(protocol_dir, "tool_turn_error.txt")


def test_schema_is_the_trained_string(protocol_dir):
    first = fixture(protocol_dir, "first_turn.txt")
    assert "\n" + p.TOOL_SCHEMA_JSON + "\n" in first
    assert '"items"' not in p.TOOL_SCHEMA_JSON
    assert json.loads(p.TOOL_SCHEMA_JSON)["function"]["name"] == p.TOOL_NAME


def test_response_texts():
    assert success_text((6500, 6600), None) == "Generated spectral visualization focused on wavelength range (6500, 6600) Å."
    assert success_text((6500.5, 6600.0), "Hα").endswith("range (6500.5, 6600.0) Å for Hα.")
    assert no_data_text((5000, 5010)) == (
        "Error processing spectral visualization: No data points in specified wavelength range (5000, 5010)"
    )
    assert invalid_range_text([1.5, 2], (3650.04, 9099.96)).endswith("range [1.5, 2] is invalid or outside the "
                                                                   "available data range [3650.0, 9100.0].")


def test_render_prompt_rejects_unknown_parts():
    with pytest.raises(TypeError):
        p.render_prompt(["a", 3])


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [1, 2]}}\n</tool_call>',
        '<tool_call>{"name":"spectral_visualization_tool","arguments":{"wavelength_range":[1,2]}}</tool_call>',
        '<think>hm</think>\n<tool_call>  \n\t{ "name" : "spectral_visualization_tool" ,\n "arguments" : '
        '{ "wavelength_range" : [ 1 , 2 ] } }  \n</tool_call>\n',
    ],
)
def test_tool_call_whitespace_tolerant(text):
    calls = p.parse_tool_calls(text)
    assert len(calls) == 1 and calls[0].arguments == {"wavelength_range": [1, 2]}


def test_tool_calls_skip_malformed_and_keep_order():
    text = (
        "<tool_call>{not json}</tool_call><tool_call>{\"name\": \"a\"}</tool_call>"
        '<tool_call>{"name": "x", "arguments": {}}</tool_call><tool_call>{"name": "y", "arguments": {}}</tool_call>'
    )
    assert [c.name for c in p.parse_tool_calls(text)] == ["x", "y"]
    assert p.parse_tool_calls('<tool_call>{"name": "x", "arguments": {}}') == []  # unclosed: no call


@pytest.mark.parametrize(
    "text, verdict, method, strict",
    [
        ("<think>a</think><answer>\\boxed{YES}, Hα in emission</answer>", "YES", "answer_boxed", True),
        ("<think>a</think><answer>\\boxed{ no }</answer>", "NO", "answer_boxed", True),
        ("<answer>\\boxed{YES}</answer>", "YES", "answer_boxed", False),  # no <think>: format not strict
        ("<think>a</think><answer>yes, it is</answer>", "YES", "answer_text", False),
        ("<think>a</think>So the answer is \\boxed{NO}.", "NO", "boxed", False),
        ("<think>maybe YES maybe NO</think>Final: NO", "NO", "bare", False),
        ("<think>a</think>YES or NO, hard to say", None, "none", False),
        ("<think>no idea</think>I cannot decide.", None, "none", False),
        ("<think>a</think><answer>\\boxed{MAYBE}</answer>", None, "none", False),
    ],
)
def test_answer_fallbacks(text, verdict, method, strict):
    a = p.parse_answer(text)
    assert (a.verdict, a.method, a.strict) == (verdict, method, strict)


def test_split_reasoning():
    assert p.split_reasoning("<think> a </think>\nrest") == ("a", "rest")
    assert p.split_reasoning("<think>unfinished") == ("unfinished", "")


def test_truncate_tool_text():
    long = "x" * 3000
    out = p.truncate_tool_text(long)
    assert out.startswith("x" * 512) and "...(truncated)..." in out and len(out) == 1024 + len("...(truncated)...")
    assert p.truncate_tool_text("short") == "short"


# -- one structured form: the local markup and the messages a chat server's template writes ------------------------
def _template_messages(messages):
    """Our messages as the OpenAI JSON a server gets, images as the ``{"type": "image"}`` parts HF templates read."""
    from speco3.engine.remote import to_openai

    msgs, tools = to_openai(messages)
    for m in msgs:
        if isinstance(m["content"], list):
            m["content"] = [{"type": "image"} if c["type"] == "image_url" else c for c in m["content"]]
    return msgs, tools


def test_messages_through_the_training_template_give_the_local_markup(image):
    """The Spec-o3 training template, fed the messages and tools a server receives, writes byte for byte the markup
    the local engine is fed: first turn, an assistant answer, then a tool turn (but for the RL form's missing
    ``\\n`` after the sampled ``<|im_end|>``, the one known difference)."""
    from speco3_converters.chat_template import render

    first = p.first_turn_messages(image, "TASK TEXT")
    msgs, tools = _template_messages(first)
    assert tools == [p.TOOL_SCHEMA]
    local = p.render_prompt(p.first_turn_parts(image, "TASK TEXT"))
    assert render(msgs, tools) == local
    answer = '<think>x</think>\n<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {}}\n</tool_call>'
    tool = p.tool_turn_messages(image, "Generated spectral visualization focused on wavelength range (1, 2) Å.")
    tmsgs, _ = _template_messages(tool)
    served = render([*msgs, {"role": "assistant", "content": answer}, *tmsgs], tools)
    local_rl = local + answer + p.IM_END + p.render_prompt(p.tool_turn_parts(image, tool[0].content[1]))
    assert served == local_rl.replace(p.IM_END + p.IM_START + "user", p.IM_END + "\n" + p.IM_START + "user")
    assert served != local_rl


def test_markup_splits_text_only_at_images(image):
    parts = p.first_turn_parts(image, "T")
    assert [type(x).__name__ for x in parts] == ["str", "PreparedImage", "str"]
    assert p.tool_turn_parts(None, "err") == [p.TOOL_TURN_OPEN + "err" + p.TOOL_TURN_CLOSE]


def test_the_assistant_text_builders_write_the_trained_form_and_parse_back():
    call = p.tool_call_text([4800, 4920], "Zoom on Hβ region")
    assert call == ('<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"label": "Zoom on Hβ region", '
                    '"wavelength_range": [4800, 4920]}}\n</tool_call>')  # docs/design.md §2, label first
    assert json.loads(p.tool_call_text([1.5, 2], "")[len("<tool_call>\n"):-len("\n</tool_call>")]) == {
        "name": p.TOOL_NAME, "arguments": {"wavelength_range": [1.5, 2]}}  # no label: none written
    text = p.assistant_text("look closer", call)
    (parsed,) = p.parse_tool_calls(text)
    assert parsed.arguments == {"label": "Zoom on Hβ region", "wavelength_range": [4800, 4920]}
    assert p.split_reasoning(text) == ("look closer", call)
    final = p.parse_answer(p.assistant_text("done", p.answer_text("NO", "no Balmer emission")))
    assert (final.verdict, final.method, final.strict) == ("NO", "answer_boxed", True)
    with pytest.raises(ValueError, match="YES or NO"):
        p.answer_text("MAYBE")


def test_turn_bodies_are_what_the_markup_wraps(image):
    system, user = p.first_turn_messages(image, "T")
    (tool,) = p.tool_turn_messages(image, "ok")
    assert p.render_prompt(p.turn_body(system)) == p.SYSTEM_PROMPT + p.TOOLS_BLOCK
    assert p.render_prompt(p.turn_body(user), image="<image>") == "<image>\nT"
    assert p.render_prompt(p.turn_body(tool), image="<image>") == "<tool_response>\n<image>ok\n</tool_response>"
    assert p.turn_role(tool) == "user" and p.render_prompt(p.markup([tool], False)) == (
        p.IM_START + "user\n" + p.render_prompt(p.turn_body(tool)) + p.IM_END + "\n")

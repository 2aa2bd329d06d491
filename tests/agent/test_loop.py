"""The agent loop against ScriptedEngine: every branch of the protocol and every outcome kind."""

from __future__ import annotations

import threading

import pytest

from speco3.agent import EpisodeOptions, Outcome, render_prompt, run_episode, run_to_verdict
from speco3.agent.steps import AssistantStep, PromptStep, ToolStep, VerdictStep
from speco3.engine.base import EngineSettings
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import EngineError
from speco3.imaging import PreparedImage
from speco3_testkit.spectra import make_spectrum


def call(rng, label=None) -> str:
    args = {"wavelength_range": rng} if label is None else {"label": label, "wavelength_range": rng}
    import json

    return (f"<think>Look closer.</think>\n<tool_call>\n"
            f"{json.dumps({'name': 'spectral_visualization_tool', 'arguments': args}, ensure_ascii=False)}\n</tool_call>")


ANSWER_YES = "<think>Hα is in emission.</think>\n<answer>\\boxed{YES}</answer> Strong Balmer emission."
ANSWER_NO = "<think>Nothing there.</think><answer>\\boxed{NO}</answer>"


def test_zoom_then_answer(spectrum, render, protocol_dir):
    first = call([6500, 6600], "Zoom on Hα region")
    engine = ScriptedEngine([first, ANSWER_YES])
    steps, final = run_to_verdict(engine, spectrum, "TASK TEXT", render)
    kinds = [s.kind for s in steps]
    assert kinds == ["prompt", "assistant", "tool", "assistant", "verdict"]
    assert final.outcome is Outcome.YES and final.verdict == "YES" and final.strict
    assert final.turns == 2 and final.zooms == 1
    tool = steps[2]
    assert isinstance(tool, ToolStep) and tool.ok and tool.wavelength_range == (6500, 6600)
    assert tool.view.wavelength_range == (6500.0, 6600.0) and tool.view.frame == "rest"
    assert isinstance(tool.image, PreparedImage) and tool.image.width % 28 == 0 and tool.image.height % 28 == 0
    assert steps[1].reasoning == "Look closer." and steps[1].tool_name == "spectral_visualization_tool"
    # The exact bytes the engine received: the golden fixtures joined by the model's own turns.
    proto = protocol_dir
    expected = (
        (proto / "first_turn.txt").read_text(encoding="utf-8")
        + first + "<|im_end|>"
        + (proto / "tool_turn_image.txt").read_text(encoding="utf-8")
        + ANSWER_YES + "<|im_end|>"
    )
    assert render_prompt(engine.conversation) == expected
    assert render_prompt(final.extra["conversation"]) == expected
    images = [p for p in engine.conversation if isinstance(p, PreparedImage)]
    assert images[0] is steps[0].image and images[1] is tool.image


def test_invalid_range_gets_error_text_and_no_image(spectrum, render, protocol_dir):
    engine = ScriptedEngine([call([10000, 12000]), ANSWER_NO])
    steps, final = run_to_verdict(engine, spectrum, "TASK TEXT", render)
    tool = steps[2]
    assert not tool.ok and tool.error == "invalid_range" and tool.image is None
    assert tool.response_text == ("Error: The specified wavelength range [10000, 12000] is invalid or outside the "
                                  "available data range [3700.0, 9100.0].")
    tail = render_prompt(engine.conversation).split("<|im_end|>", 3)[3]
    assert tail.startswith((protocol_dir / "tool_turn_error.txt").read_text(encoding="utf-8"))
    assert final.outcome is Outcome.NO


@pytest.mark.parametrize(
    "rng, needle",
    [
        ([6600, 6500], "[6600, 6500] is invalid"),
        ([6500], "[6500] is invalid"),
        ([6500, 6600, 6700], "[6500, 6600, 6700] is invalid"),
        (["a", "b"], "['a', 'b'] is invalid"),
        ("6500-6600", "range 6500-6600 is invalid"),
        ([1000, 2000], "[1000, 2000] is invalid"),
    ],
)
def test_bad_ranges(spectrum, render, rng, needle):
    steps, _ = run_to_verdict(ScriptedEngine([call(rng), ANSWER_NO]), spectrum, "t", render)
    assert needle in steps[2].response_text and steps[2].error == "invalid_range"


def test_partial_overlap_is_rendered_and_floats_keep_their_form(spectrum, render):
    steps, _ = run_to_verdict(ScriptedEngine([call([3500.5, 3800.0]), ANSWER_NO]), spectrum, "t", render)
    assert steps[2].ok and "range (3500.5, 3800.0) Å." in steps[2].response_text


def test_rest_frame_uses_redshift(render):
    spec = make_spectrum(z=0.5)  # observed 3700-9100 -> rest 2466.7-6066.7
    steps, _ = run_to_verdict(ScriptedEngine([call([8000, 8100]), call([4800, 4900]), ANSWER_NO]), spec, "t", render)
    assert "available data range [2466.7, 6066.7]" in steps[2].response_text
    x, _ = steps[4].view.data()
    assert x.min() >= 4800 and x.max() <= 4900 and steps[4].ok


def test_no_data_points(render):
    spec = make_spectrum(gap=(5500, 5800))
    steps, _ = run_to_verdict(ScriptedEngine([call([5600, 5700]), ANSWER_NO]), spec, "t", render)
    assert steps[2].response_text == ("Error processing spectral visualization: No data points in specified "
                                      "wavelength range (5600, 5700)")
    assert steps[2].error == "no_data" and steps[2].image is None


def test_bad_arguments(spectrum, render):
    bad_json = '<tool_call>{"name": "spectral_visualization_tool", "arguments": "{oops"}</tool_call>'
    wrong_type = '<tool_call>{"name": "spectral_visualization_tool", "arguments": [6500, 6600]}</tool_call>'
    unknown = '<tool_call>{"name": "other_tool", "arguments": {}}</tool_call>'
    steps, final = run_to_verdict(ScriptedEngine([bad_json, wrong_type, unknown, ANSWER_NO]), spectrum, "t", render)
    texts = [s.response_text for s in steps if isinstance(s, ToolStep)]
    assert texts[0].startswith("Error when executing tool: Expecting property name")
    assert texts[1] == "Error when executing tool: arguments must be a JSON object, got list"
    assert texts[2] == "Error when executing tool: 'other_tool'"
    assert final.outcome is Outcome.NO and final.turns == 4


def test_only_first_call_runs(spectrum, render):
    two = call([6500, 6600]) + "\n" + call([4800, 4900])
    steps, _ = run_to_verdict(ScriptedEngine([two, ANSWER_NO]), spectrum, "t", render)
    tools = [s for s in steps if isinstance(s, ToolStep)]
    assert len(tools) == 1 and tools[0].wavelength_range == (6500, 6600)


def test_malformed_call_ends_with_format_error(spectrum, render):
    engine = ScriptedEngine(['<think>zoom</think><tool_call>{"name": "spectral_visualization_tool", '
                             '"arguments": {"wavelength_range": [6500, 6600]}</tool_call>', ANSWER_YES])
    steps, final = run_to_verdict(engine, spectrum, "t", render)
    assert final.outcome is Outcome.FORMAT_ERROR and final.verdict is None and final.turns == 1
    assert not any(isinstance(s, ToolStep) for s in steps)


def test_budget_of_eight_turns(spectrum, render):
    engine = ScriptedEngine([call([4000 + 100 * i, 4100 + 100 * i]) for i in range(10)])
    steps, final = run_to_verdict(engine, spectrum, "t", render)
    assert final.outcome is Outcome.BUDGET_EXHAUSTED and final.turns == 8
    assert sum(isinstance(s, AssistantStep) for s in steps) == 8
    assert sum(isinstance(s, ToolStep) for s in steps) == 7  # the 8th turn's call does not run
    assert engine.conversation[-1].endswith("<|im_end|>")


def test_answer_on_last_allowed_turn(spectrum, render):
    engine = ScriptedEngine([call([4000, 4100])] * 7 + [ANSWER_YES])
    _, final = run_to_verdict(engine, spectrum, "t", render)
    assert final.outcome is Outcome.YES and final.turns == 8


def test_cancel_mid_stream(spectrum, render):
    cancel = threading.Event()
    seen: list[str] = []

    def on_token(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 5:
            cancel.set()

    engine = ScriptedEngine([ANSWER_YES])
    steps, final = run_to_verdict(engine, spectrum, "t", render, EpisodeOptions(cancel=cancel, on_token=on_token))
    assert final.outcome is Outcome.CANCELLED and final.verdict is None
    assert len(seen) == 5 and steps[1].stop_reason == "cancelled" and steps[1].text == "".join(seen)
    assert not engine.conversation[-1].endswith("<|im_end|>")


def test_cancel_before_start(spectrum, render):
    cancel = threading.Event()
    cancel.set()
    engine = ScriptedEngine([ANSWER_YES])
    _, final = run_to_verdict(engine, spectrum, "t", render, EpisodeOptions(cancel=cancel))
    assert final.outcome is Outcome.CANCELLED and engine.conversations == []


def test_streaming_pieces_rebuild_the_text(spectrum, render):
    seen: list[str] = []
    engine = ScriptedEngine([call([6500, 6600], "Hα"), ANSWER_YES])
    steps, _ = run_to_verdict(engine, spectrum, "t", render, EpisodeOptions(on_token=seen.append))
    assert "".join(seen) == steps[1].text + steps[3].text and len(seen) > 20


def test_callback_errors_do_not_stop_the_episode(spectrum, render):
    def broken(_piece):
        raise RuntimeError("GUI bug")

    _, final = run_to_verdict(ScriptedEngine([ANSWER_YES]), spectrum, "t", render, EpisodeOptions(on_token=broken))
    assert final.outcome is Outcome.YES


@pytest.mark.parametrize("error", [EngineError("GPU lost"), OSError("device gone"), ConnectionResetError("reset")])
def test_engine_exception_becomes_outcome(spectrum, render, error):
    engine = ScriptedEngine([call([6500, 6600]), error])
    steps, final = run_to_verdict(engine, spectrum, "t", render)
    assert final.outcome is Outcome.ENGINE_ERROR and str(error) in final.detail and final.turns == 1


@pytest.mark.parametrize("error", [RuntimeError("boom"), TypeError("a bug"), KeyError("missing")])
def test_a_bug_in_the_engine_propagates_instead_of_becoming_an_outcome(spectrum, render, error):
    """Only engine, transport and input errors (`speco3.errors.OUTCOME_ERRORS`) are outcomes: a bug fails the run."""
    engine = ScriptedEngine([call([6500, 6600]), error])
    with pytest.raises(type(error)):
        run_to_verdict(engine, spectrum, "t", render)


def test_engine_load_failure(spectrum, render):
    engine = ScriptedEngine([ANSWER_YES])
    engine.close()
    _, final = run_to_verdict(engine, spectrum, "t", render)
    assert final.outcome is Outcome.ENGINE_ERROR and "closed" in final.detail


def test_context_full(spectrum, render):
    engine = ScriptedEngine([call([6500, 6600]), ANSWER_YES], settings=EngineSettings(n_ctx=700))
    steps, final = run_to_verdict(engine, spectrum, "t", render)
    assert final.outcome is Outcome.CONTEXT_FULL and final.verdict is None


def test_turn_truncated_at_max_tokens(spectrum, render):
    engine = ScriptedEngine(["<think>" + "word " * 50 + "</think><answer>\\boxed{YES}</answer>"])
    _, final = run_to_verdict(engine, spectrum, "t", render, EpisodeOptions(max_tokens_per_turn=20))
    assert final.outcome is Outcome.FORMAT_ERROR and "20 tokens" in final.detail


def test_truncated_turn_with_complete_call_still_zooms(spectrum, render):
    engine = ScriptedEngine([call([6500, 6600]) + " and more words" * 30, ANSWER_NO])
    steps, final = run_to_verdict(engine, spectrum, "t", render, EpisodeOptions(max_tokens_per_turn=60))
    assert steps[1].stop_reason == "length" and steps[2].ok and final.outcome is Outcome.NO
    assert "<|im_end|><|im_start|>user\n<tool_response>" in render_prompt(engine.conversation)


def test_empty_spectrum_is_input_error(render):
    import numpy as np

    spec = make_spectrum()
    spec.flux[:] = np.nan
    engine = ScriptedEngine([ANSWER_YES])
    steps, final = run_to_verdict(engine, spec, "t", render)
    assert final.outcome is Outcome.INPUT_ERROR and len(steps) == 1 and engine.conversations == []


def test_fully_masked_spectrum_is_input_error_not_a_flat_line_shown_to_the_model(render):
    """A spectrum whose every pixel is masked (finite zeros, zero inverse variance: SDSS spec-0269-51581-0003) is
    not drawn as a flat line for the model to judge."""
    spec = make_spectrum()
    spec.flux[:] = 0.0
    spec.mask[:] = True
    engine = ScriptedEngine([ANSWER_YES])
    steps, final = run_to_verdict(engine, spec, "t", render)
    assert final.outcome is Outcome.INPUT_ERROR and "masked" in final.detail
    assert len(steps) == 1 and engine.conversations == []


def test_render_failure_of_full_view(spectrum):
    def broken(_view):
        raise ValueError("no display")

    _, final = run_to_verdict(ScriptedEngine([ANSWER_YES]), spectrum, "t", broken)
    assert final.outcome is Outcome.INPUT_ERROR and "no display" in final.detail


def test_zoom_render_failure_is_reported_to_the_model(spectrum, render):
    def flaky(view):
        if view.is_zoom:
            raise ValueError("renderer crashed")
        return render(view)

    steps, final = run_to_verdict(ScriptedEngine([call([6500, 6600]), ANSWER_NO]), spectrum, "t", flaky)
    assert steps[2].response_text == "Error when executing tool: renderer crashed" and final.outcome is Outcome.NO


def test_generator_yields_live_and_image_cap(spectrum, render):
    gen = run_episode(ScriptedEngine([ANSWER_YES]), spectrum, "t", render, EpisodeOptions(image_max_tokens=64))
    first = next(gen)
    assert isinstance(first, PromptStep) and first.image.n_tokens <= 64
    rest = list(gen)
    assert isinstance(rest[-1], VerdictStep)


def test_task_object_text_is_sent(spectrum, render):
    from speco3.agent import get_task

    task = get_task("carbon")
    engine = ScriptedEngine([ANSWER_NO])
    steps, _ = run_to_verdict(engine, spectrum, task, render)
    assert steps[0].task_id == "carbon"
    assert render_prompt(engine.conversation).count(task.text) == 1

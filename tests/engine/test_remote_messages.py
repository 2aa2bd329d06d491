"""The remote engine's pure parts: server configuration, the API key's handling, messages as the server gets them,
and answers written back in the trained form (no server needed; the server tests are test_remote_server.py)."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from speco3.agent import protocol as p
from speco3.engine.base import EngineSettings
from speco3.engine.chatapi import ChatClient, ServerConfig, read_api_key
from speco3.engine.remote import NOT_VERIFIED, RemoteEngine, _Answer, server_report, to_openai
from speco3.errors import EngineError
from speco3.imaging import prepare_image
from speco3.spectra.view import View
from speco3_testkit.spectra import make_spectrum, pillow_render


@pytest.mark.parametrize("url, base", [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080"),
    ("https://gpu.example.org/llm/v1", "https://gpu.example.org/llm"),
])
def test_server_url_normalised(url, base):
    assert ServerConfig(url).url == base


@pytest.mark.parametrize("url", ["gpu-box:8080", "ftp://x/", "http:///v1", ""])
def test_bad_server_url_is_a_clear_error(url):
    with pytest.raises(EngineError, match="expected http"):
        ServerConfig(url)


def test_api_key_from_the_environment_never_in_repr_settings_or_logs(monkeypatch, caplog):
    monkeypatch.setenv("SPECO3_K", " sk-very-secret ")
    cfg = ServerConfig("http://127.0.0.1:9", api_key_env="SPECO3_K")
    assert read_api_key(cfg) == "sk-very-secret"
    caplog.set_level(logging.DEBUG)
    client = ChatClient(cfg)
    engine = RemoteEngine(cfg, EngineSettings(), client=client)
    shown = repr(client) + repr(cfg) + json.dumps(engine.settings.to_dict()) + repr(engine.info) + caplog.text
    assert "sk-very-secret" not in shown and engine.settings.to_dict()["server"] == "http://127.0.0.1:9"
    client.close()
    monkeypatch.delenv("SPECO3_K")
    with caplog.at_level(logging.WARNING):
        read_api_key(cfg)
    assert "SPECO3_K is not set" in caplog.text


def test_messages_as_the_server_gets_them():
    image = prepare_image(pillow_render(View(make_spectrum())))
    msgs, tools = to_openai(p.first_turn_messages(image, "TASK") + p.tool_turn_messages(None, "Error: bad range"))
    assert tools == [p.TOOL_SCHEMA]
    assert msgs[0] == {"role": "system", "content": p.SYSTEM_PROMPT}  # the template adds the tools block
    assert msgs[1]["role"] == "user" and [c["type"] for c in msgs[1]["content"]] == ["image_url", "text"]
    url = msgs[1]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,") and base64.b64decode(url.split(",", 1)[1]) == image.png
    assert msgs[1]["content"][1]["text"] == "\nTASK"
    assert msgs[2] == {"role": "tool", "content": "Error: bad range"}


def test_parsed_tool_calls_and_reasoning_are_written_back_in_the_trained_form():
    a = _Answer(content="", reasoning="Look at Hα.",
                calls={0: {"name": p.TOOL_NAME, "arguments": '{"wavelength_range": [6500, 6600]}'}})
    text = a.text()
    assert text.startswith("<think>Look at Hα.</think>")
    calls = p.parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [(p.TOOL_NAME, {"wavelength_range": [6500, 6600]})]
    assert _Answer(content="<answer>\\boxed{NO}</answer>").text() == "<answer>\\boxed{NO}</answer>"


def test_remote_engine_refuses_markup_parts_and_needs_loading():
    engine = RemoteEngine("http://127.0.0.1:9")
    with pytest.raises(EngineError, match="structured messages"):
        engine.extend(["<|im_start|>user\nhi<|im_end|>\n"])
    with pytest.raises(EngineError, match="not loaded"):
        engine.client  # noqa: B018
    assert engine.takes_messages and engine.info.server == "http://127.0.0.1:9"


def test_a_missing_ca_bundle_is_a_clear_error(tmp_path):
    with pytest.raises(EngineError, match="CA bundle"):
        ChatClient(ServerConfig("https://127.0.0.1:9", ca_bundle=str(tmp_path / "none.pem")))


def test_server_report_reads_vllm_model_lists_and_leaves_the_unreported_empty():
    """vLLM reports its context as ``max_model_len`` and the model's source as ``root``; no slots, build or digest:
    those stay None and the digests are said to be unverified (llama-server's /props: test_remote_server.py)."""
    listed = {"id": "spec-o3", "object": "model", "owned_by": "vllm", "root": "/models/spec-o3-7b",
              "max_model_len": 32768}
    r = server_report("vllm", listed, {})
    assert (r["model"], r["model_path"], r["n_ctx"], r["slots"], r["quant"], r["build"]) == (
        "spec-o3", "/models/spec-o3-7b", 32768, None, None, None)
    assert r["digests"] == NOT_VERIFIED
    junk = server_report("vllm", {"id": 3, "max_model_len": "big", "meta": [1]}, {"total_slots": True})
    assert (junk["model"], junk["n_ctx"], junk["slots"]) == (None, None, None)  # odd values are not recorded

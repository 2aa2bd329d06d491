"""Opt-in (``SPECO3_VLLM=1``): `server check`, ``inspect --server`` and ``vet --server`` against a real vLLM.

vLLM's CPU build (``scripts/setup-vllm.sh`` builds its environment) serves the test kit's tiny Hugging Face
Qwen2.5-VL checkpoint on loopback, started with the README's command (`speco3_testkit.vllmserver.SERVE_FLAGS`);
one server for this module (a start takes about 2 minutes on two cores). The forgotten ``--chat-template`` case
runs its own server: ``test_vllm_template.py``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from speco3.agent.fidelity import ANSWER, check_server, conversation
from speco3.cli import main
from speco3.engine.chatapi import ChatClient, ServerConfig
from speco3.engine.remote import RemoteEngine
from speco3.vetting import VettingStore
from speco3_testkit.llamaserver import FaultProxy
from speco3_testkit.spectra import pillow_render, write_csv_archive
from speco3_testkit.tinymodel import make_tiny_qwen25vl
from speco3_testkit.vllmserver import find_vllm_python, vllm_server

pytestmark = [
    pytest.mark.optin("SPECO3_VLLM"),  # may skip under SPECO3_STRICT_SKIPS=1 unless SPECO3_VLLM=1
    pytest.mark.skipif(os.environ.get("SPECO3_VLLM") != "1", reason="set SPECO3_VLLM=1 to run vLLM (minutes)"),
    pytest.mark.timeout(900),
]

COUNTS = re.compile(r"^(image|zoom): .* → (\d+) tokens locally, (\d+) on the server \(counted from /tokenize\): the same$",
                    re.M)
CLEAN_ENDS = {"yes", "no", "format_error", "budget_exhausted"}


def tiny_checkpoint(tmp_path_factory) -> Path:
    return make_tiny_qwen25vl(tmp_path_factory.mktemp("hf") / "tiny-qwen25vl", shards=1)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    python = find_vllm_python()
    if python is None:
        pytest.skip("vLLM's environment is not built (scripts/setup-vllm.sh)")
    model = tiny_checkpoint(tmp_path_factory)
    with vllm_server(python, model, log=tmp_path_factory.mktemp("vllm") / "server.log") as url:
        yield url




def test_server_check_exits_0_with_both_image_counts_printed_and_equal(vllm, capsys):
    assert main(["server", "check", vllm]) == 0
    out = capsys.readouterr().out
    assert "vllm · prompt from /tokenize" in out and "identical to the Spec-o3 training template" in out, out
    counts = {what: (int(local), int(server)) for what, local, server in COUNTS.findall(out)}
    # the full view at the model size: 784×476 px, 28×17 tokens; the zoom 588×364 px, 21×13
    assert counts == {"image": (476, 476), "zoom": (273, 273)}, out
    report = check_server(ServerConfig(vllm, retries=1))
    assert report.faithful and len(report.known) == 1, report.summary()


def test_a_scripted_zoom_turn_is_answered_and_both_images_counted(vllm):
    """The probe conversation (first turn, an answer with a tool call, a tool turn with a zoom image) as one
    request: answered, and the prompt holds both images at our sizes (476 + 273 tokens)."""
    _, messages, tools, _, image = conversation()
    client = ChatClient(ServerConfig(vllm, retries=1))
    model = client.get_json("/v1/models")["data"][0]["id"]
    usage: dict = {}
    body = {"model": model, "messages": messages, "tools": tools, "tool_choice": "none", "max_tokens": 4,
            "stream": True, "stream_options": {"include_usage": True}}
    assert client.stream_chat(body, lambda c: usage.update(c.get("usage") or {}))
    text_only = [{**m, "content": [p for p in m["content"] if p["type"] == "text"]}
                 if isinstance(m["content"], list) else m for m in messages]
    usage_text: dict = {}
    assert client.stream_chat({**body, "messages": text_only}, lambda c: usage_text.update(c.get("usage") or {}))
    client.close()
    # 273: the 100 Å zoom at the model size (588×364 px, 21×13); each image wrapped in vision_start/_end
    assert usage["prompt_tokens"] - usage_text["prompt_tokens"] == image.n_tokens + 273 + 2 * 2, (usage, usage_text)


def test_inspect_with_a_zoom_turn(vllm, tmp_path, monkeypatch, capsys):
    """``inspect --server``: the random model is made to call the tool on its first turn by vLLM's structured
    outputs (a regex of a valid tool call: the model itself writes it, under the constraint); the agent renders the
    zoom, sends the tool turn with its image, and the model answers it."""
    plain = RemoteEngine.request_body

    def first_turn_calls_the_tool(self, max_tokens):
        body = plain(self, max_tokens)
        if max_tokens > 1 and not any(m["role"] == "assistant" for m in body["messages"]):
            body.update(structured_outputs={"regex": re.escape(ANSWER)}, max_tokens=max(max_tokens, 160))
        return body

    monkeypatch.setattr(RemoteEngine, "request_body", first_turn_calls_the_tool)
    arch = write_csv_archive(tmp_path / "arch", 1)
    out = tmp_path / "trace"
    rc = main(["inspect", str(arch / "s00.csv"), "--task", "cv", "--server", vllm, "--max-tokens-per-turn", "24",
               "--max-turns", "3", "--out", str(out)], render=pillow_render)
    printed = capsys.readouterr()
    assert rc in (0, 3), printed.err
    saved = json.loads((out / "trace.json").read_text(encoding="utf-8"))
    kinds = [s["kind"] for s in saved["steps"]]
    tool = next(s for s in saved["steps"] if s["kind"] == "tool")
    assert tool["image"]["file"] and (out / tool["image"]["file"]).is_file(), tool
    assert kinds.index("tool") < len(kinds) - 1 and "assistant" in kinds[kinds.index("tool"):], kinds
    assert saved["steps"][-1]["kind"] == "verdict"
    assert saved["model"]["server"] == vllm and saved["settings"]["server"] == vllm


def test_vet_concurrency_4_through_the_fault_proxy_records_each_spectrum_once(vllm, tmp_path, monkeypatch, capsys):
    arch = write_csv_archive(tmp_path / "arch", 12)
    db = tmp_path / "r.sqlite"
    plan = ["pass", "drop", "500", "pass", "429", "truncate", "pass", "slow", "drop", "500"]
    with FaultProxy(vllm, plan, slow_s=12.0) as proxy:
        rc = main(["vet", str(arch), "--task", "cv", "--out", str(db), "--server", proxy.url, "--concurrency", "4",
                   "--max-tokens-per-turn", "24", "--max-turns", "3", "--request-timeout", "6", "--retries", "6"],
                  render=pillow_render)
        injected = list(proxy.faults)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and summary["done"] == 12 and summary["failed"] == 0, summary
    assert sorted(injected) == sorted(f for f in plan if f != "pass")
    with VettingStore(db, readonly=True) as s:
        rows = s.model_verdicts("cv", latest=False)
    assert len(rows) == 12 and len({r.spectrum_key for r in rows}) == 12
    assert {r.outcome for r in rows} <= CLEAN_ENDS, {r.outcome for r in rows}
    assert all(r.engine_settings["server"] == proxy.url for r in rows)

"""Opt-in (``SPECO3_VLLM=1``): vLLM started without ``--chat-template`` (the checkpoint's own template).

The README's command less that one flag (`speco3_testkit.vllmserver.serve_command`), on its own server, with a
checkpoint whose own template writes image placeholders in user turns only
(`speco3_testkit.vllmserver.USER_TURN_IMAGES_TEMPLATE`): vLLM then answers a tool turn with an image with HTTP 500
("Failed to apply prompt replacement for mm_items['image'][1]"), and `server check` must say what to pass instead
of blaming a missing endpoint.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from speco3.agent.fidelity import check_server, template_file
from speco3.cli import main
from speco3.engine.chatapi import ServerConfig
from speco3_testkit.tinymodel import make_tiny_qwen25vl
from speco3_testkit.vllmserver import (
    USER_TURN_IMAGES_TEMPLATE,
    find_vllm_python,
    set_chat_template,
    vllm_server,
)

pytestmark = [
    pytest.mark.optin("SPECO3_VLLM"),  # may skip under SPECO3_STRICT_SKIPS=1 unless SPECO3_VLLM=1
    pytest.mark.skipif(os.environ.get("SPECO3_VLLM") != "1", reason="set SPECO3_VLLM=1 to run vLLM (minutes)"),
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def vllm_own_template(tmp_path_factory):
    python = find_vllm_python()
    if python is None:
        pytest.skip("vLLM's environment is not built (scripts/setup-vllm.sh)")
    model = make_tiny_qwen25vl(tmp_path_factory.mktemp("hf") / "tiny-qwen25vl", shards=1)
    set_chat_template(model, USER_TURN_IMAGES_TEMPLATE)
    with vllm_server(python, model, log=tmp_path_factory.mktemp("vllm") / "server.log", chat_template=False) as url:
        yield url


def test_a_forgotten_chat_template_is_reported_as_such(vllm_own_template, capsys):
    assert main(["server", "check", vllm_own_template]) == 4
    out = capsys.readouterr()
    expected = f"the server's template fails on a tool turn with an image: pass --chat-template {template_file()}"
    assert expected in out.out, out.out
    assert "Failed to apply prompt replacement" in out.out and "HTTP 500" in out.out, out.out
    assert "no template endpoint" not in out.out + out.err
    # the first turn renders, so the image tokens are still measured (one-token completions): ours
    counts = re.findall(r"^(image|zoom): .* → (\d+) tokens locally, (\d+) on the server", out.out, re.M)
    assert counts == [("image", "476", "476"), ("zoom", "273", "273")], out.out
    report = check_server(ServerConfig(vllm_own_template, retries=1))
    assert report.template_failure and not report.error and not report.faithful


def test_vet_refuses_a_server_whose_template_fails_on_the_tool_turn(vllm_own_template, tmp_path, capsys):
    arch = tmp_path / "arch"
    arch.mkdir()
    np.savetxt(arch / "s.csv", np.c_[np.linspace(3700, 9100, 600), np.full(600, 10.0)], delimiter=",",
               header="wavelength,flux", comments="")
    db = tmp_path / "r.sqlite"
    assert main(["vet", str(arch), "--task", "cv", "--out", str(db), "--server", vllm_own_template]) == 1
    assert "the server's template fails on a tool turn with an image: pass --chat-template" in capsys.readouterr().err
    assert not db.exists()  # refused before anything was written

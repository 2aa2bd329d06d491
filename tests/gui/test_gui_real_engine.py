"""The agent panel driven by the real llama.cpp engine on the tiny random Qwen2.5-VL (converted at test time).

The tiny model's words are noise; what is checked is the plumbing a real model goes through: model store →
`open_engine` in the inference thread → tokens streamed into the panel → an outcome stored with the model's name.
"""

from __future__ import annotations

import importlib.util

import pytest

from speco3.engine.choice import InstalledModel, ModelServer
from speco3.gui.settings import AppSettings

pytestmark = [pytest.mark.gui, pytest.mark.llama]


@pytest.fixture(scope="session")
def tiny_model_files(tiny_gguf):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    return tiny_gguf("Q8_0")


def test_real_engine_streams_into_the_panel(qtbot, make_window, demo_archive, open_and_wait, tiny_model_files):
    from speco3_models.store import ModelStore

    text, mmproj = tiny_model_files
    installed = ModelStore().import_pair(text, mmproj, name="tiny-test")
    settings = AppSettings(vetter="t", n_ctx=8192, image_max_tokens=128, n_threads=2, n_gpu_layers=0)
    w = make_window(settings=settings, opener=None)
    w.agent.engine_opener = w.agent._open_engine  # the real `open_engine`, not the test factory
    open_and_wait(w, demo_archive)
    assert w.agent_panel.choice() == InstalledModel(installed.name)
    assert w.agent_panel.notice.isHidden()
    w.run_agent()
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=240000)
    mv = w.vetting.model_suggestion()
    assert mv is not None and mv.model_id == "tiny-test" and mv.tokens > 0
    assert mv.outcome in {"YES", "NO", "format_error", "budget_exhausted", "context_full"}
    assert "scripted" not in w.agent_panel.status.text() and "tokens" in w.agent_panel.status.text()
    assert len(w.agent_panel.transcript.toPlainText()) > 50
    print("tiny model run:", mv.outcome, mv.turns, mv.tokens, round(mv.seconds, 2), w.agent_panel.status.text())


def test_model_server_choice_runs_the_agent_on_the_server(qtbot, make_window, demo_archive, open_and_wait,
                                                          tiny_llama_server):
    """Settings → "Model server": the agent panel streams from a real llama-server, no local model installed; the
    verdict names the served model and the settings record the server."""
    settings = AppSettings(vetter="t", image_max_tokens=128, server_url=tiny_llama_server)
    w = make_window(settings=settings, opener=None)
    open_and_wait(w, demo_archive)
    assert isinstance(w.agent_panel.choice(), ModelServer) and tiny_llama_server in w.agent_panel.model_box.currentText()
    w.run_agent()
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=240000)
    mv = w.vetting.model_suggestion()
    assert mv is not None and mv.tokens > 0, w.agent_panel.status.text()
    assert mv.outcome in {"YES", "NO", "format_error", "budget_exhausted"}, mv.detail
    assert mv.engine_settings.get("server") == tiny_llama_server and mv.model_id.endswith(".gguf")
    assert len(w.agent_panel.transcript.toPlainText()) > 50

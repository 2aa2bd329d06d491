"""The typed model choice (`speco3.engine.choice`): what the command line's options choose, keys and labels, and
the engines it opens (the scripted one here; llama.cpp's and the server's in their own tests)."""

from __future__ import annotations

import argparse
import json

import pytest

from speco3.cli.options import model_choice, model_options, open_cli_engine, rollout_options, run_settings
from speco3.engine.base import EngineSettings
from speco3.engine.chatapi import ServerConfig
from speco3.engine.choice import (
    DEMO,
    SCRIPTED_LABEL,
    EngineKey,
    FilePair,
    InstalledModel,
    ModelServer,
    Scripted,
)
from speco3.engine.remote import RemoteEngine
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import EngineError, Speco3Error


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    model_options(p)
    rollout_options(p)
    return p.parse_args(list(argv))


def test_the_options_choose_one_typed_model():
    assert model_choice(_args()) == InstalledModel(None)
    assert model_choice(_args("--model", "tiny-q8_0")) == InstalledModel("tiny-q8_0")
    assert model_choice(_args("--text", "t.gguf", "--mmproj", "m.gguf")) == FilePair("t.gguf", "m.gguf")
    assert model_choice(_args("--scripted", "s.json")) == Scripted("s.json")
    served = model_choice(_args("--server", "http://gpu:8080/v1", "--model", "spec-o3-7b"))
    assert isinstance(served, ModelServer) and served.server and (served.url, served.model) == (
        "http://gpu:8080", "spec-o3-7b")
    with pytest.raises(Speco3Error, match="--text and --mmproj go together"):
        model_choice(_args("--text", "t.gguf"))


def test_keys_and_labels():
    es = EngineSettings()
    choices = [InstalledModel("a"), InstalledModel(None), FilePair("a", "b"), Scripted("a"), DEMO,
               ModelServer.of(ServerConfig("http://a:1")), ModelServer.of(ServerConfig("http://a:1", "a"))]
    assert len({c.key for c in choices}) == len(choices)  # no two choices share a key (a model named "server|…")
    assert len({c.engine_key(es) for c in choices}) == len(choices)
    assert InstalledModel("a").engine_key(es) == EngineKey.of(InstalledModel("a"), EngineSettings())
    assert InstalledModel("a").engine_key(es) != InstalledModel("a").engine_key(EngineSettings(n_ctx=es.n_ctx * 2))
    assert [c.label for c in choices] == ["a", "the default model", "a", "scripted a", SCRIPTED_LABEL,
                                          "the served model on http://a:1", "a on http://a:1"]
    assert DEMO.scripted and not InstalledModel("a").scripted and not FilePair("a", "b").server


def test_a_choice_opens_its_engine_unloaded(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["<answer>\\boxed{YES}</answer>"]), encoding="utf-8")
    engine = Scripted(str(script)).open(EngineSettings(n_ctx=4096))
    assert isinstance(engine, ScriptedEngine) and engine.settings.n_ctx == 4096
    server = ModelServer.of(ServerConfig("http://127.0.0.1:9")).open(EngineSettings())
    assert isinstance(server, RemoteEngine)  # nothing contacted before load
    server.close()
    with pytest.raises(EngineError, match="per spectrum"):
        DEMO.open(EngineSettings())
    args = _args("--scripted", str(script))
    cli = open_cli_engine(args, run_settings(args))  # the command line's path: opened and loaded
    assert isinstance(cli, ScriptedEngine)
    cli.close()

"""The model a run uses, as the command line and the app choose it: one typed choice, opened one way.

A `ModelChoice` is an installed model (`InstalledModel`: the model store's, by name, or its default), an explicit
pair of GGUF files (`FilePair`), an OpenAI-compatible model server (`ModelServer`), or a scripted engine
(`Scripted`: a JSON script file, the command line's test engine; or the canned demo session, whose engine is made
per spectrum by the app and by ``--demo``: `speco3.demo`). Each has a `key` (what identifies the model; with the
engine settings it is the `EngineKey` an engine is cached by), a `label` for people, and `open(settings)`, which
opens its engine without loading the model. `speco3.cli.options.model_choice` makes one from the command line's options, the app's agent
controller from its model box.

`SCRIPTED_LABEL` is the model id under which the canned demo session is recorded, so that no table, export or
report can pass it off as a model's verdict.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from speco3.engine import open_engine
from speco3.engine.base import Engine, EngineSettings
from speco3.engine.chatapi import ServerConfig
from speco3.engine.remote import RemoteEngine
from speco3.engine.scripted import load_script
from speco3.errors import EngineError

#: The model id of the scripted demo session (never a model's verdict).
SCRIPTED_LABEL = "scripted demo — not a model"


@dataclass(frozen=True)
class EngineKey:
    """What an opened engine is cached by: the model chosen and the engine settings it was opened with."""

    choice: ModelChoice
    settings: str  # the settings as canonical JSON

    @classmethod
    def of(cls, choice: ModelChoice, settings: EngineSettings) -> EngineKey:
        return cls(choice, json.dumps(settings.to_dict(), sort_keys=True, default=str))

    @property
    def label(self) -> str:
        return self.choice.label


class ModelChoice(ABC):
    """See module doc."""

    #: the model runs on a server (no local adapters; the server's own settings)
    server: ClassVar[bool] = False
    #: a scripted engine, not a model (the demo: one run, whatever K is set)
    scripted: ClassVar[bool] = False

    @property
    @abstractmethod
    def key(self) -> str:
        """What identifies the model (an installed model's name, the files, the server and model, the script)."""

    @property
    @abstractmethod
    def label(self) -> str:
        """The model for people: ``tiny-q8_0``, ``MODEL on URL``."""

    @abstractmethod
    def open(self, settings: EngineSettings, *, threaded: bool = False) -> Engine:
        """Its engine, opened with ``settings`` and not loaded yet (``threaded``: a llama.cpp engine behind an
        `speco3.engine.worker.EngineWorker`, callable from any thread)."""

    def engine_key(self, settings: EngineSettings) -> EngineKey:
        return EngineKey.of(self, settings)


@dataclass(frozen=True)
class InstalledModel(ModelChoice):
    """A model of the model store, by name (None: the store's default)."""

    name: str | None = None

    @property
    def key(self) -> str:
        return f"model:{self.name or ''}"

    @property
    def label(self) -> str:
        return self.name or "the default model"

    def open(self, settings: EngineSettings, *, threaded: bool = False) -> Engine:
        return open_engine(self.name, settings, threaded=threaded, load=False)


@dataclass(frozen=True)
class FilePair(ModelChoice):
    """A text model GGUF and its vision projector GGUF, given as files."""

    text: str
    mmproj: str

    @property
    def key(self) -> str:
        return json.dumps(["files", self.text, self.mmproj])

    @property
    def label(self) -> str:
        return Path(self.text).stem

    def open(self, settings: EngineSettings, *, threaded: bool = False) -> Engine:
        return open_engine((self.text, self.mmproj), settings, threaded=threaded, load=False)


@dataclass(frozen=True)
class ModelServer(ModelChoice):
    """An OpenAI-compatible model server (`speco3.engine.remote.RemoteEngine`)."""

    config: ServerConfig = field(compare=False, hash=False)
    url: str = ""
    model: str | None = None
    server: ClassVar[bool] = True

    @classmethod
    def of(cls, config: ServerConfig) -> ModelServer:
        return cls(config, config.url, config.model)

    @property
    def key(self) -> str:
        return json.dumps(["server", self.url, self.model])

    @property
    def label(self) -> str:
        return f"{self.model or 'the served model'} on {self.url}"

    def open(self, settings: EngineSettings, *, threaded: bool = False) -> Engine:
        return RemoteEngine(self.config, settings)


@dataclass(frozen=True)
class Scripted(ModelChoice):
    """A scripted engine: a JSON script file (``--scripted``, the tests' engine), or, without one, the canned demo
    session, which the app and ``--demo`` open per spectrum (`speco3.demo.demo_engine`)."""

    script: str | None = None
    scripted: ClassVar[bool] = True

    @property
    def key(self) -> str:
        return json.dumps(["scripted", self.script])

    @property
    def label(self) -> str:
        return SCRIPTED_LABEL if self.script is None else f"scripted {Path(self.script).name}"

    def open(self, settings: EngineSettings, *, threaded: bool = False) -> Engine:
        if self.script is None:
            raise EngineError("the scripted demo session is opened per spectrum, by the app")
        return load_script(self.script, settings=settings)


#: The canned demo session of the app's demo archive.
DEMO = Scripted()

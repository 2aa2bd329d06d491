"""speco3.engine: the inference engine interface, the llama.cpp mtmd engine and its worker thread.

Importing this package does not import llama-cpp-python; the native library is loaded on first use.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Union

from speco3.engine.base import Engine, EngineSettings, EngineStats, GenerationResult, ModelInfo, Part

if TYPE_CHECKING:  # the model store is imported when a model is opened, not with this package
    from speco3_models.installed import InstalledModel

logger = logging.getLogger(__name__)

__all__ = [
    "Engine", "EngineSettings", "EngineStats", "GenerationResult", "ModelInfo", "Part",
    "LlamaMtmdEngine", "EngineWorker", "open_engine",
]


def __getattr__(name: str):
    if name == "LlamaMtmdEngine":
        from speco3.engine.llama import LlamaMtmdEngine

        return LlamaMtmdEngine
    if name == "EngineWorker":
        from speco3.engine.worker import EngineWorker

        return EngineWorker
    raise AttributeError(name)


#: A model to open: None (the store's default), an installed model's name, an `InstalledModel`, or GGUF paths.
ModelRef = Union["InstalledModel", str, tuple[str | Path, str | Path], list[str | Path], None]  # noqa: UP007


def _model_paths(model: ModelRef) -> tuple[Path, Path, ModelInfo]:
    """Text and projector paths plus a `ModelInfo` for an installed model, a name, or a ``(text, mmproj)`` pair."""
    from speco3_models.installed import InstalledModel
    from speco3_models.store import resolve_model

    if model is None or isinstance(model, str) and Path(model).suffix != ".gguf":
        model = resolve_model(model)
    if isinstance(model, (tuple, list)):
        if len(model) != 2:
            raise TypeError("a model given as paths must be (text_gguf, mmproj_gguf)")
        text, mmproj = Path(model[0]), Path(model[1])
        return text, mmproj, ModelInfo(model_id=text.stem, text_path=str(text), mmproj_path=str(mmproj))
    if not isinstance(model, InstalledModel):
        raise TypeError(f"a model is an installed model, its name, or (text_gguf, mmproj_gguf); got {model!r:.120}")
    return model.text_path, model.mmproj_path, ModelInfo(**model.model_info())


def open_engine(model: ModelRef = None, settings: EngineSettings | None = None, *, threaded: bool = True,
                load: bool = True, n_batch: int = 512, warmup: bool = True) -> Engine:
    """Open the llama.cpp engine for a model.

    Parameters
    ----------
    model : None, str, InstalledModel or (text, mmproj)
        None: the model store's default model; a name: that installed model; an installed model from the
        store; or explicit paths to the text GGUF and the projector GGUF.
    settings : EngineSettings, optional
    threaded : bool
        Wrap the engine in an `EngineWorker` (one thread owns the native contexts; callable from anywhere).
    load : bool
        Load the model now (raises `ModelFileError` / `EngineError`).
    n_batch, warmup
        Passed to `LlamaMtmdEngine`.
    """
    from speco3.engine.llama import LlamaMtmdEngine
    from speco3.engine.worker import EngineWorker

    text, mmproj, info = _model_paths(model)
    engine: Engine = LlamaMtmdEngine(text, mmproj, settings or EngineSettings(), info, n_batch=n_batch, warmup=warmup)
    if threaded:
        engine = EngineWorker(engine)
    if load:
        try:
            engine.load()
        except BaseException:
            engine.close()
            raise
    return engine

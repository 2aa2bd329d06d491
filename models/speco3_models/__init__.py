"""Model catalog, local model store, hub download and verification.

Public API
----------
- `speco3_models.catalog`: known models (``catalog()``, ``find(name)``, ``get(name)``), shipped as package data.
- `speco3_models.gguf_check`: ``read_gguf_summary``, ``check_text_model``, ``check_projector``, ``check_pair``.
- `speco3_models.probe`: ``probe_load(text, mmproj, timeout)`` in a subprocess.
- `speco3_models.store`: ``ModelStore`` (list / get / default / import_pair / verify / remove) and
  ``resolve_model(name_or_None)`` for the engine and the GUI.

- `speco3_models.pull`: ``pull(store, name, quant, convert=...)`` from the Hugging Face Hub.

huggingface-hub is imported only by `speco3_models.pull`, and only when a download is asked for. This package
imports neither the application (`speco3`) nor the converter (`speco3_converters`).
"""

from __future__ import annotations

from speco3_models.installed import InstalledModel, Provenance
from speco3_models.store import ModelStore, resolve_model

__all__ = ["InstalledModel", "ModelStore", "Provenance", "resolve_model"]

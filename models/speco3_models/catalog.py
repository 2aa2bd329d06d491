"""Known models, shipped as data in the wheel (``catalog.json`` next to this module).

The catalog says what is known about each published checkpoint: where it lives on the Hugging Face Hub, which
files a checkpoint folder must hold, size estimates per quantization (flagged as estimates), licences and the
recommended runtime settings. It lists no checksums: none are published for GGUF builds of these checkpoints,
so files are hashed when they arrive and the hashes live in the installed-models manifest.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from speco3_base.defaults import DEFAULT_N_CTX
from speco3_models.errors import ModelStoreError

logger = logging.getLogger(__name__)

#: Text quantizations a model can be built or pulled at (``F16``/``BF16``/``F32``: no quantization step).
QUANTS: tuple[str, ...] = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32")
#: Quantizations offered for the text model, best size/quality trade-off first.
QUANT_PREFERENCE: tuple[str, ...] = ("Q4_K_M", "Q5_K_M", "Q8_0", "F16", "BF16", "F32")


@dataclass(frozen=True)
class SizeEstimate:
    """A byte count and whether it is an estimate (with what it is based on)."""

    value: float
    estimate: bool = True
    basis: str = ""

    def __str__(self) -> str:
        return ("≈ " if self.estimate else "") + format_bytes(self.value)


@dataclass(frozen=True)
class CatalogModel:
    """One known model.

    Attributes
    ----------
    name : str
        Short name used on the command line (``spec-o3-7b``).
    repo_id, revision : str
        Hugging Face repository and default revision.
    hidden_size : int
        Text model width; the projector's output width must equal it.
    text_bytes, mmproj_bytes : dict of str to SizeEstimate
        Size of the text GGUF per quantization and of the projector per type.
    recommended : dict
        ``quant``, ``mmproj_quant``, ``n_ctx`` and ``image_max_tokens``.
    """

    name: str
    display_name: str
    rank: int
    repo_id: str
    revision: str
    description: str
    base_model: str
    architecture: str
    text_arch: str
    hidden_size: int
    n_layers: int
    tied_embeddings: bool
    license: dict[str, str]
    required_files: tuple[str, ...]
    optional_files: tuple[str, ...]
    weight_patterns: tuple[str, ...]
    download_bytes: SizeEstimate
    text_bytes: dict[str, SizeEstimate]
    mmproj_bytes: dict[str, SizeEstimate]
    recommended: dict[str, Any]
    memory_bytes: SizeEstimate | None = None
    published_macro_f1: float | None = None
    published_task_f1: dict[str, float] = field(default_factory=dict)  # SpecVI-Bench F1 per task (%)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def recommended_quant(self) -> str:
        return str(self.recommended.get("quant", "Q4_K_M"))

    @property
    def recommended_ctx(self) -> int:
        return int(self.recommended.get("n_ctx", DEFAULT_N_CTX))

    @property
    def image_max_tokens(self) -> int | None:
        value = self.recommended.get("image_max_tokens")
        return int(value) if value is not None else None

    def installed_bytes(self, quant: str | None = None, mmproj_quant: str | None = None) -> SizeEstimate | None:
        """Estimated disk use of a text + projector pair (``None`` when the quant is not listed)."""
        quant = (quant or self.recommended_quant).upper()
        mmproj_quant = (mmproj_quant or self.recommended.get("mmproj_quant", "F16")).upper()
        text, proj = self.text_bytes.get(quant), self.mmproj_bytes.get(mmproj_quant)
        if text is None or proj is None:
            return None
        return SizeEstimate(text.value + proj.value, text.estimate or proj.estimate, "text + projector")

    def install_name(self, quant: str | None = None) -> str:
        """Store name of this model at ``quant`` (``spec-o3-7b-q4_k_m``)."""
        return f"{self.name}-{(quant or self.recommended_quant).lower()}"


def format_bytes(n: float) -> str:
    """``1.35e9`` → ``'1.35 GB'`` (decimal units, as download sizes are quoted)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def _size(raw: object, where: str) -> SizeEstimate:
    if isinstance(raw, (int, float)):
        return SizeEstimate(float(raw), estimate=False)
    if not isinstance(raw, dict) or not isinstance(raw.get("value"), (int, float)):
        raise ModelStoreError(f"catalog: {where} must be a number or {{'value': number, 'estimate': bool}}")
    return SizeEstimate(float(raw["value"]), bool(raw.get("estimate", True)), str(raw.get("basis", "")))


def _parse(entry: dict[str, Any]) -> CatalogModel:
    name = entry.get("name", "?")
    try:
        files = entry.get("files", {})
        return CatalogModel(
            name=str(entry["name"]),
            display_name=str(entry.get("display_name", entry["name"])),
            rank=int(entry.get("rank", 99)),
            repo_id=str(entry["repo_id"]),
            revision=str(entry.get("revision", "main")),
            description=str(entry.get("description", "")),
            base_model=str(entry.get("base_model", "")),
            architecture=str(entry["architecture"]),
            text_arch=str(entry["text_arch"]),
            hidden_size=int(entry["hidden_size"]),
            n_layers=int(entry["n_layers"]),
            tied_embeddings=bool(entry.get("tied_embeddings", False)),
            license={str(k): str(v) for k, v in entry.get("license", {}).items()},
            required_files=tuple(files.get("required", ())),
            optional_files=tuple(files.get("optional", ())),
            weight_patterns=tuple(files.get("weights", ("*.safetensors",))),
            download_bytes=_size(entry["download_bytes"], f"{name}.download_bytes"),
            text_bytes={q.upper(): _size(v, f"{name}.text_bytes.{q}") for q, v in entry["text_bytes"].items()},
            mmproj_bytes={q.upper(): _size(v, f"{name}.mmproj_bytes.{q}") for q, v in entry["mmproj_bytes"].items()},
            recommended=dict(entry.get("recommended", {})),
            memory_bytes=_size(entry["memory_bytes"], f"{name}.memory_bytes") if "memory_bytes" in entry else None,
            published_macro_f1=entry.get("published_macro_f1"),
            published_task_f1={str(k): float(v) for k, v in entry.get("published_task_f1", {}).items()},
            extra={k: v for k, v in entry.items() if k in ("params", "shape")},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelStoreError(f"catalog entry {name!r} is malformed: {exc!r}") from exc


@lru_cache(maxsize=1)
def _load() -> tuple[tuple[CatalogModel, ...], tuple[str, ...]]:
    text = resources.files("speco3_models").joinpath("catalog.json").read_text(encoding="utf-8")
    data = json.loads(text)
    models = tuple(sorted((_parse(e) for e in data["models"]), key=lambda m: m.rank))
    return models, tuple(data.get("notes", ()))


def catalog() -> list[CatalogModel]:
    """All known models, best first."""
    return list(_load()[0])


def catalog_notes() -> list[str]:
    """What the catalog's numbers mean (estimates, missing checksums)."""
    return list(_load()[1])


def find(name: str) -> CatalogModel | None:
    """Catalog model by short name, display name or repository id (case-insensitive), else ``None``."""
    key = name.strip().lower()
    for model in _load()[0]:
        if key in (model.name.lower(), model.display_name.lower(), model.repo_id.lower()):
            return model
    return None


def get(name: str) -> CatalogModel:
    """Like `find` but raises `ModelStoreError` naming the known models."""
    model = find(name)
    if model is None:
        known = ", ".join(m.name for m in _load()[0])
        raise ModelStoreError(f"unknown model {name!r}; known models: {known} (or give a Hugging Face repo id)")
    return model

"""Records of installed models as kept in the store's manifest (``manifest.json``)."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

from speco3_models import catalog
from speco3_models.errors import ModelStoreError

logger = logging.getLogger(__name__)

MANIFEST_SCHEMA = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")



class ModelInfoFields(TypedDict):
    """The fields of the engine's ``speco3.engine.base.ModelInfo`` that an installed model fills."""

    model_id: str
    quant: str | None
    text_sha256: str | None
    mmproj_sha256: str | None
    text_path: str
    mmproj_path: str

@dataclass
class FileRecord:
    """One installed file.

    ``managed`` files live inside the store (copied, moved or hard-linked there) and are deleted with the model;
    unmanaged ones were referenced in place and are never deleted by the store.
    """

    path: str
    size: int
    sha256: str
    managed: bool = True

    @property
    def file(self) -> Path:
        return Path(self.path)


@dataclass
class Provenance:
    """Where an installed model came from.

    ``kind`` is ``pulled`` (``source`` = ``repo@revision``), ``imported`` (``source`` = original path of the text
    model) or ``converted`` (``source`` = checkpoint folder; ``converter_version`` set).
    """

    kind: str
    source: str
    converter_version: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        verb = {"pulled": "pulled from", "imported": "imported from", "converted": "converted from"}.get(self.kind, self.kind)
        extra = f" (converter {self.converter_version})" if self.converter_version else ""
        return f"{verb} {self.source}{extra}"


@dataclass
class InstalledModel:
    """A text model + vision projector pair registered in the store."""

    name: str
    text: FileRecord
    mmproj: FileRecord
    quant: str
    mmproj_quant: str
    hidden_size: int
    n_layers: int
    provenance: Provenance
    created: str
    catalog_id: str | None = None

    @property
    def text_path(self) -> Path:
        return self.text.file

    @property
    def mmproj_path(self) -> Path:
        return self.mmproj.file

    @property
    def size(self) -> int:
        return self.text.size + self.mmproj.size

    @property
    def catalog_entry(self) -> catalog.CatalogModel | None:
        return catalog.find(self.catalog_id) if self.catalog_id else None

    def model_info(self) -> ModelInfoFields:
        """The fields of the engine's ``ModelInfo`` for this model (recorded with every verdict)."""
        return {"model_id": self.catalog_id or self.name, "quant": self.quant, "text_sha256": self.text.sha256,
                "mmproj_sha256": self.mmproj.sha256, "text_path": str(self.text_path),
                "mmproj_path": str(self.mmproj_path)}

    def to_dict(self, root: Path | None = None) -> dict[str, Any]:
        """Manifest form; managed files under ``root`` are stored relative to it (the store can be moved)."""
        out = asdict(self)
        if root is not None:
            for role in ("text", "mmproj"):
                rec = out[role]
                path = Path(rec["path"])
                if rec["managed"] and path.is_absolute() and path.is_relative_to(root):
                    rec["path"] = path.relative_to(root).as_posix()
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any], root: Path | None = None) -> InstalledModel:
        """Inverse of `to_dict`: relative file paths are resolved against ``root``."""
        try:
            files = {}
            for role in ("text", "mmproj"):
                rec = dict(raw[role])
                if root is not None and not Path(rec["path"]).is_absolute():
                    rec["path"] = str(root / rec["path"])
                files[role] = FileRecord(**rec)
            return cls(
                name=str(raw["name"]), text=files["text"], mmproj=files["mmproj"],
                quant=str(raw["quant"]), mmproj_quant=str(raw["mmproj_quant"]), hidden_size=int(raw["hidden_size"]),
                n_layers=int(raw["n_layers"]), provenance=Provenance(**raw["provenance"]), created=str(raw["created"]),
                catalog_id=raw.get("catalog_id"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelStoreError(f"malformed manifest entry {raw.get('name', '?')!r}: {exc!r}") from exc

    def rank_key(self) -> tuple:
        """Sort key: catalog models first (best first), recommended quant first, newest first."""
        entry = self.catalog_entry
        prefs = catalog.QUANT_PREFERENCE
        qrank = prefs.index(self.quant.upper()) if self.quant.upper() in prefs else len(prefs)
        return (entry.rank if entry else 99, qrank, _neg_time(self.created), self.name)


def _neg_time(stamp: str) -> float:
    try:
        return -datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def now_iso() -> str:
    """Current UTC time, ISO 8601 with seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid store name, else raise `ModelStoreError`."""
    if not NAME_RE.match(name) or name in (".", ".."):
        raise ModelStoreError(f"invalid model name {name!r}: use letters, digits, '.', '_' and '-' (at most 80, "
                              "starting with a letter or digit)")
    return name


def derive_name(text_path: Path, quant: str) -> str:
    """A store name from a text model file name (``Spec-o3-7B-Q4_K_M.gguf`` → ``spec-o3-7b-q4_k_m``)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", text_path.stem).strip("-._").lower() or "model"
    if quant.lower() not in stem:
        stem = f"{stem}-{quant.lower()}"
    return stem[:80]


def guess_catalog_id(text_path: Path, general_name: str | None, hidden_size: int) -> str | None:
    """The catalog model a file pair most likely is (by name and hidden size), else ``None``."""
    hay = " ".join(filter(None, [text_path.name, general_name or ""])).lower().replace("_", "-")
    for model in catalog.catalog():
        if model.hidden_size == hidden_size and model.name in hay:
            return model.name
    return None

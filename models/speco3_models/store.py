"""The local model store: installed text + projector pairs, their manifest, verification and removal.

Layout under the store root (default ``data_dir()/models``)::

    manifest.json          installed models, default choice (written atomically, under a lock)
    manifest.lock          inter-process lock (GUI and command line may run at once)
    <name>/                files of one installed model (copied, moved or hard-linked here)
    adapters/              LoRA adapter GGUFs (`add_adapter`; each recorded with the digest of its base)
    downloads/             partial and finished hub downloads (``pull``)

Nothing here touches the network; downloads are `speco3_models.pull.pull(store, ...)`, which imports
huggingface-hub only when called.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from speco3_base.dirs import data_dir
from speco3_base.errors import ModelFileError
from speco3_base.fileio import Progress, sha256_file
from speco3_models import catalog
from speco3_models.adapters import InstalledAdapter, check_base, read_adapter, require_base
from speco3_models.errors import HOW_TO_GET_A_MODEL, ModelNotInstalledError, ModelStoreError
from speco3_models.files import atomic_write_json, locked, place_file
from speco3_models.gguf_check import (
    TEXT_ARCH,
    check_pair,
    check_projector,
    check_text_model,
    read_gguf_summary,
)
from speco3_models.installed import (
    MANIFEST_SCHEMA,
    FileRecord,
    InstalledModel,
    Provenance,
    check_name,
    derive_name,
    guess_catalog_id,
    now_iso,
)

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


@dataclass
class FileCheck:
    """Verification of one installed file."""

    role: str
    path: str
    problems: list[str] = field(default_factory=list)
    sha256_checked: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class VerifyReport:
    """Result of `ModelStore.verify`: one `FileCheck` per file plus pair-level problems."""

    name: str
    files: list[FileCheck]
    pair_problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files) and not self.pair_problems

    def lines(self) -> list[str]:
        out = [f"{self.name}: {'OK' if self.ok else 'FAILED'}"]
        for f in self.files:
            state = "ok" if f.ok else "; ".join(f.problems)
            hashed = " (sha256 checked)" if f.ok and f.sha256_checked else ""
            out.append(f"  {f.role:6s} {f.path}: {state}{hashed}")
        out += [f"  pair: {p}" for p in self.pair_problems]
        return out


class ModelStore:
    """Installed models of this user.

    Parameters
    ----------
    root : path-like, optional
        Store folder; default ``data_dir()/models`` (``SPECO3_DATA_DIR`` overrides the platform folder).
    """

    def __init__(self, root: str | os.PathLike[str] | None = None):
        self.root = (Path(root) if root is not None else data_dir() / "models").expanduser().absolute()
        self.manifest_path = self.root / "manifest.json"
        self._lock_path = self.root / "manifest.lock"

    # -- manifest -----------------------------------------------------------------------------------------
    def _read(self) -> dict[str, Any]:
        try:
            raw = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"schema": MANIFEST_SCHEMA, "default": None, "models": []}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelStoreError(f"cannot read the model manifest {self.manifest_path}: {exc}; fix or delete it "
                                  "(installed files stay in place and can be imported again)") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("models"), list):
            raise ModelStoreError(f"the model manifest {self.manifest_path} has an unknown layout")
        if raw.get("schema", 1) > MANIFEST_SCHEMA:
            raise ModelStoreError(f"the model manifest {self.manifest_path} was written by a newer Spec-o3 "
                                  f"(schema {raw['schema']}); update Spec-o3")
        return raw

    def _mutate(self, change: Callable[[dict[str, Any]], _T]) -> _T:
        with locked(self._lock_path):
            data = self._read()
            result = change(data)
            data["schema"] = MANIFEST_SCHEMA
            atomic_write_json(self.manifest_path, data)
            return result

    def _models(self, data: dict[str, Any] | None = None) -> list[InstalledModel]:
        data = data if data is not None else self._read()
        return [InstalledModel.from_dict(m, self.root) for m in data["models"]]

    # -- queries ------------------------------------------------------------------------------------------
    def list(self) -> list[InstalledModel]:
        """Installed models, best first (catalog rank, recommended quant, newest)."""
        return sorted(self._models(), key=InstalledModel.rank_key)

    def find(self, name: str) -> InstalledModel | None:
        """Model by exact name, else the best installed build of a catalog model (``spec-o3-7b``)."""
        models = self.list()
        for m in models:
            if m.name == name:
                return m
        entry = catalog.find(name)
        builds = [m for m in models if entry and m.catalog_id == entry.name]
        return builds[0] if builds else None

    def get(self, name: str) -> InstalledModel:
        """Like `find`, raising `ModelNotInstalledError` (naming what is installed) when nothing matches."""
        model = self.find(name)
        if model is None:
            names = ", ".join(m.name for m in self.list()) or "none"
            raise ModelNotInstalledError(f"model {name!r} is not installed (installed: {names})")
        return model

    def default(self) -> InstalledModel | None:
        """The user's chosen default if still installed, else the best installed model, else ``None``."""
        data = self._read()
        models = sorted(self._models(data), key=InstalledModel.rank_key)
        chosen = data.get("default")
        for m in models:
            if m.name == chosen:
                return m
        return models[0] if models else None

    def default_name(self) -> str | None:
        """The name the user chose as default (``None`` when not chosen)."""
        return self._read().get("default")

    def set_default(self, name: str | None) -> None:
        """Choose the default model (``None``: back to the best installed)."""
        if name is not None:
            name = self.get(name).name

        def change(data):
            data["default"] = name

        self._mutate(change)

    # -- adding models ------------------------------------------------------------------------------------
    def import_pair(self, text: str | os.PathLike[str], mmproj: str | os.PathLike[str], name: str | None = None, *,
                    copy: bool = True, move: bool = False, progress: Progress | None = None,
                    provenance: Provenance | None = None, catalog_id: str | None = None,
                    make_default: bool = False, known_sha256: dict[str, str] | None = None) -> InstalledModel:
        """Check a text model + projector pair and install it.

        Parameters
        ----------
        text, mmproj : path-like
            The GGUF text model (arch ``qwen2vl``) and vision projector (``clip``, ``qwen2.5vl_merger``).
        name : str, optional
            Store name; default derived from the text file name and quantization.
        copy : bool
            Copy the files into the store (default). With ``copy=False`` they are hard-linked into the store
            (no extra space), or referenced in place when a hard link is impossible; with ``move=True`` moved.
        progress : callable, optional
            ``progress(label, done, total)`` for copying and hashing.
        provenance : Provenance, optional
            Default: imported from the text file's path.
        known_sha256 : dict of str to str, optional
            SHA-256 already computed for a source path (a download checked on arrival); used only when the file
            is moved or linked, not copied, so the recorded hash is always of the bytes in the store.

        Raises
        ------
        ModelFileError
            A file is missing, corrupt, of the wrong architecture or projector type, or the widths differ.
        ModelStoreError
            The name is invalid or already installed.
        """
        text, mmproj = Path(text).expanduser().resolve(), Path(mmproj).expanduser().resolve()
        for path in (text, mmproj):
            if not path.is_file():
                raise ModelFileError(path, "no such file")
        if text == mmproj:
            raise ModelFileError(text, "the text model and the projector must be two different files")
        pair = check_pair(text, mmproj)
        quant = pair.text.quant
        name = check_name(name or derive_name(text, quant))
        if any(m.name == name for m in self._models()):
            raise ModelStoreError(f"a model named {name!r} is already installed; remove it first or choose another "
                                  "name (--name)")
        mode = "move" if move else ("copy" if copy else "link")
        if mode == "copy":
            need = text.stat().st_size + mmproj.stat().st_size
            if need > self.disk_free():
                raise ModelStoreError(f"not enough disk space in {self.root} to copy {need / 1e9:.2f} GB "
                                      f"({self.disk_free() / 1e9:.2f} GB free); use --link or --move")
        known = dict(known_sha256 or {}) if mode != "copy" else {}
        folder = self.root / name
        folder_existed = folder.exists()
        placed: list[tuple[Path, Path]] = []
        try:
            records = []
            dst_names = (text.name, mmproj.name if mmproj.name != text.name else f"mmproj-{mmproj.name}")
            for src, dst_name in zip((text, mmproj), dst_names, strict=True):
                dst = folder / dst_name
                if dst.resolve() == src:  # already in place (a converter writing into the store)
                    where = src
                else:
                    if dst.exists():  # left by an interrupted import: no manifest entry owns it (checked above)
                        logger.warning("replacing %s, left behind by an interrupted import", dst)
                        dst.unlink()
                    where = place_file(src, dst, mode, progress)
                    placed.append((src, where))
                managed = where.parent == folder
                digest = known.get(str(src)) or sha256_file(where, progress)
                records.append(FileRecord(str(where), where.stat().st_size, digest, managed))
            check_pair(records[0].file, records[1].file)  # the bytes now in the store (milliseconds)
            model = InstalledModel(
                name=name, text=records[0], mmproj=records[1], quant=quant, mmproj_quant=pair.mmproj.quant,
                hidden_size=pair.width, n_layers=int(pair.text.get(f"{TEXT_ARCH}.block_count")),
                provenance=provenance or Provenance("imported", str(text), details={"mode": mode}),
                created=now_iso(),
                catalog_id=catalog_id or guess_catalog_id(text, pair.text.name, pair.width),
            )

            def change(data):
                if any(m.get("name") == name for m in data["models"]):
                    raise ModelStoreError(f"a model named {name!r} was installed meanwhile")
                data["models"].append(model.to_dict(self.root))
                if make_default:
                    data["default"] = name

            self._mutate(change)
        except BaseException:
            for src, where in placed:
                if where.parent != folder:
                    continue
                if mode == "move":
                    shutil.move(where, src)  # give the caller its files back
                else:
                    where.unlink(missing_ok=True)
            if not folder_existed and folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
            raise
        logger.info("installed %s (%s, %s)", name, quant, model.provenance.describe())
        return model

    def register_converted(self, text: str | os.PathLike[str], mmproj: str | os.PathLike[str], *, source_dir: str,
                           converter_version: str | None, name: str | None = None, catalog_id: str | None = None,
                           details: dict[str, Any] | None = None, progress: Progress | None = None,
                           make_default: bool = False) -> InstalledModel:
        """Register a freshly converted pair, moving its files into the store."""
        prov = Provenance("converted", str(source_dir), converter_version, dict(details or {}))
        return self.import_pair(text, mmproj, name, copy=False, move=True, progress=progress, provenance=prov,
                                catalog_id=catalog_id, make_default=make_default)

    # -- checking and removing ----------------------------------------------------------------------------
    def verify(self, name: str, *, hashes: bool = True, progress: Progress | None = None) -> VerifyReport:
        """Check an installed model: files present, sizes, headers, width and, unless ``hashes=False``, sha256
        and a second reading of each header by gguf's own reader (seconds on a 7B model; see the benchmark)."""
        model = self.get(name)
        checks = []
        ok_files = {}
        for role, rec, check in (("text", model.text, check_text_model), ("mmproj", model.mmproj, check_projector)):
            fc = FileCheck(role, rec.path)
            checks.append(fc)
            path = rec.file
            if not path.is_file():
                fc.problems.append("missing")
                continue
            size = path.stat().st_size
            if size != rec.size:
                fc.problems.append(f"size is {size} bytes, {rec.size} when installed")
            if hashes and not fc.problems:
                digest = sha256_file(path, progress)
                fc.sha256_checked = True
                if digest != rec.sha256:
                    fc.problems.append(f"sha256 differs from when installed ({digest[:12]}… ≠ {rec.sha256[:12]}…): "
                                       "the file was modified or damaged")
            try:
                ok_files[role] = check(read_gguf_summary(path, use_reader=hashes))
            except ModelFileError as exc:
                fc.problems.append(exc.reason)
        report = VerifyReport(model.name, checks)
        if len(ok_files) == 2:
            try:
                check_pair(ok_files["text"], ok_files["mmproj"])
            except ModelFileError as exc:
                report.pair_problems.append(exc.reason)
        return report

    def remove(self, name: str) -> InstalledModel:
        """Delete an installed model's managed files and its manifest entry (files referenced in place stay)."""
        model = self.get(name)

        def change(data):
            data["models"] = [m for m in data["models"] if m.get("name") != model.name]
            if data.get("default") == model.name:
                data["default"] = None

        self._mutate(change)
        folder = self.root / model.name
        for rec in (model.text, model.mmproj):
            if rec.managed and rec.file.parent == folder:
                rec.file.unlink(missing_ok=True)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        elif folder.is_dir():
            logger.info("left %s in place: it holds files the store did not install", folder)
        logger.info("removed %s", model.name)
        return model

    # -- LoRA adapters ------------------------------------------------------------------------------------
    def adapters(self, model: str | None = None) -> builtins.list[InstalledAdapter]:
        """Installed LoRA adapters by name; with ``model``, only those made for that installed model."""
        data = self._read()
        found = [InstalledAdapter.from_dict(a, self.root) for a in data.get("adapters", [])]
        if model is not None:
            sha = self.get(model).text.sha256
            found = [a for a in found if a.base_text_sha256 == sha]
        return sorted(found, key=lambda a: a.name)

    def get_adapter(self, name: str) -> InstalledAdapter:
        """An installed adapter by name (`ModelStoreError` naming the installed ones when there is none)."""
        for a in self.adapters():
            if a.name == name:
                return a
        names = ", ".join(a.name for a in self.adapters()) or "none"
        raise ModelStoreError(f"LoRA adapter {name!r} is not installed (installed: {names})")

    def base_of(self, adapter: InstalledAdapter) -> InstalledModel | None:
        """The installed model an adapter was made for (``None`` when it is no longer installed)."""
        return next((m for m in self.list() if m.text.sha256 == adapter.base_text_sha256), None)

    def add_adapter(self, path: str | os.PathLike[str], name: str | None = None, *, base: str | None = None,
                    copy: bool = True, progress: Progress | None = None) -> InstalledAdapter:
        """Check a LoRA adapter GGUF against the installed base it was made for and install it.

        Parameters
        ----------
        path : path-like
            Adapter GGUF written by ``spec-o3 convert-lora`` (it records its base's text GGUF digest).
        name : str, optional
            Store name (default: from the file name).
        base : str, optional
            The installed model it is for; refused when the adapter was made for another one. Default: the
            installed model whose text GGUF has the recorded digest.
        copy : bool
            Copy into the store (default), else hard-link (or reference in place).

        Raises
        ------
        ModelFileError
            Not a LoRA adapter GGUF for Qwen2.5-VL.
        ModelStoreError
            Made for another base, its base not installed, no base recorded, or the name taken.
        """
        src = Path(path).expanduser().resolve()
        info = read_adapter(src)
        model: InstalledModel | None
        if base is not None:
            model = self.get(base)
        else:
            digest = require_base(info)
            model = next((m for m in self.list() if m.text.sha256 == digest), None)
            if model is None:
                raise ModelStoreError(
                    f"{src.name} was made for the base model {info.base_name or '?'!r} (text GGUF sha256 "
                    f"{digest[:12]}…), which is not installed; install that model first, or convert "
                    "the PEFT adapter again with --base naming an installed build of the same checkpoint")
        check_base(info, model.text.sha256, model.name)
        stem = src.name.removesuffix(".gguf")
        name = check_name(name or re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")[:80] or "adapter")
        if any(a.name == name for a in self.adapters()):
            raise ModelStoreError(f"a LoRA adapter named {name!r} is already installed; remove it first or choose "
                                  "another name (--name)")
        dst = self.root / "adapters" / f"{name}.gguf"
        if dst.exists() and dst.resolve() != src:
            dst.unlink()  # left by an interrupted install: no manifest entry owns it (checked above)
        where = src if dst.resolve() == src else place_file(src, dst, "copy" if copy else "link", progress)
        try:
            rec = FileRecord(str(where), where.stat().st_size, sha256_file(where, progress), where.parent == dst.parent)
            adapter = InstalledAdapter(name, rec, model.text.sha256, model.name, info.alpha, list(info.ranks),
                                       len(info.targets), now_iso())

            def change(data):
                if any(a.get("name") == name for a in data.get("adapters", [])):
                    raise ModelStoreError(f"a LoRA adapter named {name!r} was installed meanwhile")
                data.setdefault("adapters", []).append(adapter.to_dict(self.root))

            self._mutate(change)
        except BaseException:
            if where != src:
                where.unlink(missing_ok=True)
            raise
        logger.info("installed LoRA adapter %s for %s", name, model.name)
        return adapter

    def remove_adapter(self, name: str) -> InstalledAdapter:
        """Delete an installed adapter's manifest entry and its managed file."""
        adapter = self.get_adapter(name)

        def change(data):
            data["adapters"] = [a for a in data.get("adapters", []) if a.get("name") != name]

        self._mutate(change)
        if adapter.file.managed:
            adapter.path.unlink(missing_ok=True)
        return adapter

    def folder_for(self, name: str) -> Path:
        """Folder where the files of model ``name`` go (used by converters writing into the store)."""
        return self.root / check_name(name)

    def downloads_dir(self) -> Path:
        return self.root / "downloads"

    def disk_free(self) -> int:
        """Free bytes on the store's file system."""
        probe = self.root if self.root.exists() else self.root.parent
        while not probe.exists():
            probe = probe.parent
        return shutil.disk_usage(probe).free


def resolve_model(name: str | None = None, store: ModelStore | None = None) -> InstalledModel:
    """The installed model to run: ``name`` if given, else the default (chosen or best installed).

    Raises
    ------
    ModelNotInstalledError
        Nothing is installed (the message says how to get a model), or ``name`` is not installed.
    """
    store = store or ModelStore()
    if name:
        return store.get(name)
    model = store.default()
    if model is None:
        raise ModelNotInstalledError(f"no model installed — {HOW_TO_GET_A_MODEL}")
    return model

"""LoRA adapters in GGUF form: what one holds, which base it was made for, and the record the store keeps.

An adapter GGUF follows llama.cpp's own LoRA format (``convert_lora_to_gguf.py``, ``src/llama-adapter.cpp``):
``general.type = adapter``, ``adapter.type = lora``, ``adapter.lora.alpha``, ``general.architecture`` of the base,
and a ``<base tensor>.lora_a`` / ``.lora_b`` pair per adapted matrix. `spec-o3 convert-lora`
(`speco3_converters.lora`) also writes the identity of its base: `BASE_SHA256_KEY` is the SHA-256 of the base
**text GGUF file** it was converted against (the digest the model store records for every installed model).
An adapter is thus tied to one installed build: a build of the same checkpoint at another quantization has
another digest, and the adapter is converted again for it (seconds; the base's weights are not read).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from speco3_base.errors import ModelFileError
from speco3_models.errors import ModelStoreError
from speco3_models.gguf_check import TEXT_ARCH, GGUFSummary, read_gguf_summary
from speco3_models.installed import FileRecord

BASE_SHA256_KEY = "speco3.adapter.base_text_sha256"
BASE_NAME_KEY = "speco3.adapter.base_name"
SOURCE_KEY = "speco3.adapter.source"
ALPHA_KEY = "adapter.lora.alpha"
SUFFIX_A, SUFFIX_B = ".lora_a", ".lora_b"


@dataclass(frozen=True)
class AdapterInfo:
    """What an adapter GGUF holds (read from its header only)."""

    path: Path
    arch: str
    alpha: float
    ranks: tuple[int, ...]  # distinct ranks of its pairs, ascending
    targets: tuple[str, ...]  # base tensor names it adapts, in file order
    base_text_sha256: str | None  # None: not written by spec-o3 convert-lora
    base_name: str | None
    name: str | None

    def describe(self) -> str:
        rank = "/".join(str(r) for r in self.ranks)
        base = f"base {self.base_name or '?'} ({self.base_text_sha256[:12]}…)" if self.base_text_sha256 else "base unknown"
        return f"LoRA rank {rank}, alpha {self.alpha:g}, {len(self.targets)} matrices, {base}"


def read_adapter(path: str | os.PathLike[str]) -> AdapterInfo:
    """Read and check a LoRA adapter GGUF for a Qwen2.5-VL text model.

    Raises
    ------
    ModelFileError
        Not a GGUF, not a LoRA adapter (naming what it is), another architecture, or incomplete ``lora_a``/``lora_b``
        pairs whose shapes do not chain.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(path, "file not found" if not path.exists() else "not a regular file")
    s = read_gguf_summary(path)
    kind, adapter_type = s.get("general.type"), s.get("adapter.type")
    if kind != "adapter" or adapter_type != "lora":
        what = f"general.type {kind!r}" + (f", adapter.type {adapter_type!r}" if adapter_type is not None else "")
        raise ModelFileError(path, f"not a LoRA adapter GGUF ({what}; expected general.type 'adapter', adapter.type "
                                   "'lora')")
    if s.arch != TEXT_ARCH:
        raise ModelFileError(path, f"the adapter is for architecture {s.arch!r}; Spec-o3 runs {TEXT_ARCH!r}")
    alpha = s.get(ALPHA_KEY, 0.0)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise ModelFileError(path, f"{ALPHA_KEY} must be a number, got {alpha!r}")
    targets, ranks = _pairs(s)
    sha, base_name = s.get(BASE_SHA256_KEY), s.get(BASE_NAME_KEY)
    return AdapterInfo(path, s.arch, float(alpha), tuple(sorted(set(ranks))), tuple(targets),
                       sha if isinstance(sha, str) and sha else None, base_name if isinstance(base_name, str) else None,
                       s.name)


def _pairs(s: GGUFSummary) -> tuple[list[str], list[int]]:
    targets: list[str] = []
    for name in s.tensors:
        if name.endswith(SUFFIX_A):
            targets.append(name[: -len(SUFFIX_A)])
        elif not name.endswith(SUFFIX_B):
            raise ModelFileError(s.path, f"tensor {name!r} is neither a .lora_a nor a .lora_b tensor")
    if not targets:
        raise ModelFileError(s.path, "the adapter holds no lora_a/lora_b tensor pairs")
    ranks = []
    for base in targets:
        a, b = s.tensors.get(base + SUFFIX_A), s.tensors.get(base + SUFFIX_B)
        if a is None:
            raise ModelFileError(s.path, f"{base}: lora_b without lora_a")
        if b is None:
            raise ModelFileError(s.path, f"{base}: lora_a without lora_b")
        # GGUF order: a is [n_in, rank], b is [rank, n_out] (llama.cpp's llama_adapter_lora_init checks the same)
        if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
            raise ModelFileError(s.path, f"{base}: lora_a {list(a.shape)} and lora_b {list(b.shape)} do not chain")
        ranks.append(int(a.shape[1]))
    orphans = [n for n in s.tensors if n.endswith(SUFFIX_B) and n[: -len(SUFFIX_B)] not in targets]
    if orphans:
        raise ModelFileError(s.path, f"{orphans[0]}: lora_b without lora_a")
    return targets, ranks


def check_base(info: AdapterInfo, text_sha256: str | None, model_name: str) -> None:
    """Refuse an adapter made for another base than the text model with digest ``text_sha256``.

    ``text_sha256`` ``None`` (a text GGUF given by path, never hashed) checks nothing here; llama.cpp still
    checks every adapted matrix's shape when it loads the adapter.

    Raises
    ------
    ModelStoreError
        The adapter records no base, or another one.
    """
    if text_sha256 is None:
        return
    digest = require_base(info, model_name)
    if digest != text_sha256:
        made_for = f"{info.base_name!r} " if info.base_name else ""
        raise ModelStoreError(
            f"{info.path.name} was made for the base model {made_for}(text GGUF sha256 {digest[:12]}…), "
            f"not for {model_name!r} (sha256 {text_sha256[:12]}…); an adapter works only on the base it was trained "
            f"and converted for: convert it again with `spec-o3 convert-lora PEFT_DIR --base {model_name}` if it "
            "was trained on the same checkpoint")


def require_base(info: AdapterInfo, model_name: str = "MODEL") -> str:
    """The base digest an adapter records; `ModelStoreError` when it records none."""
    if info.base_text_sha256 is None:
        raise ModelStoreError(f"{info.path.name}: the adapter does not record the base it was made for (not written "
                              "by `spec-o3 convert-lora`); convert the PEFT adapter with `spec-o3 convert-lora "
                              f"PEFT_DIR --base {model_name}`")
    return info.base_text_sha256


@dataclass
class InstalledAdapter:
    """An adapter registered in the model store, with the digest of the base it was made for."""

    name: str
    file: FileRecord
    base_text_sha256: str
    base_name: str | None
    alpha: float
    ranks: list[int]
    n_matrices: int
    created: str

    @property
    def path(self) -> Path:
        return self.file.file

    def to_dict(self, root: Path | None = None) -> dict[str, Any]:
        out = asdict(self)
        p = Path(self.file.path)
        if root is not None and self.file.managed and p.is_absolute() and p.is_relative_to(root):
            out["file"]["path"] = p.relative_to(root).as_posix()
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any], root: Path | None = None) -> InstalledAdapter:
        try:
            rec = dict(raw["file"])
            if root is not None and not Path(rec["path"]).is_absolute():
                rec["path"] = str(root / rec["path"])
            return cls(name=str(raw["name"]), file=FileRecord(**rec), base_text_sha256=str(raw["base_text_sha256"]),
                       base_name=raw.get("base_name"), alpha=float(raw["alpha"]),
                       ranks=[int(r) for r in raw["ranks"]], n_matrices=int(raw["n_matrices"]),
                       created=str(raw["created"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelStoreError(f"malformed adapter entry {raw.get('name', '?')!r} in the manifest: {exc!r}") from exc

"""Checkpoint folder → quantized, verified, registered model.

Used by ``spec-o3 convert`` and, handed to `speco3_models.pull.pull` as its ``convert`` step, when a repository
holds safetensors. The steps: convert (text GGUF at ``outtype`` + F16 projector), quantize the text model, check
the pair (`verify_pair`, i.e. `speco3_models.gguf_check`), delete the intermediate, register in the store.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from speco3_base.errors import ConversionError
from speco3_base.fileio import Progress, no_progress
from speco3_models import catalog
from speco3_models.catalog import QUANTS
from speco3_models.installed import InstalledModel, Provenance, check_name

from . import __version__
from .convert import convert_checkpoint
from .plan import ConversionPlan
from .quantize import quantize
from .verify import verify_pair

if TYPE_CHECKING:
    from speco3_models.store import ModelStore

logger = logging.getLogger(__name__)

_FLOAT = ("F16", "BF16", "F32")


@dataclass
class BuildResult:
    """What `build_model` produced: files, the installed model (when registered), the plan and timings."""

    text_path: Path | None
    mmproj_path: Path | None
    model: InstalledModel | None
    plan: ConversionPlan
    seconds: dict[str, float] = field(default_factory=dict)


def converter_version() -> str:
    """Version string of the converter package (recorded as provenance)."""
    return __version__


def default_build_name(hf_dir: Path, quant: str) -> str:
    """``spec-o3-7b-q4_k_m`` for a Spec-o3 checkpoint folder, else the folder name plus the quant."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", hf_dir.resolve().name).strip("-._").lower() or "model"
    entry = catalog.find(base)
    return f"{entry.name if entry else base}-{quant.lower()}"[:80]


def build_model(store: ModelStore | None, hf_dir: str | Path, *, quant: str = "Q4_K_M", outtype: str = "bf16",
                mmproj_type: str = "f16", out_dir: str | Path | None = None, name: str | None = None,
                register: bool = True,
                keep_intermediate: bool = False, dry_run: bool = False, progress: Progress | None = None,
                provenance: Provenance | None = None, catalog_id: str | None = None,
                make_default: bool = False) -> BuildResult:
    """Convert, quantize, verify and (optionally) register a Qwen2.5-VL / Spec-o3 checkpoint.

    Parameters
    ----------
    store : ModelStore or None
        Where to register (and, without ``out_dir``, where the files go). ``None`` only with ``register=False``.
    hf_dir : path-like
        Checkpoint folder.
    quant : str
        Text model quantization, one of `speco3_models.catalog.QUANTS`.
    outtype : str
        Type of the intermediate text GGUF written by the converter (``bf16`` copies bf16 weights exactly).
    mmproj_type : {"f16", "q8_0", "f32"}
        Projector matrices (F16 recommended for quality).
    out_dir : path-like, optional
        Keep the output files here (registered by hard link or in place); default: inside the store.
    register : bool
        Register the result in the store.
    keep_intermediate : bool
        Keep the unquantized text GGUF.
    dry_run : bool
        Only plan the conversion (nothing written).

    Raises
    ------
    ConversionError
        Unsupported or incomplete checkpoint, unknown quant, or a verification failure.
    """
    hf_dir = Path(hf_dir).expanduser()
    progress = progress or no_progress
    quant = quant.upper()
    if quant not in QUANTS:
        raise ConversionError(f"unknown quantization {quant!r}; choose one of {', '.join(QUANTS)}")
    if not hf_dir.is_dir():
        raise ConversionError(f"{hf_dir}: not a folder (expected a Hugging Face checkpoint folder)")
    if quant in _FLOAT:  # written directly by the converter, no quantization step
        outtype = quant.lower()
    name = check_name(name or default_build_name(hf_dir, quant))
    base = name[: -len(quant) - 1] if name.lower().endswith(f"-{quant.lower()}") else name
    if dry_run:
        res = convert_checkpoint(hf_dir, out_dir or hf_dir, outtype=outtype, mmproj_type=mmproj_type, name=base,
                                 progress=progress, dry_run=True)
        return BuildResult(None, None, None, res.plan)
    if register and store is None:
        raise ValueError("register=True needs a store")
    if register and store is not None and any(m.name == name for m in store.list()):
        raise ConversionError(f"a model named {name!r} is already installed; remove it or choose another --name")
    if out_dir:
        work = Path(out_dir).expanduser()
    else:
        work = store.root / ".build" / name if store is not None else hf_dir / "gguf"
    work.mkdir(parents=True, exist_ok=True)
    try:
        text, mmproj, intermediate, res, seconds = _convert_quantize_verify(
            hf_dir, work, base, quant, outtype, mmproj_type, keep_intermediate, progress)
    except BaseException:
        if not out_dir:  # a failed build leaves no half-written gigabytes in the store
            shutil.rmtree(work, ignore_errors=True)
        raise
    model = None
    if register and store is not None:
        details = {"quant": quant, "outtype": outtype, "seconds": {k: round(v, 2) for k, v in seconds.items()}}
        prov = provenance or Provenance("converted", str(hf_dir.resolve()), converter_version(), details)
        if provenance is not None:
            prov.converter_version = prov.converter_version or converter_version()
            prov.details.update(details)
        model = store.import_pair(text, mmproj, name, copy=False, move=out_dir is None, progress=progress,
                                  provenance=prov, catalog_id=catalog_id or catalog_guess(hf_dir),
                                  make_default=make_default)
        text, mmproj = model.text_path, model.mmproj_path
        if out_dir is None:
            if intermediate is not None:
                shutil.move(intermediate, store.folder_for(name) / intermediate.name)
            shutil.rmtree(work, ignore_errors=True)
    return BuildResult(text, mmproj, model, res.plan, seconds)


def _convert_quantize_verify(hf_dir: Path, work: Path, base: str, quant: str, outtype: str, mmproj_type: str,
                             keep_intermediate: bool, progress: Progress):
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    res = convert_checkpoint(hf_dir, work, outtype=outtype, mmproj_type=mmproj_type, name=base, progress=progress,
                             dry_run=False)
    seconds["convert"] = time.monotonic() - t0
    text, mmproj = res.files()
    intermediate = None
    if quant != outtype.upper():
        dst = work / f"{base}-{quant}.gguf"
        t0 = time.monotonic()
        quantize(text, dst, quant, progress=progress)
        seconds["quantize"] = time.monotonic() - t0
        if keep_intermediate:
            intermediate = text
        else:
            text.unlink(missing_ok=True)
        text = dst
    t0 = time.monotonic()
    progress("verify", 0, 2)
    verify_pair(text, mmproj)
    progress("verify", 2, 2)
    seconds["verify"] = time.monotonic() - t0
    return text, mmproj, intermediate, res, seconds


def catalog_guess(hf_dir: Path) -> str | None:
    """Catalog id of a checkpoint folder whose name is a catalog model's name (``…/spec-o3-7b``)."""
    entry = catalog.find(hf_dir.resolve().name)
    return entry.name if entry else None

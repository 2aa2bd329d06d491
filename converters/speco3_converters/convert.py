"""Public conversion entry point: Hugging Face Qwen2.5-VL checkpoint → text GGUF + projector GGUF."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from speco3_base.errors import ConversionError
from speco3_base.fileio import Progress

from .gguf_stream import write_file
from .plan import ConversionPlan
from .qwen25vl import build_plan

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class ConvertResult:
    """Outcome of :func:`convert_checkpoint`.

    Attributes
    ----------
    text_path : Path or None
        The text-model GGUF (``None`` for a dry run).
    mmproj_path : Path or None
        The vision-projector GGUF (``None`` for a dry run).
    plan : ConversionPlan
        What was (or would be) written: metadata, tensors, shapes and types.
    """

    text_path: Path | None
    mmproj_path: Path | None
    plan: ConversionPlan

    def files(self) -> tuple[Path, Path]:
        """The text GGUF and the projector GGUF that were written (`ConversionError` after a dry run)."""
        if self.text_path is None or self.mmproj_path is None:
            raise ConversionError("a dry run writes no files")
        return self.text_path, self.mmproj_path


def convert_checkpoint(
    hf_dir: str | Path,
    out_dir: str | Path,
    *,
    outtype: str = "bf16",
    mmproj_type: str = "f16",
    name: str | None = None,
    progress: Progress | None = None,
    dry_run: bool = False,
) -> ConvertResult:
    """Convert a Qwen2.5-VL / Spec-o3 checkpoint into a text GGUF and a vision-projector GGUF.

    Parameters
    ----------
    hf_dir : path-like
        Checkpoint folder (``config.json``, ``tokenizer.json``, ``preprocessor_config.json``,
        safetensors shards with ``model.safetensors.index.json`` or a single ``model.safetensors``).
    out_dir : path-like
        Output folder (created if needed).
    outtype : {"bf16", "f16", "f32"}
        Text matrices: ``bf16`` copies bf16 weights bit for bit; norms and biases are always F32.
    mmproj_type : {"f16", "f32", "q8_0"}
        Projector matrices; the patch embedding stays F16 (F32 with ``f32``), norms and biases F32.
    name : str, optional
        Model name (``general.name``, file names); default the folder name.
    progress : callable, optional
        ``progress(stage, done, total)``; ``stage`` is ``"plan"``, ``"text"`` or ``"mmproj"``,
        ``done``/``total`` count tensor-data bytes (tensors for ``"plan"``).
    dry_run : bool
        Only build and return the plan; nothing is written.

    Returns
    -------
    ConvertResult

    Raises
    ------
    ConversionError
        Unsupported, incomplete or inconsistent checkpoint; not enough disk space; F16 overflow.
    """
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    plan, ckpt = build_plan(hf_dir, outtype=outtype, mmproj_type=mmproj_type, name=name)
    n = len(plan.text.tensors) + len(plan.mmproj.tensors)
    if progress is not None:
        progress("plan", n, n)
    for note in plan.notes:
        logger.info("%s: %s", hf_dir.name, note)
    if dry_run:
        return ConvertResult(None, None, plan)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError(f"{out_dir}: exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    text_path = write_file(plan.text, ckpt, out_dir / plan.text.file_name, progress=progress)
    mmproj_path = write_file(plan.mmproj, ckpt, out_dir / plan.mmproj.file_name, progress=progress)
    return ConvertResult(text_path, mmproj_path, plan)

"""Hugging Face Qwen2.5-VL checkpoints to GGUF (text model + vision projector), quantization and verification.

Public API
----------
- :func:`convert_checkpoint` / :class:`ConvertResult` — torch-free, streaming conversion.
- :mod:`speco3_converters.quantize` — ``quantize(src, dst, qtype)`` through llama.cpp, in a subprocess.
- :mod:`speco3_converters.verify` — ``verify_gguf(path, kind, expect)``: `speco3_models.gguf_check` plus the
  converter's expectations.
- :mod:`speco3_converters.build` — ``build_model(store, hf_dir, quant=...)``: convert, quantize, verify, register.

Below the application (`speco3`), above the model store (`speco3_models`); never imports the application.
"""

from __future__ import annotations

from .convert import ConvertResult, convert_checkpoint
from .plan import ConversionPlan, FilePlan, PlannedTensor

__version__ = "0.1.0"

__all__ = ["ConversionPlan", "ConvertResult", "FilePlan", "PlannedTensor", "convert_checkpoint"]

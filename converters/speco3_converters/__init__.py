"""Hugging Face Qwen2.5-VL checkpoints to GGUF (text model + vision projector), quantization and verification.

Public API
----------
- :func:`convert_checkpoint` / :class:`ConvertResult` — torch-free, streaming conversion.
- :mod:`speco3_converters.quantize` — ``quantize(src, dst, qtype)`` through llama.cpp, in a subprocess.
- :mod:`speco3_converters.verify` — ``verify_gguf(path, kind, expect)`` with gguf's reader.
- :mod:`speco3_converters.testing` — tiny random Qwen2.5-VL checkpoints and cached GGUF pairs for tests.
"""

from __future__ import annotations

from .convert import ConvertResult, convert_checkpoint
from .plan import ConversionPlan, FilePlan, PlannedTensor

__version__ = "0.1.0"

__all__ = ["ConversionPlan", "ConvertResult", "FilePlan", "PlannedTensor", "convert_checkpoint"]

"""Spec-o3 Desktop: offline inspection and vetting of 1D spectra with the Spec-o3 vision-language model."""

from __future__ import annotations

from speco3_base import APP_NAME

__version__ = "0.1.0"

__all__ = ["APP_NAME", "__version__"]

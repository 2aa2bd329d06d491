"""Spec-o3 Desktop: offline inspection and vetting of 1D spectra with the Spec-o3 vision-language model."""

from __future__ import annotations

__version__ = "0.1.0"
APP_NAME = "spec-o3"

__all__ = ["APP_NAME", "__version__"]

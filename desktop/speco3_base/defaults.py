"""Defaults shared by the engine, the app's settings and the model catalog (one source for each)."""

from __future__ import annotations

#: Context window in KV cells: 8 turns with 4-5 images and ~2k tokens of reasoning fit.
DEFAULT_N_CTX = 16384

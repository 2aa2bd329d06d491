"""speco3.vetting: the vetting store (model verdicts, human decisions, session state), batch screening, exports."""

from __future__ import annotations

from speco3.vetting.records import (
    DECISIONS,
    STANDARD_FLAGS,
    Annotation,
    Decision,
    Evidence,
    ModelVerdict,
    SpectrumInfo,
    spectrum_key,
)
from speco3.vetting.store import SCHEMA_VERSION, VettingStore

__all__ = [
    "DECISIONS", "SCHEMA_VERSION", "STANDARD_FLAGS", "Annotation", "Decision", "Evidence", "ModelVerdict",
    "SpectrumInfo", "VettingStore", "spectrum_key",
]

"""A decision made in the app exports the file's sha256 and the pipeline's columns (issue #44)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from speco3.vetting.export import export_rows

pytestmark = pytest.mark.gui


def test_a_human_only_decision_exports_file_sha256_and_pipeline_columns(make_window, demo_archive, open_and_wait,
                                                                         key):
    w = make_window()
    open_and_wait(w, demo_archive)
    path = Path(w.vetting.spectrum.meta.path)
    key(w, Qt.Key.Key_Y)
    rows = export_rows(w.vetting.store, "cv")
    assert len(rows) == 1 and rows[0]["decision"] == "YES" and rows[0]["model_verdict"] is None
    assert rows[0]["file_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert rows[0]["pipeline_class"] == "STAR" and rows[0]["survey_snr_name"] == "SNRG"

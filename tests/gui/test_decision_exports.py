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


def test_the_vetters_z_confidence_and_class_go_with_the_decision(make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    first = w.vetting.entry.key
    w.viewer.z_box.setValue(0.0123)  # the markers' z, typed in the line bar
    w.decision.fit_z_from_markers.click()
    w.decision.fit_conf.setCurrentIndex(4)  # confidence 3
    w.decision.fit_class.setText("STAR")
    w.decision.fit_subclass.setText("CV")
    key(w, Qt.Key.Key_Y)  # decides and moves on: the fields show the next spectrum's (none)
    d = w.vetting.store.decisions("cv")[0]
    assert (d.vetter_z, d.z_conf, d.vetter_class, d.vetter_subclass) == (0.0123, 3, "STAR", "CV")
    assert w.vetting.entry.key != first and w.decision.fit() == (None, None, None, None)
    key(w, Qt.Key.Key_Left)  # back: shown as stored
    assert w.decision.fit() == (0.0123, 3, "STAR", "CV")
    rows = export_rows(w.vetting.store, "cv")
    assert rows[0]["vetter_z"] == 0.0123 and rows[0]["vetter_class"] == "STAR"

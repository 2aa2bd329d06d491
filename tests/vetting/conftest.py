"""Vetting-test fixtures: a store filled by real scripted agent runs with traces."""

from __future__ import annotations

import pytest
from vetting_helpers import NO, YES, ZOOM, items, pillow_render

from speco3.agent import get_task
from speco3.engine.scripted import ScriptedEngine
from speco3.vetting import Decision, VettingStore
from speco3.vetting.schedulers import vet_batch


@pytest.fixture
def render():
    return pillow_render


@pytest.fixture
def filled_store(tmp_path):
    """A store with 4 screened spectra (traces on disk) and 3 decisions, one on an unscreened spectrum."""
    store = VettingStore(tmp_path / "results.sqlite")
    engine = ScriptedEngine(scripts=[[ZOOM, YES], [NO]])
    vet_batch(items(4), store, engine, get_task("cv"), pillow_render, trace_root=tmp_path / "traces")
    store.record_decision(Decision("/data/spec00.fits#0", "cv", "YES", flags=["interesting"],
                                   comment="<script>alert(1)</script> clear He II", vetter="Ana",
                                   model_verdict_seen="YES"))
    store.record_decision(Decision("/data/spec01.fits#0", "cv", "NO", vetter="Ana"))
    store.record_decision(Decision("/data/other.fits#0", "cv", "UNSURE", vetter="Bo"))
    yield store
    store.close()

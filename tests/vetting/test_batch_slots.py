"""Batch screening with slots (several spectra in flight on parallel sequences): same verdicts as one at a time on
the real tiny engine, cancel and resume without duplicates, unreadable items and skips reported as before."""

from __future__ import annotations

import threading

import pytest
from vetting_helpers import NO, YES, ZOOM, items, pillow_render

from speco3.agent import get_task
from speco3.engine.base import EngineSettings
from speco3.engine.scripted import ScriptedEngine
from speco3.vetting import VettingStore
from speco3.vetting.schedulers import vet_batch
from speco3.vetting.screening import Recorded, Skipped, VetItem

try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1)
    HAVE_LLAMA = False


def _rows(store: VettingStore) -> dict[str, tuple]:
    """The latest verdict per spectrum: outcome, turns, tokens, answer."""
    return {v.spectrum_key: (v.outcome, v.turns, v.tokens, v.answer) for v in store.model_verdicts("cv")}


def test_slots_on_the_scripted_engine_cancel_then_resume(tmp_path):
    store = VettingStore(tmp_path / "s.sqlite")
    batch = items(5) + [VetItem(key="/data/bad.fits#0", load=lambda: None, error="truncated file")]
    engine = ScriptedEngine(scripts=[[ZOOM, YES], [NO]])
    cancel = threading.Event()
    seen: list = []

    def on_event(event):
        if isinstance(event, Recorded | Skipped):
            seen.append(event.item.key)
            if len(seen) == 2:
                cancel.set()

    first = vet_batch(batch, store, engine, get_task("cv"), pillow_render, cancel=cancel, on_event=on_event, slots=3)
    assert first.cancelled and first.done == 2
    second = vet_batch(batch, store, engine, get_task("cv"), pillow_render, slots=3)
    assert not second.cancelled and second.skipped == 2 and second.done == 4 and second.failed == 1
    assert len(_rows(store)) == 6 and _rows(store)["/data/bad.fits#0"][0] == "input_error"
    store.close()


@pytest.mark.llama
def test_slots_give_the_verdicts_of_one_at_a_time_on_the_real_engine(tiny_gguf, tmp_path):
    if not HAVE_LLAMA:
        pytest.skip("llama-cpp-python (with mtmd) is not installed")
    from speco3.engine import open_engine

    text, mmproj = tiny_gguf("F32")
    settings = EngineSettings(n_ctx=8192, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False, image_max_tokens=120,
                              max_tokens_per_turn=32, flash_attn=False, kv_type="f32", n_seq=3)
    batch = items(5)
    got = {}
    for slots in (1, 3):
        engine = open_engine((text, mmproj), settings, warmup=False)
        store = VettingStore(tmp_path / f"s{slots}.sqlite")
        try:
            result = vet_batch(batch, store, engine, get_task("cv"), pillow_render, slots=slots)
            assert result.done == 5 and not result.cancelled, result
            got[slots] = _rows(store)
            parallel = engine.stats().extra.get("parallel")
        finally:
            engine.close()
            store.close()
        if slots == 3:
            assert parallel and parallel["rounds"] < parallel["round_tokens"], "spectra shared decodes"
    assert got[1] == got[3]
    assert {o for o, *_ in got[3].values()} <= {"YES", "NO", "format_error", "budget_exhausted"}

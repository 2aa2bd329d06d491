"""The app's batch pre-screen on parallel slots, with the real llama.cpp engine on the tiny model and a real store.

With one rollout per spectrum and an engine of 2 parallel sequences, the pre-screen runs 2 spectra at once through
the loop ``spec-o3 vet --slots 2`` uses, records the same verdict rows vet records for the same spectra, records
none of the spectra in flight when cancelled (a new pre-screen does them, skipping the ones done), and shows which
spectrum the agent panel's estimate follows.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from speco3.engine.choice import InstalledModel
from speco3.gui.settings import AppSettings

pytestmark = [pytest.mark.gui, pytest.mark.llama]

MODEL = "tiny-slots"
#: engine settings that keep the tiny model's noise short (as in tests/vetting/test_batch_slots.py)
FAST = dict(max_tokens_per_turn=32, flash_attn=False, mmproj_on_gpu=False)


def open_fast(model_id, engine_settings):
    """The app's engine opener (`open_engine`, not loaded) with `FAST` over the app's settings."""
    from speco3.engine import open_engine

    return open_engine(model_id, dataclasses.replace(engine_settings, **FAST), threaded=False, load=False)


@pytest.fixture
def tiny_installed(tiny_gguf):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    from speco3_models.store import ModelStore

    text, mmproj = tiny_gguf("F32")
    return ModelStore().import_pair(text, mmproj, name=MODEL).name


@pytest.fixture
def window(make_window, demo_archive, open_and_wait, tiny_installed):
    settings = AppSettings(vetter="t", n_ctx=8192, image_max_tokens=120, n_threads=2, n_gpu_layers=0, kv_type="f32",
                           parallel=2)  # Settings → Parallel sequences: 2 spectra at once
    w = make_window(settings=settings, opener=open_fast)
    open_and_wait(w, demo_archive)
    w.table_model.fetch_all()
    return w


def wait_idle(qtbot, w) -> None:
    """Wait until the batch is over and its last reports (queued before it looked idle) are handled."""
    qtbot.waitUntil(lambda: not w.inference.batch_running(), timeout=240000)
    qtbot.wait(100)


def entries(w, n):
    return [w.table_model.entry(r) for r in range(n)]


def watch(w) -> dict:
    """What the inference thread reports: the most items in flight at once, and the finished runs' outcomes."""
    seen = {"flight": 0, "outcomes": [], "follow": [], "queue": []}
    w.inference.eta.connect(lambda _job, _left, queue: seen["queue"].append(queue))
    w.inference.batch_follow.connect(lambda _job, key, n: (seen.__setitem__("flight", max(seen["flight"], n)),
                                                           seen["follow"].append((key, n))))
    w.inference.finished_job.connect(lambda _job, _key, ended: seen["outcomes"].append(ended.final.outcome.value))
    return seen


def rows(store, fields=("verdict", "outcome", "turns", "tokens", "zooms", "answer", "detail", "model_id", "quant",
                        "prompt_version", "file_sha256", "engine_settings")) -> dict:
    """Every stored verdict row (not only the latest), by spectrum key: the fields vet and the app must agree on."""
    out = {}
    for v in store.model_verdicts("cv", latest=False):
        assert v.spectrum_key not in out, f"{v.spectrum_key} recorded twice"
        out[v.spectrum_key] = {f: getattr(v, f) for f in fields}
    return out


def generated(store) -> dict:
    """What the model wrote for each spectrum (its trace's assistant messages), by spectrum key."""
    from speco3.agent.trace import Trace

    return {v.spectrum_key: [s.text for s in Trace.load(v.trace_dir).steps if s.kind == "assistant"]
            for v in store.model_verdicts("cv")}


def test_prescreen_runs_two_at_once_and_records_what_vet_slots_records(qtbot, window, tmp_path):
    from speco3.gui.vetting import store_key
    from speco3.gui.workers import render_png
    from speco3.vetting import VettingStore
    from speco3.vetting.schedulers import vet_batch
    from speco3.vetting.screening import VetItem

    w, batch = window, entries(window, 4)
    seen = watch(w)
    assert w.agent.start_batch(batch, "cv", InstalledModel(MODEL)) == 4
    wait_idle(qtbot, w)
    assert w.batch_bar.value() == 4
    parallel = w.inference.service._engine.stats().extra.get("parallel")  # the worker is idle: its engine is quiet
    assert parallel and parallel["rounds"] < parallel["round_tokens"], parallel  # decodes of several sequences
    assert seen["flight"] == 2, seen  # two spectra in flight at once
    assert any(n == 2 and key for key, n in seen["follow"])
    assert any(q > 0 for q in seen["queue"])  # the batch's time left, from the spectra measured so far
    app_rows = rows(w.vetting.store)
    assert len(app_rows) == 4 and all(r["model_id"] == MODEL for r in app_rows.values())

    engine = open_fast(MODEL, w.settings.engine_settings())
    store = VettingStore(tmp_path / "vet.sqlite")
    try:
        items = [VetItem(store_key(e), e.load, path=e.path, name=e.file_name) for e in batch]
        result = vet_batch(items, store, engine, w.agent.tasks["cv"], render_png, slots=2, trace_root=tmp_path / "t")
        assert result.done == 4 and not result.cancelled
        assert rows(store) == app_rows
        texts = generated(store)
        assert texts == generated(w.vetting.store) and all(texts.values())
        assert len({tuple(t) for t in texts.values()}) > 1  # the spectra differ in what was written: no mix-up hides
        print("what the tiny model wrote:", {k.rsplit("/", 1)[-1]: t for k, t in texts.items()})
    finally:
        engine.close()
        store.close()


#: The columns of a verdict row that differ between two runs of the same spectrum by construction, and why:
#: ``id`` is the row's number in its own store; ``created_at`` is when the row was written; ``seconds`` is the
#: measured wall time of the run; ``trace_dir`` is an absolute path under each run's own trace root (the app's data
#: folder, vet's ``--traces``): it is compared relative to that root instead. Every other column must be equal.
NOT_COMPARED = {"id", "created_at", "seconds", "trace_dir"}
#: The same for each rollout row (``verdict_id`` is the id of its verdict row).
ROLLOUT_NOT_COMPARED = {"verdict_id", "seconds", "trace_dir"}


def every_column(store, trace_root) -> dict:
    """Every column of every verdict row, its rollouts and its spectrum row, by spectrum key (see `NOT_COMPARED`)."""
    import dataclasses
    from pathlib import Path

    out = {}
    for v in store.model_verdicts("cv", latest=False):
        assert v.spectrum_key not in out, f"{v.spectrum_key} recorded twice"
        row = {k: x for k, x in dataclasses.asdict(v).items() if k not in NOT_COMPARED}
        assert v.trace_dir and Path(v.trace_dir).is_relative_to(trace_root), (v.trace_dir, trace_root)
        row["trace_dir (under the root)"] = Path(v.trace_dir).relative_to(trace_root).as_posix()
        row["rollout rows"] = [
            {**{k: x for k, x in r.to_dict().items() if k not in ROLLOUT_NOT_COMPARED},
             "trace_dir (under the root)": Path(r.trace_dir).relative_to(trace_root).as_posix()}
            for r in store.rollouts(v.id)]
        row["spectrum row"] = dataclasses.asdict(store.spectrum_info(v.spectrum_key))
        out[v.spectrum_key] = row
    return out


@pytest.fixture
def window_like_vet(make_window, demo_archive, open_and_wait, tiny_installed):
    """The app with the settings a `spec-o3 vet` command line can also give (its options have no f32 KV cache and no
    flash-attention switch, so the engine runs with what both can set)."""

    def opener(model_id, engine_settings):
        from speco3.engine import open_engine

        return open_engine(model_id, dataclasses.replace(engine_settings, max_tokens_per_turn=32), threaded=False,
                           load=False)

    settings = AppSettings(vetter="t", n_ctx=8192, image_max_tokens=120, n_threads=2, n_gpu_layers=0, kv_type="f16",
                           parallel=2)
    w = make_window(settings=settings, opener=opener)
    open_and_wait(w, demo_archive)
    w.table_model.fetch_all()
    return w


def test_the_app_and_spec_o3_vet_write_the_same_rows_column_by_column(qtbot, window_like_vet, demo_archive, tmp_path,
                                                                      capsys):
    """The pre-screen (2 spectra at once) and the single-spectrum agent record what ``spec-o3 vet`` records for the
    same spectra: every column of the verdict rows, of their rollout rows and of the spectrum rows, the model file
    digests and the trace folder's name included (`NOT_COMPARED` says which columns are left out and why)."""
    import json

    from speco3.cli import main
    from speco3.vetting import VettingStore

    w = window_like_vet
    every = sorted((w.table_model.entry(r) for r in range(w.table_model.rowCount())), key=lambda e: e.key)
    batch, single = every[:4], every[4]
    assert w.agent.start_batch(batch, "cv", InstalledModel(MODEL)) == 4
    wait_idle(qtbot, w)
    assert w.vetting.go_to(w.table_model.row_of(single.key))
    w.run_agent()  # the single-spectrum agent on a fifth spectrum
    assert w.agent.interactive_job is not None
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=240000)
    qtbot.wait(100)
    app_root = w.settings.resolved_data_folder() / "traces"
    app = every_column(w.vetting.store, app_root)
    assert len(app) == 5 and all(r["text_sha256"] and r["mmproj_sha256"] for r in app.values())

    common = ["--model", MODEL, "--task", "cv", "--n-ctx", "8192", "--image-max-tokens", "120", "--threads", "2",
              "--n-gpu-layers", "0", "--kv-type", "f16", "--max-tokens-per-turn", "32", "--parallel", "2"]
    vet_root = tmp_path / "vet_traces"
    capsys.readouterr()
    assert main(["vet", str(demo_archive), "--out", str(tmp_path / "vet.sqlite"), "--traces", str(vet_root),
                 "--limit", "4", "--slots", "2", *common]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["done"] == 4
    # the fifth one by itself, one at a time, as the single-spectrum agent ran it
    assert main(["vet", str(demo_archive), "--out", str(tmp_path / "vet.sqlite"), "--traces", str(vet_root),
                 "--match", single.file_name, "--slots", "1", *common]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["done"] == 1
    with VettingStore(tmp_path / "vet.sqlite", readonly=True) as store:
        vet = every_column(store, vet_root)
    assert sorted(vet) == sorted(app)
    for key in app:
        assert vet[key] == app[key], key


def test_prescreen_cancel_records_none_in_flight_and_a_new_one_does_the_rest(qtbot, window):
    w, batch = window, entries(window, 6)
    seen = watch(w)
    store = w.vetting.store
    started: list[str] = []

    def on_start(_job, key, _info):  # the third spectrum starts when the first is stored: two are in flight
        started.append(key)
        if len(started) == 3:
            w.inference.cancel_batch()

    w.inference.started_job.connect(on_start)
    assert w.agent.start_batch(batch, "cv", InstalledModel(MODEL)) == 6
    wait_idle(qtbot, w)
    w.inference.started_job.disconnect(on_start)
    first = rows(store)
    assert 1 <= len(first) < 6 and "cancelled" not in {r["outcome"] for r in first.values()}
    assert seen["outcomes"].count("cancelled") >= 1, seen  # a spectrum in flight was cut short ...
    assert len(seen["outcomes"]) - seen["outcomes"].count("cancelled") == len(first)  # ... and not stored
    # the status bar says it was cancelled (no estimate left running), then goes away
    assert w.batch.bar.format().endswith("· cancelled") and "left" not in w.batch.bar.format()
    qtbot.waitUntil(lambda: not w.batch.bar.isVisible(), timeout=6000)

    assert w.agent.start_batch(batch, "cv", InstalledModel(MODEL)) == 6 - len(first)  # `vet`'s done rule: the stored ones skip
    wait_idle(qtbot, w)
    final = rows(store)  # each spectrum exactly once (`rows` checks), the first ones untouched
    assert len(final) == 6 and all(final[k] == r for k, r in first.items())
    assert w.agent.start_batch(batch, "cv", InstalledModel(MODEL)) == 0


def test_prescreen_pause_and_a_run_on_this_spectrum_between_slot_runs(qtbot, window):
    """Pause stops the refill (the spectra in flight finish); a run on the current spectrum is served then, and the
    batch resumes in slots after it; every spectrum of the batch ends recorded once by the batch."""
    w, batch = window, entries(window, 5)
    store = w.vetting.store
    seen = watch(w)
    assert w.agent.start_batch(batch, "cv", InstalledModel(MODEL)) == 5
    qtbot.waitUntil(lambda: seen["flight"] == 2, timeout=120000)
    w.toggle_batch_pause()
    qtbot.waitUntil(lambda: not w.inference.busy(), timeout=240000)  # the two in flight finished, no refill
    qtbot.wait(100)
    paused = len(store.model_verdicts("cv", latest=False))
    assert 2 <= paused < 5 and w.inference.batch_running()
    w.run_agent()  # on the current spectrum (the batch's first)
    assert w.agent.interactive_job is not None
    qtbot.waitUntil(lambda: w.agent.interactive_job is None, timeout=240000)
    qtbot.wait(100)
    assert len(store.model_verdicts("cv", latest=False)) == paused + 1  # the interactive run only: still paused
    seen["flight"] = 0
    w.toggle_batch_pause()
    wait_idle(qtbot, w)
    keys = [v.spectrum_key for v in store.model_verdicts("cv", latest=False)]
    assert len(keys) == 6 and len(set(keys)) == 5  # five batch items once each, plus the interactive run
    assert seen["flight"] == (2 if 5 - paused > 1 else 1)  # the rest ran in slots again


def test_closing_the_window_with_two_in_flight_stops_and_joins_the_worker(qtbot, window):
    w, store = window, window.vetting.store
    seen = watch(w)
    inference = w.inference
    assert w.agent.start_batch(entries(w, 4), "cv", InstalledModel(MODEL)) == 4
    qtbot.waitUntil(lambda: seen["flight"] == 2, timeout=120000)
    recorded = len(store.model_verdicts("cv", latest=False))
    w.close()  # stops the inference thread (cancelling the spectra in flight) and joins it before widgets go
    assert not inference.running() and not inference.service._flight
    assert recorded < 4

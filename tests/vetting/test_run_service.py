"""The app's run service without Qt (`speco3.vetting.runs.RunService`): the queue (interactive runs before batch
items, a paused batch waits), the engine cache by typed key, cancels (queued and in flight, nothing recorded), an
engine that fails to load, and the time estimates, on the scripted engine and on the real tiny llama.cpp model, with
a real store; every report is a typed event."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from vetting_helpers import NO, YES, ZOOM, items, pillow_render

from speco3.agent import get_task
from speco3.engine.base import Engine, EngineSettings
from speco3.engine.choice import FilePair, Scripted
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import EngineError
from speco3.vetting import VettingStore
from speco3.vetting.runs import (
    BatchFollow,
    BatchProgress,
    BatchState,
    EngineStatus,
    RunEnded,
    RunEstimate,
    RunEvent,
    RunFailed,
    RunJob,
    RunService,
    RunStarted,
    RunStep,
    RunTokens,
)
from speco3.vetting.screening import Screening, VetItem

try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1)
    HAVE_LLAMA = False


class Recorder:
    """The observer: every event, in order (events come from the serving thread and the caller's)."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self.on_event = None  # optional hook (event) -> None

    def __call__(self, event: RunEvent) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


SCRIPT = Scripted("two-turns.json")  # the typed choice the engine is cached by (the factory makes the engine)


def opened() -> list[ScriptedEngine]:
    """The engines the jobs' factories made, in order."""
    return []


def job(screening: Screening, item: VetItem, made: list[ScriptedEngine], *, outputs=(ZOOM, YES), choice=SCRIPT,
        delay_s: float = 0.0) -> RunJob:
    def factory() -> ScriptedEngine:
        engine = ScriptedEngine(list(outputs), delay_s=delay_s)
        made.append(engine)
        return engine

    return RunJob(item.key, item, screening, choice.engine_key(EngineSettings()), factory)


@pytest.fixture
def store(tmp_path):
    s = VettingStore(tmp_path / "s.sqlite")
    yield s
    s.close()


def screening(store: VettingStore, tmp_path: Path, **kw) -> Screening:
    return Screening(store, get_task("cv"), pillow_render, trace_root=tmp_path / "traces", **kw)


def test_interactive_runs_go_before_the_batch_and_one_engine_serves_them_all(store, tmp_path):
    seen, made = Recorder(), opened()
    service = RunService(seen)
    batch = items(3)
    shared = screening(store, tmp_path)
    service.start_batch([job(shared, it, made, outputs=(NO,)) for it in batch])
    asked = job(screening(store, tmp_path, resume=False, share=False), items(1, prefix="asked")[0], made)
    asked_id = service.submit(asked)
    assert service.busy() and service.batch_running()
    service.serve(until_idle=True)

    started = [e.key for e in seen.of(RunStarted)]
    assert started == [asked.key, *(it.key for it in batch)]  # the run asked for first
    ended = {e.key: e for e in seen.of(RunEnded)}
    assert ended[asked.key].verdict is not None and ended[asked.key].verdict.outcome == "YES"
    assert ended[asked.key].final is not None and ended[asked.key].final.verdict == "YES"
    # one typed key: the engine opened for the first run is cached and answers the batch too (its factory unused)
    assert all(ended[it.key].verdict.outcome == "YES" for it in batch)
    assert ended[asked.key].info.task == "cv" and not ended[asked.key].info.scripted
    # the interactive run's steps and tokens are reported; the batch items' steps are not
    assert {e.job_id for e in seen.of(RunStep)} == {asked_id}
    assert "Check Hα" in "".join(e.text for e in seen.of(RunTokens) if e.job_id == asked_id)
    assert [(e.done, e.total) for e in seen.of(BatchProgress)] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert [e.state for e in seen.of(BatchState)] == ["running", "finished"]
    assert len(made) == 1
    assert [e.text for e in seen.of(EngineStatus)][0] == "loading scripted two-turns.json …"
    assert not service.busy() and not service.batch_running() and made[0].closed  # `serve` closed it
    assert {v.spectrum_key for v in store.model_verdicts("cv")} == {asked.key, *(it.key for it in batch)}


def test_another_engine_key_closes_the_cached_engine_and_a_scripted_job_is_never_cached(store, tmp_path):
    seen, made = Recorder(), opened()
    service = RunService(seen)
    sc = screening(store, tmp_path, resume=False, share=False)
    first, second, third = items(3)
    service.submit(job(sc, first, made))
    service.submit(job(sc, second, made, choice=Scripted("other.json")))
    demo = job(sc, third, made)
    demo.scripted = True
    service.submit(demo)
    service.serve(until_idle=True)
    assert len(made) == 3 and [e.text.split(" ")[0] for e in seen.of(EngineStatus)] == ["loading", "scripted",
                                                                                          "loading", "scripted"]
    assert seen.of(RunStarted)[-1].info.scripted
    assert len(store.model_verdicts("cv")) == 3


def test_a_paused_batch_waits_and_a_cancelled_one_records_nothing_more(store, tmp_path):
    seen, made = Recorder(), opened()
    service = RunService(seen)
    shared = screening(store, tmp_path)
    service.start_batch([job(shared, it, made, outputs=(NO,)) for it in items(4)])
    service.pause_batch(True)
    service.serve(until_idle=True)  # nothing to run now
    assert seen.of(RunStarted) == [] and service.batch_running()
    service.pause_batch(False)

    def cancel_after_the_first(event: RunEvent) -> None:
        if isinstance(event, RunEnded):
            service.cancel_batch()

    seen.on_event = cancel_after_the_first
    service.serve(until_idle=True)
    assert len(seen.of(RunEnded)) == 1 and len(store.model_verdicts("cv")) == 1
    assert [e.state for e in seen.of(BatchState)] == ["running", "paused", "running", "cancelled"]
    assert not service.batch_running()


def test_cancels_before_and_during_a_run_record_nothing(store, tmp_path):
    seen, made = Recorder(), opened()
    service = RunService(seen)
    sc = screening(store, tmp_path, resume=False, share=False)
    queued = job(sc, items(1)[0], made)
    queued_id = service.submit(queued)
    assert service.cancel_current()  # queued, not started: reported at once
    assert seen.of(RunFailed) == [RunFailed(queued_id, queued.key, "cancelled before it started")]
    assert not service.cancel_current()  # nothing left

    running = job(sc, items(1)[0], made, outputs=(ZOOM, YES), delay_s=0.01)
    service.submit(running)

    def cancel_at_the_first_step(event: RunEvent) -> None:
        if isinstance(event, RunStep):
            assert service.cancel_current()

    seen.on_event = cancel_at_the_first_step
    service.serve(until_idle=True)
    (ended,) = seen.of(RunEnded)
    assert ended.cancelled and ended.verdict is None and ended.final is not None
    assert store.model_verdicts("cv") == []  # a later run does it again


def test_an_engine_that_fails_to_load_fails_its_job_and_the_service_goes_on(store, tmp_path):
    seen, made = Recorder(), opened()
    service = RunService(seen)
    sc = screening(store, tmp_path, resume=False, share=False)
    bad_item, good_item = items(2)
    missing = FilePair(str(tmp_path / "missing.gguf"), str(tmp_path / "missing-mmproj.gguf"))
    bad = RunJob(bad_item.key, bad_item, sc, missing.engine_key(EngineSettings()),
                 lambda: missing.open(EngineSettings()))
    bad_id = service.submit(bad)
    service.submit(job(sc, good_item, made))
    service.serve(until_idle=True)
    (failed,) = seen.of(RunFailed)
    assert failed.job_id == bad_id and failed.key == bad.key and "missing" in failed.message
    assert [e.key for e in seen.of(RunEnded)] == [good_item.key]  # the next job ran
    assert [v.spectrum_key for v in store.model_verdicts("cv")] == [good_item.key]


def test_an_engine_error_mid_run_is_recorded_as_the_core_records_it(store, tmp_path):
    seen, made = Recorder(), opened()
    service = RunService(seen)
    sc = screening(store, tmp_path, resume=False, share=False)
    service.submit(job(sc, items(1)[0], made, outputs=(EngineError("the model files went away"),)))
    service.serve(until_idle=True)
    (ended,) = seen.of(RunEnded)
    assert ended.verdict is not None and ended.verdict.outcome == "engine_error"
    assert seen.of(RunFailed) == []


def test_stop_from_another_thread_ends_serve_and_closes_the_engine(store, tmp_path):
    seen, made = Recorder(), opened()
    service = RunService(seen)
    sc = screening(store, tmp_path, resume=False, share=False)
    service.submit(job(sc, items(1)[0], made, outputs=(ZOOM, ZOOM, ZOOM, YES), delay_s=0.02))
    thread = threading.Thread(target=service.serve)
    thread.start()
    seen_step = threading.Event()
    seen.on_event = lambda e: seen_step.set() if isinstance(e, RunStep) else None
    assert seen_step.wait(30)
    service.stop()
    thread.join(30)
    assert not thread.is_alive()
    assert seen.of(RunEnded)[-1].cancelled and store.model_verdicts("cv") == []
    assert made[0].closed


@pytest.mark.llama
def test_slots_estimates_and_follow_on_the_real_tiny_model(tiny_gguf, store, tmp_path):
    if not HAVE_LLAMA:
        pytest.skip("llama-cpp-python (with mtmd) is not installed")
    text, mmproj = tiny_gguf("F32")
    settings = EngineSettings(n_ctx=8192, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False, image_max_tokens=120,
                              max_tokens_per_turn=32, flash_attn=False, kv_type="f32", n_seq=2)
    choice = FilePair(str(text), str(mmproj))
    key = choice.engine_key(settings)
    opens: list[int] = []

    def factory() -> Engine:
        opens.append(1)
        return choice.open(settings)

    seen = Recorder()
    service = RunService(seen)
    shared = screening(store, tmp_path)
    batch = items(4)
    service.start_batch([RunJob(it.key, it, shared, key, factory) for it in batch])
    service.serve(until_idle=True)

    assert len(opens) == 1
    ended = seen.of(RunEnded)
    assert sorted(e.key for e in ended) == sorted(it.key for it in batch)
    assert {e.verdict.outcome for e in ended} <= {"YES", "NO", "format_error", "budget_exhausted"}
    assert max(e.in_flight for e in seen.of(BatchFollow)) == 2  # two spectra at once on the parallel sequences
    assert seen.of(BatchFollow)[-1] == BatchFollow(0, "", 0)
    estimates = seen.of(RunEstimate)
    assert estimates and all(e.left is None or e.left >= 0 for e in estimates)
    # once a spectrum is done, the queue's time is measured: a batch item's estimate includes the queue
    later = [e for e in estimates if e.job_id not in {seen.of(RunStarted)[0].job_id}]
    assert any(e.queue_left is not None and e.queue_left > 0 for e in later)
    assert ended[0].info.backend and ended[0].info.model
    assert [e.state for e in seen.of(BatchState)] == ["running", "finished"]
    assert len(store.model_verdicts("cv")) == 4

"""Agent runs and the batch pre-screen: engines, jobs, and what is stored when a run ends.

`AgentController` turns the agent panel's requests into `AgentJob`s for the `InferenceThread`, and records every
finished run in the vetting store as a `ModelVerdict` (kept apart from human decisions) with its evidence trace
saved under the data folder. The canned demo session is recorded under the model id "scripted demo — not a
model" so that no table, export or report can pass it off as a model's verdict.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QProgressBar, QPushButton

from speco3.agent.eta import format_eta
from speco3.gui.demo_session import SCRIPTED_LABEL, demo_engine, is_demo_spectrum
from speco3.gui.settings import SERVER_MODEL_ID
from speco3.gui.vetting import VettingController, store_key
from speco3.gui.workers import AgentJob, InferenceThread

log = logging.getLogger(__name__)


def installed_models() -> list[tuple[str, str]]:
    """(name, display text) of the installed models; empty when none (or the store is unreadable)."""
    try:
        from speco3_models.store import ModelStore

        out = []
        for m in ModelStore().list():
            quant = getattr(m, "quant", None)
            out.append((m.name, f"{m.name}" + (f" ({quant})" if quant else "")))
        return out
    except Exception as exc:
        log.warning("model store unavailable: %s", exc)
        return []


def _open_remote_engine(server: Any, engine_settings: Any):
    """The engine for the settings' "Model server" (loaded by the inference worker, like a local model)."""
    from speco3.engine.remote import RemoteEngine

    return RemoteEngine(server, engine_settings)


def _demo_engine_for(spectrum: Any, entry: Any, task: Any):
    """The scripted demo engine of one spectrum (loaded from ``entry`` when not given)."""
    return demo_engine(spectrum if spectrum is not None else entry.load(), task)


class AgentController(QObject):
    """See module doc. Signals: message(text), verdictRecorded(entry key)."""

    message = Signal(str)
    verdictRecorded = Signal(str)

    def __init__(self, inference: InferenceThread, vetting: VettingController, panel, settings, tasks: dict,
                 engine_opener: Callable[[str, Any], Any] | None = None, parent=None):
        super().__init__(parent)
        self.inference = inference
        self.vetting = vetting
        self.panel = panel
        self.settings = settings
        self.tasks = tasks
        self.engine_opener = engine_opener or self._open_engine
        self.interactive_job: int | None = None
        self._jobs: dict[int, tuple[Any, Any]] = {}  # job id -> (entry, task)
        self._files = None  # FileCheck of the current store (digests of the files behind recorded verdicts)
        self.batch_in_flight = 0  # batch items running together in slots (`speco3.gui.slot_batch`)
        inference.started_job.connect(self._started)
        inference.tokens.connect(panel.append_tokens)
        inference.step.connect(panel.add_step)
        inference.eta.connect(panel.set_eta)
        inference.finished_job.connect(self._finished)
        inference.failed_job.connect(self._failed)
        inference.engine_status.connect(self.message)
        inference.batch_follow.connect(self._follow)

    @staticmethod
    def _open_engine(model_id: str, engine_settings: Any):
        from speco3.engine import open_engine

        return open_engine(model_id, engine_settings, threaded=False, load=False)

    def _task(self, task_id: str):
        task = self.tasks.get(task_id)
        if task is None:
            raise KeyError(f"unknown task {task_id!r}")
        return task

    def _job(self, entry: Any, task, model_id: str, spectrum=None, batch: bool = False) -> AgentJob:
        """A job of plain data: its engine factory binds the opener and values, never this controller or a widget
        (the worker thread drops the job; a widget reachable from it would be destroyed there)."""
        if model_id == SCRIPTED_LABEL:  # the canned demo: one run, whatever K is set (its script never varies)
            return AgentJob(entry.key, task, SCRIPTED_LABEL, partial(_demo_engine_for, spectrum, entry, task),
                            spectrum=spectrum, entry=entry, batch=batch, scripted=True)
        es = self.settings.engine_settings()
        if model_id == SERVER_MODEL_ID:  # Settings → Model server: the model runs there
            server = self.settings.server_config()
            key = f"server|{server.url}|{server.model}|{sorted(es.to_dict().items())}"
            return AgentJob(entry.key, task, key, partial(_open_remote_engine, server, es), spectrum=spectrum,
                            entry=entry, batch=batch)
        key = f"{model_id}|{sorted(es.to_dict().items())}"
        return AgentJob(entry.key, task, key, partial(self.engine_opener, model_id, es), spectrum=spectrum,
                        entry=entry, batch=batch, plan=self.settings.rollout_plan())

    # -- interactive ---------------------------------------------------------------------------------------------
    def run_current(self, task_id: str, model_id: str) -> int | None:
        entry, spectrum = self.vetting.entry, self.vetting.spectrum
        if entry is None or spectrum is None:
            self.message.emit("select a readable spectrum first")
            return None
        if not model_id:
            self.message.emit("no model installed — see the agent panel for how to get one")
            return None
        if model_id == SCRIPTED_LABEL and not is_demo_spectrum(spectrum):
            self.message.emit("the scripted demo session runs only on the demo archive's spectra")
            return None
        if self.interactive_job is not None:
            self.message.emit("the agent is already running; cancel it first (Esc)")
            return None
        task = self._task(task_id)
        job = self._job(entry, task, model_id, spectrum=spectrum)
        job_id = self.inference.submit(job)
        self.interactive_job = job_id
        self._jobs[job_id] = (entry, task)
        title = f"{spectrum.name} · task {task.id} · {model_id}"
        self.panel.begin(job_id, title, scripted=job.scripted)
        if self.batch_in_flight > 1:
            self.message.emit(f"batch pre-screen pauses for this run, which starts when the {self.batch_in_flight} "
                              "spectra in flight are done")
        elif self.inference.batch_running():
            self.message.emit("batch pre-screen pauses for this run and continues after it")
        return job_id

    def cancel(self) -> None:
        if self.inference.cancel_current():
            self.message.emit("cancelling the agent run …")

    # -- batch ---------------------------------------------------------------------------------------------------
    def start_batch(self, entries: list[Any], task_id: str, model_id: str, skip_done: bool = True) -> int:
        """Queue ``entries`` for a background pre-screen; returns the number queued."""
        if not model_id:
            self.message.emit("no model installed — batch pre-screen needs one")
            return 0
        from speco3.vetting.batch import DoneCheck

        task = self._task(task_id)
        store = self.vetting.store
        # the rule of `spec-o3 vet`: same model and prompt version, not cancelled or failed, file unchanged
        k = self.settings.rollouts if model_id != SCRIPTED_LABEL else 1
        check = DoneCheck(store, task, model_id, rollouts=k) if skip_done and store is not None else None
        jobs = []
        for entry in entries:
            if getattr(entry, "error", None):
                continue
            if model_id == SCRIPTED_LABEL and not str(getattr(entry, "file_name", "")).startswith("spec-60001-SPECO3DEMO"):
                continue
            if check is not None and check.state(store_key(entry), entry.path) == "done":
                continue
            job = self._job(entry, task, model_id, batch=True)
            jobs.append(job)
        self.inference.start_batch(jobs)
        for job in jobs:
            self._jobs[job.job_id] = (job.entry, task)
        self.message.emit(f"batch pre-screen of {len(jobs)} spectra started (task {task.id})")
        return len(jobs)

    def _follow(self, job_id: int, key: str, in_flight: int) -> None:
        """The batch item the time estimate follows, named in the agent panel while it shows no run of its own."""
        self.batch_in_flight = in_flight
        entry = self._jobs.get(job_id, (None, None))[0]
        name = getattr(entry, "name", None) or key  # with "#N": spectra of one file differ (not file_name)
        self.panel.show_batch(f"pre-screen: {in_flight} spectra in flight; the estimate follows {name}"
                              if in_flight > 1 else "")

    # -- results -------------------------------------------------------------------------------------------------
    def _started(self, job_id: int, key: str, info: dict) -> None:
        if job_id == self.interactive_job:
            self.panel.started(job_id, info)

    def _failed(self, job_id: int, key: str, message: str) -> None:
        self._jobs.pop(job_id, None)
        if job_id == self.interactive_job:
            self.panel.finish(job_id, message)
            self.interactive_job = None
        self.message.emit(f"agent run on {key} failed: {message}")

    def _finished(self, job_id: int, key: str, verdict_step: Any, info: dict) -> None:
        entry, task = self._jobs.pop(job_id, (None, None))
        interactive = job_id == self.interactive_job
        if interactive:
            self.panel.finish(job_id)
            self.interactive_job = None
        if entry is None or verdict_step is None:
            return
        outcome = getattr(verdict_step.outcome, "value", str(verdict_step.outcome))
        if outcome == "cancelled":
            self.message.emit(f"agent run on {entry.key} cancelled; nothing stored")
            return
        try:
            conf = self._record(entry, task, verdict_step, info)
            if interactive and conf is not None and conf.k > 1:
                self.panel.show_confidence(conf, SCRIPTED_LABEL if info.get("scripted") else f"model {info.get('model')}")
        except Exception as exc:
            log.exception("recording the model verdict failed")
            self.message.emit(f"model verdict not stored: {exc}")
            return
        self.verdictRecorded.emit(entry.key)

    def _record(self, entry: Any, task, step: Any, info: dict):
        """Store the run: every rollout with its trace (under the data folder) and the verdict row with their fold;
        returns the fold (`speco3.agent.confidence.Confidence`; None without a store)."""
        from speco3.vetting.batch import FileCheck
        from speco3.vetting.records import SpectrumInfo
        from speco3.vetting.rollout_runs import save_rollouts, verdict_row

        store = self.vetting.store
        if store is None:
            return None
        key = store_key(entry)
        spectrum = info.get("spectrum")
        run = info["run"]
        digest = hashlib.sha256(f"{key}|{task.id}|{info.get('t0')}".encode()).hexdigest()[:16]
        try:
            records = save_rollouts(run, Path(self.settings.resolved_data_folder()) / "traces" / digest)
        except Exception as exc:  # a trace that cannot be written must not lose the verdict
            log.warning("trace of %s not saved: %s", key, exc)
            records = save_rollouts(run, None)
        # the file's sha256, as `spec-o3 vet` records it: a later pre-screen or vet redoes the spectrum if it changes
        if self._files is None or self._files.store is not store:  # one per store: its stamps are read once
            self._files = FileCheck(store)
        sha = self._files.digest(entry.path) if getattr(entry, "path", None) else None
        if spectrum is not None:
            store.record_spectrum(SpectrumInfo.of(key, spectrum, sha))
        model_id = SCRIPTED_LABEL if info.get("scripted") else str(info.get("model") or "unknown")
        conf = run.confidence(self.settings.thresholds())
        v = verdict_row(run, records, conf, spectrum_key=key, task=task.id, model_id=model_id,
                        quant=info.get("quant"), prompt_version=task.prompt_version, file_sha256=sha,
                        engine_settings=info.get("settings", {}), seconds=float(info.get("elapsed", step.seconds)))
        store.record_model_verdict(v, records)
        if conf.k > 1:
            p = "—" if conf.p_yes is None else f"{conf.p_yes:.2f}"
            self.message.emit(f"{entry.key}: p_yes {p} over {conf.k} rollouts"
                              + (f" — abstained ({conf.abstain_reason})" if conf.abstained else ""))
        return conf


class BatchControls(QObject):
    """Status-bar controls of the batch pre-screen: progress, pause/resume, cancel (shown while a batch runs)."""

    def __init__(self, inference: InferenceThread, message: Callable[[str], None], parent=None):
        super().__init__(parent)
        self.inference = inference
        self.message = message
        self.bar = QProgressBar(objectName="batchProgress", visible=False, maximumWidth=220)
        self.bar.setFormat("pre-screen %v / %m")
        self.pause = QPushButton("Pause", objectName="batchPause", visible=False)
        self.cancel = QPushButton("Cancel batch", objectName="batchCancel", visible=False)
        self.pause.clicked.connect(self.toggle_pause)
        self.cancel.clicked.connect(inference.cancel_batch)
        inference.batch_progress.connect(self._on_progress)
        inference.eta.connect(self._on_eta)
        inference.batch_state.connect(self._on_state)
        self.paused = False
        self.running = False  # between "running" and "finished"/"cancelled": late progress and estimates are ignored

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        self.inference.pause_batch(self.paused)

    def _on_progress(self, done: int, total: int) -> None:
        if not self.running:  # the spectra in flight at a cancel report back after it: keep the bar as it stopped
            return
        for w in (self.bar, self.pause, self.cancel):
            w.setVisible(True)
        self.bar.setMaximum(max(total, 1))
        self.bar.setValue(done)

    def _on_eta(self, _job_id: int, _left: float, queue_left: float) -> None:
        """Time left for the whole queue in the progress bar (only while a batch runs)."""
        if self.running and self.bar.isVisible() and queue_left >= 0:
            self.bar.setFormat(f"pre-screen %v / %m · {format_eta(queue_left)}")
            self.bar.setToolTip("estimated from the measured speed of the loaded model and the spectra done so far")

    def _on_state(self, state: str) -> None:
        self.pause.setText("Resume" if state == "paused" else "Pause")
        self.paused = state == "paused"
        self.running = state in ("running", "paused")
        if state in ("finished", "cancelled"):
            self.bar.setFormat("pre-screen %v / %m" + (" · cancelled" if state == "cancelled" else " · done"))
            self.message(f"batch pre-screen {state}")
            QTimer.singleShot(3000, self, self._hide)  # this object as context: no call after the window closes

    def _hide(self) -> None:
        if self.running:  # a new batch started within the 3 s
            return
        for w in (self.bar, self.pause, self.cancel):
            w.setVisible(False)

"""Agent runs and the batch pre-screen: engines, jobs, and what is stored when a run ends.

`AgentController` turns the agent panel's requests into `RunJob`s for the `InferenceThread`; each job carries a
`speco3.vetting.screening.Screening` of the current store, so every run is recorded by the screening core exactly
as ``spec-o3 vet`` records it (the same verdict row, digests and rollouts; traces under the data folder's
``traces``, named as vet names them) and kept apart from human decisions. The canned demo session is recorded under the model id "scripted demo — not a
model" so that no table, export or report can pass it off as a model's verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QProgressBar, QPushButton

from speco3.agent.adaptive import describe_use
from speco3.agent.eta import format_eta
from speco3.agent.tasks import NO_LORA, Task
from speco3.demo import demo_engine, is_demo_spectrum
from speco3.engine.base import Engine, EngineSettings, LoraAdapter
from speco3.engine.choice import SCRIPTED_LABEL, InstalledModel, ModelChoice
from speco3.engine.native import check_adapters
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import Speco3Error
from speco3.gui.agent_panel import AgentPanel, ModelEntry
from speco3.gui.settings import AppSettings
from speco3.gui.vetting import VettingController, store_key
from speco3.gui.workers import InferenceThread
from speco3.spectra.index import IndexEntry
from speco3.spectra.model import Spectrum
from speco3.vetting.runs import RunEnded, RunInfo, RunJob
from speco3.vetting.screening import DoneCheck, Screening, VetItem
from speco3_models.errors import ModelStoreError
from speco3_models.store import ModelStore

log = logging.getLogger(__name__)


def installed_models() -> list[ModelEntry]:
    """The model box's entries of the installed models, each followed by its entries with the store's LoRA
    adapters made for it (its base digest: `ModelStore.adapters`); empty when none (or the store is unreadable)."""
    try:
        store = ModelStore()
        out: list[ModelEntry] = []
        for m in store.list():
            text = f"{m.name}" + (f" ({m.quant})" if m.quant else "")
            choice = InstalledModel(m.name)
            out.append(ModelEntry(choice, text))
            out += [ModelEntry(choice, f"{text} + {a.name} (scale 1.0)", str(a.path)) for a in store.adapters(m.name)]
        return out
    except (ModelStoreError, OSError) as exc:
        log.warning("model store unavailable: %s", exc)
        return []


def check_installed_adapters(model_id: str, adapters: tuple[LoraAdapter, ...]) -> None:
    """Refuse adapters made for another base than the installed model ``model_id`` before a job is queued: the
    check (and message) the engine makes when it loads them (`speco3.engine.native.check_adapters`, with the
    store's digest of the model's text GGUF); nothing is checked for a model the store does not list."""
    if not adapters:
        return
    model = ModelStore().find(model_id)
    if model is not None:
        check_adapters(adapters, model.text.sha256, model.name)


def _open_choice(choice: ModelChoice, engine_settings: EngineSettings) -> Engine:
    """The engine of a model choice (loaded by the inference worker), as the command line opens it."""
    return choice.open(engine_settings)


def _demo_engine_for(spectrum: Spectrum | None, entry: IndexEntry, task: Task) -> ScriptedEngine:
    """The scripted demo engine of one spectrum (loaded from ``entry`` when not given)."""
    return demo_engine(spectrum if spectrum is not None else entry.load(), task)


class AgentController(QObject):
    """See module doc. Signals: message(text), verdictRecorded(entry key), runChanged() (an interactive run was
    submitted, or ended, failed or was cancelled: `interactive_job` changed)."""

    message = Signal(str)
    verdictRecorded = Signal(str)
    runChanged = Signal()

    def __init__(self, inference: InferenceThread, vetting: VettingController, panel: AgentPanel,
                 settings: AppSettings, tasks: dict[str, Task],
                 engine_opener: Callable[[str, EngineSettings], Engine] | None = None,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.inference = inference
        self.vetting = vetting
        self.panel = panel
        self.settings = settings
        self.tasks = tasks
        self.engine_opener = engine_opener or self._open_engine
        self.interactive_job: int | None = None
        self._jobs: dict[int, tuple[IndexEntry, Task]] = {}  # job id -> (entry, task)
        self._adapter_checks: dict[tuple, str | None] = {}  # see `_check_adapters`
        self.batch_in_flight = 0  # batch items running together in slots
        inference.started_job.connect(self._started)
        inference.tokens.connect(panel.append_tokens)
        inference.step.connect(panel.add_step)
        inference.eta.connect(panel.set_eta)
        inference.finished_job.connect(self._finished)
        inference.failed_job.connect(self._failed)
        inference.engine_status.connect(self.message)
        inference.batch_follow.connect(self._follow)
        panel.model_box.currentIndexChanged.connect(self._model_chosen)

    def _model_chosen(self, _index: int) -> None:
        """The model box's adapter choice goes into the settings every run is built from ("": none chosen, the
        task's own; "none": the base only). A "base only" chosen for a task with an adapter is kept while a task
        without one is shown (its box offers no such entry: the plain model is the same run)."""
        chosen = self.panel.lora()
        if chosen or self.settings.lora.strip().lower() != NO_LORA or self.panel.offers_base_only():
            self.settings.lora = chosen
        self.show_adapter()

    def current_task(self) -> Task | None:
        return self.tasks.get(self.panel.task_id())

    def run_engine_settings(self, task: Task, choice: ModelChoice) -> EngineSettings:
        """The engine settings of a run of ``task`` on ``choice``, adapters resolved as the command line resolves
        them (the model box's choice, else the task's own; `speco3.agent.tasks.run_adapters`) and checked against
        the installed base. Raises `Speco3Error` with the command line's message (another base, a chat server)."""
        es = self.settings.engine_settings(task, server=choice.server)
        if isinstance(choice, InstalledModel) and choice.name and es.lora:
            self._check_adapters(choice.name, es.lora)
        return es

    def _check_adapters(self, model_id: str, adapters: tuple[LoraAdapter, ...]) -> None:
        """`check_installed_adapters`, its answer kept per model and adapter files as they are on disk (the model
        box asks again at every spectrum; an adapter's header is read once, again when its file changes)."""
        try:
            stats = tuple((a.path, a.scale, st.st_size, st.st_mtime_ns)
                          for a in adapters for st in (Path(a.path).stat(),))
        except OSError:
            check_installed_adapters(model_id, adapters)  # names the missing file
            return
        key = (model_id, stats)
        if key not in self._adapter_checks:
            try:
                check_installed_adapters(model_id, adapters)
                self._adapter_checks[key] = None
            except Speco3Error as exc:
                self._adapter_checks[key] = str(exc)
        if (refusal := self._adapter_checks[key]) is not None:
            raise Speco3Error(refusal)  # the check's message (a fresh error: no traceback kept growing)

    def show_adapter(self) -> None:
        """Say in the agent panel which adapter the next run applies and where it comes from, or why it is
        refused (an adapter made for another base, one for a chat server)."""
        task, choice = self.current_task(), self.panel.choice()
        if task is None or choice is None or choice.scripted:
            self.panel.show_adapter("")
            return
        try:
            adapters = self.run_engine_settings(task, choice).lora
        except Speco3Error as exc:
            self.panel.show_adapter(f"⚠ not run: {exc}", refused=True)
            return
        names = ", ".join(Path(a.path).name + (f" (scale {a.scale:g})" if a.scale != 1 else "") for a in adapters)
        own = task.lora is not None and adapters == (task.lora,) and not self.panel.lora()
        if own:
            text = f"LoRA adapter {names} from task {task.id}'s file; “base only” in the model box runs without it"
        elif adapters:
            text = f"LoRA adapter {names}, chosen in the model box" + (
                f" (task {task.id}'s own {Path(task.lora.path).name} is not used)" if task.lora is not None else "")
        elif task.lora is not None:
            text = f"base model only: task {task.id}'s adapter {Path(task.lora.path).name} is off"
        else:
            text = ""
        self.panel.show_adapter(text, tip="\n".join([f"task file: {task.source}", *(f"adapter: {a.path}" for a in adapters)])
                                if text else "")

    @staticmethod
    def _open_engine(model_id: str, engine_settings: EngineSettings) -> Engine:
        return InstalledModel(model_id).open(engine_settings)

    def _task(self, task_id: str):
        task = self.tasks.get(task_id)
        if task is None:
            raise KeyError(f"unknown task {task_id!r}")
        return task

    def screening(self, task, choice: ModelChoice, *, resume: bool, share: bool = True) -> Screening | None:
        """Where runs of ``task`` are recorded: the current store, the traces under the data folder, the rollout
        plan and thresholds of the settings (the canned demo: one run, whatever K is set); None without a store.
        ``share``: leave spectra that another run on the store (a ``spec-o3 vet``) screens to it, without waiting
        for them (the pre-screen takes its spectra one by one); False for a run asked for, which goes ahead
        (`speco3.vetting.screening`)."""
        store = self.vetting.store
        if store is None:
            return None
        run = self.settings.run_settings(task, server=choice.server)
        return Screening(store, task, self.inference.render,
                         trace_root=Path(self.settings.resolved_data_folder()) / "traces",
                         plan=None if choice.scripted else run.plan(), thresholds=run.thresholds(),
                         resume=resume, share=share, wait=False)

    def _job(self, entry: IndexEntry, screening: Screening, choice: ModelChoice, es: EngineSettings,
             spectrum: Spectrum | None = None,
             batch: bool = False) -> RunJob:
        """A job of plain data: its engine factory binds the opener and values (``es``: `run_engine_settings`),
        never this controller or a widget (the worker thread drops the job; a widget reachable from it would be
        destroyed there)."""
        item = VetItem.of_entry(entry, spectrum)
        task = screening.task
        key = choice.engine_key(es)
        if choice.scripted:  # the canned demo: one run, whatever K is set (its script never varies)
            return RunJob(entry.key, item, screening, key, partial(_demo_engine_for, spectrum, entry, task),
                            batch=batch, scripted=True)
        if isinstance(choice, InstalledModel) and choice.name:  # the window's opener (tests: a scripted engine)
            return RunJob(entry.key, item, screening, key, partial(self.engine_opener, choice.name, es), batch=batch)
        return RunJob(entry.key, item, screening, key, partial(_open_choice, choice, es), batch=batch)

    # -- interactive ---------------------------------------------------------------------------------------------
    def run_current(self, task_id: str, choice: ModelChoice | None) -> int | None:
        entry, spectrum = self.vetting.entry, self.vetting.spectrum
        if (reason := self.vetting.session.refusal("nothing run")) is not None or entry is None or spectrum is None:
            self.message.emit(reason or "select a readable spectrum first")
            return None
        if choice is None:
            self.message.emit("no model installed — see the agent panel for how to get one")
            return None
        if choice.scripted and not is_demo_spectrum(spectrum):
            self.message.emit("the scripted demo session runs only on the demo archive's spectra")
            return None
        if self.interactive_job is not None:
            self.message.emit("the agent is already running; cancel it first (Esc)")
            return None
        task = self._task(task_id)
        es = self._checked_settings(task, choice)
        if es is None:
            return None
        screening = self.screening(task, choice, resume=False, share=False)  # asked for: run even when done
        if screening is None:
            self.message.emit("open an archive first: runs are recorded in its vetting store")
            return None
        job = self._job(entry, screening, choice, es, spectrum=spectrum)
        job_id = self.inference.submit(job)
        self.interactive_job = job_id
        self._jobs[job_id] = (entry, task)
        self.runChanged.emit()
        title = f"{spectrum.name} · task {task.id} · {choice.label}"
        self.panel.begin(job_id, title, scripted=job.scripted, rollouts=job.first_round)
        if self.batch_in_flight > 1:
            self.message.emit(f"batch pre-screen pauses for this run, which starts when the {self.batch_in_flight} "
                              "spectra in flight are done")
        elif self.inference.batch_running():
            self.message.emit("batch pre-screen pauses for this run and continues after it")
        return job_id

    def _checked_settings(self, task: Task, choice: ModelChoice) -> EngineSettings | None:
        """`run_engine_settings`, or None with the refusal said in the status bar and the agent panel."""
        try:
            return self.run_engine_settings(task, choice)
        except Speco3Error as exc:
            self.message.emit(f"task {task.id} not run: {exc}")
            self.panel.show_adapter(f"⚠ not run: {exc}", refused=True)
            return None

    def cancel(self) -> None:
        if self.inference.cancel_current():
            self.message.emit("cancelling the agent run …")

    # -- batch ---------------------------------------------------------------------------------------------------
    def start_batch(self, entries: list[IndexEntry], task_id: str, choice: ModelChoice | None, skip_done: bool = True) -> int:
        """Queue ``entries`` for a background pre-screen on ``choice``; returns the number queued."""
        if choice is None:
            self.message.emit("no model installed — batch pre-screen needs one")
            return 0
        if (reason := self.vetting.session.store_refusal()) is not None:
            self.message.emit(f"{reason}: nothing pre-screened")
            return 0
        task = self._task(task_id)
        es = self._checked_settings(task, choice)
        if es is None:
            return 0
        screening = self.screening(task, choice, resume=skip_done)
        if screening is None:
            self.message.emit("open an archive first: the pre-screen is recorded in its vetting store")
            return 0
        # the rule of `spec-o3 vet` (the core's): same model, prompt version and K, not cancelled or failed, file
        # unchanged; applied again as each spectrum starts
        check: DoneCheck = screening.done_check(choice.label)
        jobs: list[tuple[RunJob, IndexEntry]] = []
        for entry in entries:  # an unreadable one too: the core records it as input_error, as `vet` does
            if choice.scripted and not (entry.file_name or "").startswith("spec-60001-SPECO3DEMO"):
                continue
            if check.state(store_key(entry), entry.path) == "done":
                continue
            jobs.append((self._job(entry, screening, choice, es, batch=True), entry))
        if not jobs:  # a batch of nothing never reported an end: its bar stayed at "0 / 1" with Pause and Cancel
            self.message.emit(f"nothing to pre-screen: every spectrum in the table (task {task.id}) is "
                              "already screened" + (" or not of the demo archive (all the scripted demo knows)"
                                                    if choice.scripted else "") + " — change the filters or the task")
            return 0
        self.inference.start_batch([job for job, _ in jobs])
        for job, entry in jobs:
            self._jobs[job.job_id] = (entry, task)
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
    def _started(self, job_id: int, key: str, info: RunInfo) -> None:
        if job_id == self.interactive_job:
            self.panel.started(job_id, info)

    def _failed(self, job_id: int, key: str, message: str) -> None:
        self._jobs.pop(job_id, None)
        if job_id == self.interactive_job:
            self.panel.finish(job_id, message)
            self.interactive_job = None
            self.runChanged.emit()
        self.message.emit(f"agent run on {key} failed: {message}")

    def _finished(self, job_id: int, key: str, ended: RunEnded) -> None:
        """A run ended; the screening core has recorded it on the inference thread (``ended.verdict``), or
        nothing when it was cancelled or skipped."""
        entry, task = self._jobs.pop(job_id, (None, None))
        interactive = job_id == self.interactive_job
        if interactive:
            self.panel.finish(job_id)
            self.interactive_job = None
            self.runChanged.emit()
        if entry is None:
            return
        verdict = ended.verdict
        if verdict is None:
            if ended.elsewhere:  # a `spec-o3 vet` on the same store screened it: show its verdict
                self.verdictRecorded.emit(entry.key)
            elif ended.cancelled:
                self.message.emit(f"agent run on {entry.key} cancelled; nothing stored")
            return
        conf = ended.confidence
        if conf is not None and (conf.k > 1 or verdict.k_max not in (None, 1)):
            p = "—" if conf.p_yes is None else f"{conf.p_yes:.2f}"
            self.message.emit(f"{entry.key}: p_yes {p}, {describe_use(conf.k, verdict.k_max, verdict.stop_reason)}"
                              + (f" — {conf.headline}" if conf.abstained else ""))
            if interactive:
                self.panel.show_confidence(conf, SCRIPTED_LABEL if ended.info.scripted else f"model {ended.info.model}",
                                           verdict.k_max, verdict.stop_reason)
        self.verdictRecorded.emit(entry.key)


class BatchControls(QObject):
    """Status-bar controls of the batch pre-screen: progress, pause/resume, cancel (shown while a batch runs).
    Signal: stateChanged() (a batch started, paused, resumed, finished or was cancelled: `running` may differ)."""

    stateChanged = Signal()

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
        self.stateChanged.emit()

    def _hide(self) -> None:
        if self.running:  # a new batch started within the 3 s
            return
        for w in (self.bar, self.pause, self.cancel):
            w.setVisible(False)

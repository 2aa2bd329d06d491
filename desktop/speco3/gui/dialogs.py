"""Dialogs: model manager (list / import / verify / remove / pull), settings, and the export helper.

Verification and downloads run in a worker thread with progress; the dialogs stay responsive. ``pull`` needs a
network connection; offline it fails with the store's message, which names ``import`` and ``convert``.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

from PySide6.QtCore import QObject, QRect, Qt, Signal
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from speco3.gui.keymap import ACTIONS, Keymap, normalize
from speco3.gui.settings import CREDENTIALS_FILE, AppSettings
from speco3.gui.workers import BackgroundTask
from speco3.imaging import DEFAULT_MAX_TOKENS
from speco3.vetting.export_formats import ExportOptions, export_format

log = logging.getLogger(__name__)


def dialogs_off() -> bool:
    """True while the app opens no modal dialog: the ``speco3_no_dialogs`` application property (the tests and the
    screenshot tour set it), or no application at all."""
    app = QApplication.instance()
    return app is None or bool(app.property("speco3_no_dialogs"))


def run_export(store, path: str | Path, fmt: str, task: str | None = None) -> Path:
    """Write ``store`` in the registered export format ``fmt`` (`speco3.vetting.export_formats`; atomic writes).

    The save dialog has asked before an existing file is replaced; the store itself is refused all the same."""
    return export_format(fmt)(store, path, ExportOptions(task=task, overwrite=True))


class _Job(BackgroundTask):
    """Runs ``fn(progress)`` on a worker thread; progress(text, done, total), finished(result), failed(message).

    ``fn`` is plain data (a model-store method bound with its arguments), never a closure over the dialog.
    """

    progress = Signal(str, int, int)
    finished = Signal(object)
    failed = Signal(str)

    def __init__(self, fn, parent: QObject | None = None):
        super().__init__("speco3-model-job", parent)
        self.fn = fn

    def work(self) -> None:
        try:
            result = self.fn(self._progress)
        except Exception as exc:
            log.warning("model job failed: %s", exc)
            self.failed.emit(str(exc))
            return
        self.finished.emit(result)

    def _progress(self, text, done, total) -> None:
        self.progress.emit(str(text), int(done), int(total or 0))


def _import_pair(store, text: str, mmproj: str, progress) -> str:
    return store.import_pair(text, mmproj, progress=progress).name


def _verify(store, name: str, progress) -> str:
    return "\n".join(store.verify(name, progress=progress).lines())


def _pull(store, name: str, progress) -> str:
    from speco3_converters.build import build_model
    from speco3_models.pull import pull

    return pull(store, name, progress=progress, convert=build_model).name


def fit_line(name: str, store=None) -> str:
    """The fit summary of an installed or catalog model at the app's context (the built-in estimate: no
    subprocess while a dialog waits), or why it is unknown."""
    from speco3.engine.fitting import plan_model
    from speco3.gui.settings import AppSettings

    try:
        plan, _ = plan_model(name, settings=AppSettings.load().engine_settings(), store=store, use_tool=False)
    except Exception as exc:  # a model the estimate cannot read must not break the dialog
        log.info("no memory estimate for %s: %s", name, exc)
        return f"memory needed: unknown ({exc})"
    return plan.summary() + "".join(f"; {n}" for n in plan.notes)


class ModelManagerDialog(QDialog):
    """Installed models with import, verify, remove and pull."""

    def __init__(self, parent: QWidget | None = None, store=None):
        super().__init__(parent)
        from speco3_models.store import ModelStore

        self.setWindowTitle("Model manager")
        self.store = store or ModelStore()
        self.list = QListWidget(objectName="modelList")
        self.details = QPlainTextEdit(objectName="modelDetails", readOnly=True)
        self.progress = QProgressBar(objectName="modelProgress", visible=False)
        self.pull_name = QComboBox(objectName="pullName", editable=True)
        try:
            from speco3_models.catalog import catalog

            self.pull_name.addItems([m.name for m in catalog()])
        except Exception as exc:
            log.warning("model catalog unavailable: %s", exc)
        buttons = QHBoxLayout()
        for text, slot in (("Import GGUF pair…", self.import_pair), ("Verify", self.verify),
                           ("Remove", self.remove), ("Pull (online)", self.pull)):
            b = QPushButton(text)
            b.clicked.connect(slot)
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Installed models (text GGUF + vision projector)"))
        layout.addWidget(self.list, 1)
        row = QHBoxLayout()
        row.addWidget(QLabel("Pull:"))
        row.addWidget(self.pull_name, 1)
        layout.addLayout(row)
        self.fit_label = QLabel(objectName="pullFit", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        layout.addWidget(self.fit_label)
        self.pull_name.currentTextChanged.connect(self._show_pull_fit)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.details, 1)
        self.close_box = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.close_box.rejected.connect(self.reject)
        layout.addWidget(self.close_box)
        self.list.currentTextChanged.connect(self._show_details)
        self._job: _Job | None = None
        self.resize(640, 520)
        self.reload()
        self._show_pull_fit(self.pull_name.currentText())

    def reload(self) -> None:
        self.list.clear()
        try:
            models = self.store.list()
        except Exception as exc:
            self.details.setPlainText(f"model store unreadable: {exc}")
            return
        for m in models:
            self.list.addItem(m.name)
        if not models:
            from speco3_models.errors import HOW_TO_GET_A_MODEL

            self.details.setPlainText("No model installed: " + HOW_TO_GET_A_MODEL + ".")

    def selected(self) -> str | None:
        item = self.list.currentItem()
        return item.text() if item else None

    def _show_details(self, name: str) -> None:
        if not name:
            return
        try:
            m = self.store.get(name)
        except Exception as exc:
            self.details.setPlainText(str(exc))
            return
        self.details.setPlainText(
            f"{m.name}\ntext: {m.text.path} ({m.quant})\nprojector: {m.mmproj.path} ({m.mmproj_quant})\n"
            f"width {m.hidden_size}, {m.n_layers} layers\ninstalled {m.created}\n{m.provenance.describe()}\n"
            f"{fit_line(name, self.store)}")

    def _show_pull_fit(self, name: str) -> None:
        """Before download: would the catalog model fit this machine ('fits on this machine: CPU only, 6.4 GiB')."""
        from speco3_models.catalog import find

        entry = find(name) if name else None
        self.fit_label.setText(f"{entry.name} ({entry.recommended_quant}): {fit_line(name)}" if entry else "")

    def _run(self, fn, done_text: str) -> None:
        if self._job is not None:
            return
        self.progress.setVisible(True)
        self.progress.setRange(0, 0)
        self.close_box.setEnabled(False)  # a running job is joined before the dialog may close
        self._job = _Job(fn, parent=self)
        self._done_text = done_text
        self._job.progress.connect(self._on_progress)
        self._job.finished.connect(self._on_finished)
        self._job.failed.connect(self._on_failed)
        self._job.start()

    def done(self, result: int) -> None:  # noqa: D401 - Qt override: Close, Esc and the window's close button
        if self._job is not None:
            self.details.setPlainText("A model job is running; the dialog closes when it has finished.")
            return
        super().done(result)

    def _on_finished(self, result) -> None:
        self._done(f"{self._done_text}\n{result}" if result else self._done_text)

    def _on_failed(self, message: str) -> None:
        self._done(f"failed: {message}")

    def _on_progress(self, text: str, done: int, total: int) -> None:
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * done / total))
        self.progress.setFormat(f"{text} %p%")

    def _done(self, text: str) -> None:
        job, self._job = self._job, None
        if job is not None:
            job.stop(cancel=False)  # it has emitted its last signal: the join is immediate
            job.deleteLater()
        self.close_box.setEnabled(True)
        self.progress.setVisible(False)
        current = self.selected()
        self.reload()
        if current:
            items = self.list.findItems(current, Qt.MatchFlag.MatchExactly)
            if items:
                self.list.setCurrentItem(items[0])
        self.details.setPlainText(text)  # after the reselection, which shows the model's details

    def import_pair(self) -> None:
        text, _ = QFileDialog.getOpenFileName(self, "Text model GGUF", "", "GGUF (*.gguf)")
        if not text:
            return
        mmproj, _ = QFileDialog.getOpenFileName(self, "Vision projector GGUF (mmproj)", str(Path(text).parent),
                                                "GGUF (*.gguf)")
        if mmproj:
            self._run(partial(_import_pair, self.store, text, mmproj), "imported")

    def verify(self) -> None:
        name = self.selected()
        if name:
            self._run(partial(_verify, self.store, name), "verified")

    def remove(self) -> None:
        name = self.selected()
        if name and QMessageBox.question(self, "Remove model", f"Remove {name} and its managed files?") \
                == QMessageBox.StandardButton.Yes:
            try:
                self.store.remove(name)
            except Exception as exc:
                self.details.setPlainText(f"failed: {exc}")
            self.reload()

    def pull(self) -> None:
        name = self.pull_name.currentText().strip()
        if name:
            self._run(partial(_pull, self.store, name), f"pulled {name}")


def _scrolling(page: QWidget) -> QScrollArea:
    """A settings page that scrolls: the keymap's 25 rows made the dialog taller than a 768-pixel screen (its OK and
    Cancel buttons fell below the edge)."""
    area = QScrollArea(widgetResizable=True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(page)
    return area


class SettingsDialog(QDialog):
    """Engine, folders, vetter and keymap settings; writes into the given `AppSettings` on OK."""

    def __init__(self, settings: AppSettings, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.settings = settings
        tabs = QTabWidget()
        general = QWidget()
        form = QFormLayout(general)
        self.vetter = QLineEdit(settings.vetter, objectName="vetterName")
        self.data_folder = QLineEdit(settings.data_folder, objectName="dataFolder",
                                     placeholderText=str(settings.resolved_data_folder()))
        self.auto_advance = QCheckBox("Go to the next spectrum after a decision", checked=settings.auto_advance)
        self.threads = QSpinBox(objectName="threads", minimum=0, maximum=256, specialValueText="automatic",
                                value=settings.n_threads or 0)
        self.gpu_layers = QSpinBox(objectName="gpuLayers", minimum=-1, maximum=999, specialValueText="automatic",
                                   value=-1 if settings.n_gpu_layers is None else settings.n_gpu_layers)
        self.n_ctx = QSpinBox(objectName="nCtx", minimum=2048, maximum=131072, singleStep=1024, value=settings.n_ctx)
        self.image_tokens = QSpinBox(objectName="imageTokens", minimum=0, maximum=16384, singleStep=64,
                                     specialValueText=f"default ({DEFAULT_MAX_TOKENS})",
                                     value=settings.image_max_tokens or 0)
        self.kv_type = QComboBox(objectName="kvType", toolTip="q8_0 halves the KV cache's memory (bench_load.py "
                                 "measures its cost on the next-token distribution)")
        self.kv_type.addItems(["f16", "q8_0"])
        self.kv_type.setCurrentText(settings.kv_type if settings.kv_type in ("f16", "q8_0") else "f16")
        form.addRow("Vetter name", self.vetter)
        form.addRow("Data folder", self.data_folder)
        form.addRow("", self.auto_advance)
        form.addRow("CPU threads", self.threads)
        form.addRow("GPU layers (-1 automatic, 0 CPU only)", self.gpu_layers)
        form.addRow("Context (KV cells)", self.n_ctx)
        form.addRow("Image token cap", self.image_tokens)
        form.addRow("KV cache type", self.kv_type)
        self.parallel = QSpinBox(objectName="parallel", minimum=1, maximum=16, value=settings.parallel,
                                 toolTip="conversations a local model decodes together: the K rollouts of a spectrum, "
                                 "or the spectra a batch pre-screen screens at once (1: one at a time)")
        form.addRow("Parallel sequences", self.parallel)
        self.rollouts = QSpinBox(objectName="rollouts", minimum=1, maximum=16, value=settings.rollouts,
                                 specialValueText="1 (greedy, as in the paper)",
                                 toolTip="K sampled runs per spectrum: p_yes, agreement and abstention")
        self.rollout_temp = QDoubleSpinBox(objectName="rolloutTemperature", minimum=0.05, maximum=2.0,
                                           singleStep=0.05, decimals=2, value=settings.rollout_temperature)
        self.min_agreement = QDoubleSpinBox(objectName="minAgreement", minimum=0.5, maximum=1.0, singleStep=0.05,
                                            decimals=2, value=settings.min_agreement,
                                            toolTip="abstain when fewer of the answered rollouts back the majority")
        self.rollout_mode = QComboBox(objectName="rolloutMode",
                                      toolTip="fixed: K rollouts for every spectrum; auto: 2 first, then 2 more at a "
                                      "time only while the decision is not settled, up to the maximum (the manual: How-to → "
                                      "Confidence and rollouts)")
        self.rollout_mode.addItem("fixed K", False)
        self.rollout_mode.addItem("auto: stop when the answer is settled", True)
        self.rollout_mode.setCurrentIndex(1 if settings.rollouts_auto else 0)
        self.max_rollouts = QSpinBox(objectName="maxRollouts", minimum=1, maximum=16, value=settings.max_rollouts,
                                     toolTip="the most rollouts auto runs on a spectrum (8: the training group size)")
        self.rollout_mode.currentIndexChanged.connect(self._rollout_mode_changed)
        self._rollout_mode_changed()
        form.addRow("Rollouts", self.rollout_mode)
        form.addRow("Rollouts per spectrum (K)", self.rollouts)
        form.addRow("Max rollouts (auto)", self.max_rollouts)
        form.addRow("Rollout temperature (K > 1, auto)", self.rollout_temp)
        form.addRow("Abstain below agreement", self.min_agreement)
        self.samp = QCheckBox("Connect to a SAMP hub (TOPCAT, Aladin, SPLAT-VO on this machine)", objectName="sampOn",
                              checked=settings.samp_enabled)
        self.samp_match = QSpinBox(objectName="sampMatch", minimum=1, maximum=3600, suffix=" arcsec",
                                   value=settings.samp_match_arcsec)
        form.addRow("SAMP", self.samp)
        form.addRow("Sky position match", self.samp_match)
        # certified stopping (speco3.vetting.stopping): the target until an audit sample records its own
        self.stop_recall = QDoubleSpinBox(
            objectName="stopRecall", minimum=1.0, maximum=100.0, singleStep=1.0, decimals=1, suffix=" %",
            value=settings.stop_recall * 100,
            toolTip="the queue's stopping line and File → Audit the rest: the share of all candidates the spectra "
            "you read must hold before it says stop (an audit sample keeps the target it was drawn for)")
        self.stop_confidence = QDoubleSpinBox(
            objectName="stopConfidence", minimum=50.0, maximum=99.9, singleStep=0.5, decimals=1, suffix=" %",
            value=settings.stop_confidence * 100,
            toolTip="how sure the stopping test must be that the recall is met (95 %: wrong at most 1 time in 20)")
        form.addRow("Stop vetting at recall", self.stop_recall)
        form.addRow("Stopping confidence", self.stop_confidence)
        tabs.addTab(_scrolling(general), "General")
        server = QWidget()
        sform = QFormLayout(server)
        self.server_url = QLineEdit(settings.server_url, objectName="serverUrl",
                                    placeholderText="empty: run the model on this computer")
        self.server_model = QLineEdit(settings.server_model, objectName="serverModel",
                                      placeholderText="the first model the server lists")
        self.server_key_env = QLineEdit(settings.server_api_key_env, objectName="serverKeyEnv",
                                        placeholderText="none, or the OS keyring entry 'spec-o3' / URL")
        sform.addRow("Server URL (llama-server, vLLM, SGLang)", self.server_url)
        # a user:password@ typed into the URL is taken out of it (`AppSettings.set_server`): say that one is kept
        # (never what it is) and offer to forget it
        self.server_credentials = QWidget(objectName="serverCredentials")
        row = QHBoxLayout(self.server_credentials)
        row.setContentsMargins(0, 0, 0, 0)
        self.server_credentials_text = QLabel(
            f"a user name and password are kept for this server ({CREDENTIALS_FILE}, readable by you only)",
            objectName="serverCredentialsText", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        self.forget_credentials = QPushButton("Forget", objectName="forgetCredentials",
                                              toolTip="remove them from this session and from "
                                              f"{settings.path().with_name(CREDENTIALS_FILE)}")
        self.forget_credentials.clicked.connect(self._forget_credentials)
        row.addWidget(self.server_credentials_text, 1)
        row.addWidget(self.forget_credentials)
        self.server_credentials.setVisible(settings.server_auth is not None)
        sform.addRow("", self.server_credentials)
        sform.addRow("Served model", self.server_model)
        sform.addRow("API key variable", self.server_key_env)
        tabs.addTab(_scrolling(server), "Model server")
        keys = QWidget()
        kform = QFormLayout(keys)
        keymap = Keymap(settings.keymap)
        self.key_edits: dict[str, QLineEdit] = {}
        for a in ACTIONS:
            edit = QLineEdit(keymap.keys[a.name], objectName=f"key_{a.name}")
            self.key_edits[a.name] = edit
            kform.addRow(a.text, edit)
        tabs.addTab(_scrolling(keys), "Keymap")
        self.error = QLabel("", objectName="settingsError", styleSheet="color:#b32d2d", textFormat=Qt.TextFormat.PlainText)
        box = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        layout.addWidget(self.error)
        layout.addWidget(box)
        self.tabs = tabs
        for f in (form, sform, kform):  # on a narrow screen a field goes under its label rather than off the edge
            f.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.fit_to()

    def fit_to(self, available: QRect | None = None) -> None:
        """Open as wide as the widest page and as tall as the tallest needs, within ``available`` (default: the
        screen's free area, less a margin): at 1366×768 every label and field is whole, with no horizontal
        scrollbar; the pages scroll vertically when the screen is shorter than they are."""
        if available is None:
            screen = self.screen() or QApplication.primaryScreen()
            available = screen.availableGeometry()
        pages = [self.tabs.widget(i) for i in range(self.tabs.count())]
        inner = [w for p in pages if isinstance(p, QScrollArea) and (w := p.widget()) is not None]
        bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        chrome = self.sizeHint() - self.tabs.sizeHint()  # the buttons, the error line and the margins
        width = max(w.sizeHint().width() for w in inner) + bar + 2 * self.tabs.style().pixelMetric(
            QStyle.PixelMetric.PM_DefaultFrameWidth) + 24 + chrome.width()
        height = max(w.sizeHint().height() for w in inner) + self.tabs.tabBar().sizeHint().height() + 24 \
            + chrome.height()
        self.resize(min(width, int(available.width() * 0.95)), min(height, int(available.height() * 0.9)))

    def _forget_credentials(self) -> None:
        """Forget: the server's user name and password leave the session and the credentials file at once."""
        self.server_credentials.setVisible(False)
        if not self.settings.forget_server_credentials():
            self.error.setText(f"{CREDENTIALS_FILE} cannot be rewritten: the user name and password stay in it "
                               "(see the log)")

    def _rollout_mode_changed(self) -> None:
        auto = bool(self.rollout_mode.currentData())
        self.rollouts.setEnabled(not auto)
        self.max_rollouts.setEnabled(auto)

    def accept(self) -> None:
        overrides = {name: edit.text().strip() for name, edit in self.key_edits.items()}
        bad = [n for n, k in overrides.items() if not normalize(k)]
        keymap = Keymap(overrides)
        if bad or keymap.conflicts():
            msg = [f"unparsable key for {', '.join(bad)}"] if bad else []
            msg += [f"{k} bound to both {a} and {b}" for k, a, b in keymap.conflicts()]
            self.error.setText("; ".join(msg))
            return
        url = self.server_url.text().strip()
        if url:
            from speco3.engine.chatapi import ServerConfig
            from speco3.errors import EngineError

            try:
                ServerConfig(url)
            except EngineError as exc:
                self.error.setText(str(exc))
                return
        s = self.settings
        s.set_server(url)  # a user:password@ in it goes to the credentials file, not desktop.json
        s.server_model = self.server_model.text().strip()
        s.server_api_key_env = self.server_key_env.text().strip()
        s.vetter = self.vetter.text().strip()
        s.data_folder = self.data_folder.text().strip()
        s.auto_advance = self.auto_advance.isChecked()
        s.n_threads = self.threads.value() or None
        s.n_gpu_layers = None if self.gpu_layers.value() < 0 else self.gpu_layers.value()
        s.n_ctx = self.n_ctx.value()
        s.image_max_tokens = self.image_tokens.value() or None
        s.kv_type = "q8_0" if self.kv_type.currentText() == "q8_0" else "f16"  # the box offers these two
        s.parallel = self.parallel.value()
        s.rollouts = self.rollouts.value()
        s.rollouts_auto = bool(self.rollout_mode.currentData())
        s.max_rollouts = self.max_rollouts.value()
        s.rollout_temperature = self.rollout_temp.value()
        s.min_agreement = self.min_agreement.value()
        s.samp_enabled = self.samp.isChecked()
        s.samp_match_arcsec = self.samp_match.value()
        s.stop_recall = round(self.stop_recall.value() / 100, 4)
        s.stop_confidence = round(self.stop_confidence.value() / 100, 4)
        s.keymap = keymap.overrides()
        super().accept()

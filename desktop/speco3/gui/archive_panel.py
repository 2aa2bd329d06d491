"""The archive panel: folder, indexing progress, filters and the lazy table of spectra."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QDoubleValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from speco3.gui.archive_model import VERDICT_STATES, ArchiveTableModel, Filters

log = logging.getLogger(__name__)


def _float(text: str) -> float | None:
    try:
        return float(text.replace(",", "."))
    except ValueError:
        return None


class ArchivePanel(QWidget):
    """See module doc. Signals: openRequested(), demoRequested(), rowActivated(row), filtersChanged()."""

    openRequested = Signal()
    demoRequested = Signal()
    rowActivated = Signal(int)
    filtersChanged = Signal()

    def __init__(self, model: ArchiveTableModel, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.folder = QLabel("No archive open", objectName="archiveFolder", wordWrap=True)
        open_b = QPushButton("Open folder…", objectName="openFolder")
        open_b.clicked.connect(self.openRequested)
        self.progress = QProgressBar(objectName="indexProgress", visible=False)
        self.progress.setFormat("indexing %v / %m")
        self.progress_label = QLabel("", objectName="indexLabel", visible=False)

        self.survey = QComboBox(objectName="surveyFilter", editable=False)
        self.survey.addItems(["any survey", "LAMOST", "SDSS", "DESI", "generic"])
        self.cls = QLineEdit(objectName="classFilter", placeholderText="class (STAR, GALAXY, QSO…)")
        self.z_min = QLineEdit(objectName="zMin", placeholderText="z ≥")
        self.z_max = QLineEdit(objectName="zMax", placeholderText="z ≤")
        self.snr_min = QLineEdit(objectName="snrMin", placeholderText="S/N ≥")
        for w in (self.z_min, self.z_max, self.snr_min):
            w.setValidator(QDoubleValidator())
        self.state = QComboBox(objectName="stateFilter")
        self.state.addItems(list(VERDICT_STATES))
        self.text = QLineEdit(objectName="textFilter", placeholderText="search name, object id…")
        self.count = QLabel("", objectName="rowCount")

        grid = QGridLayout()
        grid.addWidget(self.survey, 0, 0)
        grid.addWidget(self.cls, 0, 1)
        grid.addWidget(self.state, 0, 2)
        grid.addWidget(self.z_min, 1, 0)
        grid.addWidget(self.z_max, 1, 1)
        grid.addWidget(self.snr_min, 1, 2)
        grid.addWidget(self.text, 2, 0, 1, 3)

        self.table = QTableView(objectName="archiveTable")
        self.table.setModel(model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setColumnWidth(0, 300)
        for col, width in ((1, 60), (2, 62), (3, 62), (4, 60), (5, 60), (6, 70), (7, 50)):
            self.table.setColumnWidth(col, width)
        self.table.setAlternatingRowColors(True)
        self.table.clicked.connect(lambda idx: self.rowActivated.emit(idx.row()))
        self.table.activated.connect(lambda idx: self.rowActivated.emit(idx.row()))

        top = QHBoxLayout()
        top.addWidget(self.folder, 1)
        top.addWidget(open_b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top)
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_label)
        layout.addLayout(grid)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.count)

        self._debounce = QTimer(self, singleShot=True, interval=300)
        self._debounce.timeout.connect(self.apply_filters)
        for w in (self.cls, self.z_min, self.z_max, self.snr_min, self.text):
            w.textChanged.connect(lambda _t: self._debounce.start())
        self.survey.currentIndexChanged.connect(lambda _i: self.apply_filters())
        self.state.currentIndexChanged.connect(lambda _i: self.apply_filters())
        model.modelReset.connect(self.update_count)
        model.rowsInserted.connect(lambda *_: self.update_count())

    def filters(self) -> Filters:
        survey = self.survey.currentText()
        return Filters(
            survey=None if survey.startswith("any") else survey,
            cls=self.cls.text().strip() or None,
            z_min=_float(self.z_min.text()), z_max=_float(self.z_max.text()), snr_min=_float(self.snr_min.text()),
            text=self.text.text().strip() or None, state=self.state.currentText(),
        )

    def apply_filters(self) -> None:
        self._debounce.stop()
        self.model.set_filters(self.filters())
        self.filtersChanged.emit()

    def update_count(self) -> None:
        loaded, total = self.model.loaded_rows(), self.model.total_hint()
        source = "candidate list" if self.model.is_candidate_list else "index"
        self.count.setText(f"{loaded:,} loaded of {total:,} ({source})")

    def set_folder(self, text: str) -> None:
        self.folder.setText(text)

    def show_progress(self, done: int, total: int, path: str) -> None:
        self.progress.setVisible(True)
        self.progress_label.setVisible(True)
        self.progress.setMaximum(max(total, 1))
        self.progress.setValue(done)
        self.progress_label.setText(path.rsplit("/", 1)[-1])

    def hide_progress(self) -> None:
        self.progress.setVisible(False)
        self.progress_label.setVisible(False)

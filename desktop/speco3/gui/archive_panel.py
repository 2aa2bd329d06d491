"""The archive panel: folder, indexing progress, filters, triage order and the lazy table of spectra.

The table's ``p(YES)`` column shows the model's confidence (`speco3.agent.confidence`) as a bar: its length is
``p_yes`` (the share of YES among the rollouts), its colour runs from red (NO) through amber to green (YES), and a
hatched amber frame marks an abstention. The triage box orders the queue by ``p_yes`` or by uncertainty
(`speco3.vetting.triage`); the state filter's "model abstained" keeps only the abstentions.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QDoubleValidator, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from speco3.gui.archive_model import (
    ABSTAINED_ROLE,
    COL,
    P_YES_ROLE,
    VERDICT_STATES,
    ArchiveTableModel,
    Filters,
)
from speco3.spectra.model import SNR_DEFINITION, SNR_LABEL
from speco3.vetting.triage import ORDER_LABELS, ORDERS

ANY_SURVEY = "any survey"
DEFAULT_SURVEYS = ("LAMOST", "SDSS", "DESI", "APOGEE", "AAOmega/2dF", "generic")  # before an archive is open

log = logging.getLogger(__name__)


def _float(text: str) -> float | None:
    try:
        return float(text.replace(",", "."))
    except ValueError:
        return None


def confidence_colour(p: float) -> QColor:
    """Red (p=0, NO) → amber (0.5) → green (1, YES)."""
    p = min(max(p, 0.0), 1.0)
    red, amber, green = (190, 50, 50), (215, 160, 0), (40, 150, 60)
    a, b, t = (red, amber, p / 0.5) if p <= 0.5 else (amber, green, (p - 0.5) / 0.5)
    return QColor(*(round(x + (y - x) * t) for x, y in zip(a, b, strict=True)))


class ConfidenceDelegate(QStyledItemDelegate):
    """Paints the ``p(YES)`` cell as a bar (see module doc), then the number over it."""

    def paint(self, painter, option, index) -> None:
        p = index.data(P_YES_ROLE)
        if p is None:
            super().paint(painter, option, index)
            if index.data(ABSTAINED_ROLE):  # abstained without a single answer: the frame alone
                painter.save()
                painter.setPen(QPen(QColor(215, 160, 0), 1.5, Qt.PenStyle.DashLine))
                painter.setBrush(QBrush(Qt.BrushStyle.NoBrush))
                painter.drawRect(option.rect.adjusted(1, 1, -2, -2))
                painter.restore()
            return
        painter.save()
        if option.state & QStyle.StateFlag.State_Selected:
            painter.fillRect(option.rect, option.palette.highlight())
        bar = option.rect.adjusted(2, 3, -2, -3)
        bar.setWidth(max(1, round(bar.width() * float(p))))
        colour = confidence_colour(float(p))
        colour.setAlpha(150)
        painter.fillRect(bar, colour)
        if index.data(ABSTAINED_ROLE):
            painter.setPen(QPen(QColor(215, 160, 0), 1.5, Qt.PenStyle.DashLine))
            painter.setBrush(QBrush(Qt.BrushStyle.NoBrush))
            painter.drawRect(option.rect.adjusted(1, 1, -2, -2))
        painter.restore()
        opt = option.__class__(option)
        self.initStyleOption(opt, index)
        opt.backgroundBrush = QBrush(Qt.BrushStyle.NoBrush)
        opt.state &= ~QStyle.StateFlag.State_Selected
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)


NAME_WIDTH = 180  # the name column's width where the panel has room
NAME_MIN_WIDTH = 90  # … and its least (a file name elided at its left, its distinguishing end kept)


class ArchivePanel(QWidget):
    """See module doc. Signals: openRequested(), demoRequested(), rowActivated(row), filtersChanged()."""

    openRequested = Signal()
    demoRequested = Signal()
    rowActivated = Signal(int)
    filtersChanged = Signal()

    def __init__(self, model: ArchiveTableModel, parent: QWidget | None = None):
        super().__init__(parent)
        self.model = model
        self.folder = QLabel("No archive open", objectName="archiveFolder", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        open_b = QPushButton("Open folder…", objectName="openFolder")
        open_b.clicked.connect(self.openRequested)
        self.progress = QProgressBar(objectName="indexProgress", visible=False)
        self.progress.setFormat("indexing %v / %m")
        self.progress_label = QLabel("", objectName="indexLabel", visible=False, textFormat=Qt.TextFormat.PlainText)

        self.survey = QComboBox(objectName="surveyFilter", editable=False)
        self.survey.addItems([ANY_SURVEY, *DEFAULT_SURVEYS])  # an opened archive lists its own (`reset_filters`)
        self.cls = QLineEdit(objectName="classFilter", placeholderText="class (STAR, GALAXY, QSO…)")
        self.z_min = QLineEdit(objectName="zMin", placeholderText="z ≥")
        self.z_max = QLineEdit(objectName="zMax", placeholderText="z ≤")
        self.snr_min = QLineEdit(objectName="snrMin", placeholderText=f"{SNR_LABEL} ≥",
                                 toolTip=f"Minimum {SNR_LABEL}: {SNR_DEFINITION}")
        self.z_err_max = QLineEdit(objectName="zErrMax", placeholderText="z err ≤",
                                   toolTip="The pipeline's redshift error at most this (spectra whose file states "
                                           "none are kept)")
        self.deltachi2_min = QLineEdit(objectName="deltachi2Min", placeholderText="Δχ² ≥ (DESI)",
                                       toolTip="redrock's DELTACHI2 at least this: the best fit's χ² gap to the "
                                               "next-best (DESI; small is ambiguous, redrock flags < 9). Spectra "
                                               "of other surveys state none and are kept")
        for w in (self.z_min, self.z_max, self.snr_min, self.z_err_max, self.deltachi2_min):
            w.setValidator(QDoubleValidator())
        self.state = QComboBox(objectName="stateFilter")
        self.state.addItems(list(VERDICT_STATES))
        self.triage = QComboBox(objectName="triageOrder", toolTip="order the queue by the model's confidence")
        for order in ORDERS:
            self.triage.addItem(ORDER_LABELS[order], order)
        self.text = QLineEdit(objectName="textFilter", placeholderText="search name, object id…")
        self.unusable = QCheckBox("sky fibres, fully masked", objectName="includeUnusable",
                                  toolTip="also list sky fibres and spectra whose every pixel is masked "
                                          "(nothing to vet: left out of the queue and the pre-screen by default)")
        self.zwarn = QCheckBox("no z warning", objectName="zwarnClean",
                               toolTip="only spectra whose pipeline states no redshift warning (SDSS ZWARNING, DESI "
                                       "ZWARN = 0; LAMOST files state none and are kept)")
        self.count = QLabel("", objectName="rowCount", textFormat=Qt.TextFormat.PlainText)

        grid = QGridLayout()
        grid.addWidget(self.survey, 0, 0)
        grid.addWidget(self.cls, 0, 1)
        grid.addWidget(self.state, 0, 2)
        grid.addWidget(self.z_min, 1, 0)
        grid.addWidget(self.z_max, 1, 1)
        grid.addWidget(self.snr_min, 1, 2)
        grid.addWidget(self.text, 2, 0, 1, 2)
        grid.addWidget(self.triage, 2, 2)
        grid.addWidget(self.unusable, 3, 0, 1, 2)
        grid.addWidget(self.zwarn, 3, 2)
        grid.addWidget(self.z_err_max, 4, 0)
        grid.addWidget(self.deltachi2_min, 4, 1)

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
        self.table.setColumnWidth(0, NAME_WIDTH)  # narrowed to the panel by `fit_name_column` (elided at the left)
        self._fitting = False
        self._name_auto = True  # the name column follows the panel's width until the vetter drags it
        self.table.horizontalHeader().sectionResized.connect(self._section_resized)
        # long survey file names differ at their end (LAMOST MRS: …_sp01-015.fits#14): keep the end visible
        # (elided in the middle, a narrow column showed "spec-6…its.gz" on every row: the end is what differs)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        self.table.setWordWrap(False)  # wrapped at its hyphens, a name showed only its first piece in a row's height
        fm = self.table.fontMetrics()
        widest = {"model": "YES (demo)", "confidence": "abstained", "decision": "UNSURE"}  # never elided
        for name, width in (("model", 60), ("confidence", 64), ("decision", 62), ("survey", 62), ("cls", 60),
                            ("subclass", 60), ("redshift", 70), ("snr", fm.horizontalAdvance(SNR_LABEL) + 14),
                            ("survey_snr", fm.horizontalAdvance("Survey S/N") + 14), ("z_err", 60), ("zwarn", 52),
                            ("deltachi2", 60)):
            text = widest.get(name)
            self.table.setColumnWidth(COL[name], max(width, fm.horizontalAdvance(text) + 14) if text else width)
        self.confidence_delegate = ConfidenceDelegate(self.table)
        self.table.setItemDelegateForColumn(COL["confidence"], self.confidence_delegate)
        self.table.setAlternatingRowColors(True)
        # The table's current row and the viewer are one state: whatever makes a row current (a click, the arrow
        # keys, Page Down, typing a name's first letters) shows that spectrum, and the decision keys act on it.
        self.table.selectionModel().currentRowChanged.connect(self._current_row_changed)

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
        for w in (self.cls, self.z_min, self.z_max, self.snr_min, self.z_err_max, self.deltachi2_min, self.text):
            w.textChanged.connect(lambda _t: self._debounce.start())
        self.survey.currentIndexChanged.connect(lambda _i: self.apply_filters())
        self.state.currentIndexChanged.connect(lambda _i: self.apply_filters())
        self.unusable.toggled.connect(lambda _c: self.apply_filters())
        self.zwarn.toggled.connect(lambda _c: self.apply_filters())
        self.triage.currentIndexChanged.connect(lambda _i: self.apply_triage())
        self.table.horizontalHeader().sortIndicatorChanged.connect(self._column_sorted)
        model.modelReset.connect(self.update_count)
        model.rowsInserted.connect(lambda *_: self.update_count())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit_name_column()

    def fit_name_column(self) -> None:
        """Narrow the name column (down to `NAME_MIN_WIDTH`, elided at the left: the end of a name differs) so that name, model, p(YES) and
        decision fit the panel: at 1366 px the Decision header was cut off at the panel's edge."""
        if not self._name_auto:
            return
        others = sum(self.table.columnWidth(COL[name]) for name in ("model", "confidence", "decision"))
        width = max(NAME_MIN_WIDTH, min(NAME_WIDTH, self.table.viewport().width() - others))
        if width != self.table.columnWidth(0):
            self._fitting = True
            self.table.setColumnWidth(0, width)
            self._fitting = False

    def _section_resized(self, column: int, _old: int, _new: int) -> None:
        if column == 0 and not self._fitting:
            self._name_auto = False  # the vetter's own width is kept

    def _current_row_changed(self, current, _previous) -> None:
        if current.isValid():
            self.rowActivated.emit(current.row())

    def filters(self) -> Filters:
        survey = self.survey.currentText()
        return Filters(
            survey=None if survey == ANY_SURVEY else survey,
            cls=self.cls.text().strip() or None,
            z_min=_float(self.z_min.text()), z_max=_float(self.z_max.text()), snr_min=_float(self.snr_min.text()),
            text=self.text.text().strip() or None, state=self.state.currentText(),
            include_unusable=self.unusable.isChecked(), zwarn_clean=self.zwarn.isChecked(),
            z_err_max=_float(self.z_err_max.text()), deltachi2_min=_float(self.deltachi2_min.text()),
        )

    def reset_filters(self, surveys: list[str]) -> Filters:
        """Clear every filter and the triage order for a newly opened archive, whose own surveys the survey box
        then lists (a filter left from the last archive hid most of a new folder); returns the filters to use."""
        widgets = (self.survey, self.cls, self.z_min, self.z_max, self.snr_min, self.text, self.state, self.triage,
                   self.unusable, self.zwarn, self.z_err_max, self.deltachi2_min)
        for w in widgets:
            w.blockSignals(True)
        try:
            self.survey.clear()
            self.survey.addItems([ANY_SURVEY, *surveys])
            for line in (self.cls, self.z_min, self.z_max, self.snr_min, self.z_err_max, self.deltachi2_min, self.text):
                line.clear()
            self.state.setCurrentIndex(0)
            self.triage.setCurrentIndex(ORDERS.index("queue"))
            self.unusable.setChecked(False)
            self.zwarn.setChecked(False)
        finally:
            for w in widgets:
                w.blockSignals(False)
        self._debounce.stop()
        self.model.triage_order = "queue"
        return self.filters()

    def show_filters(self, filters: Filters, order: str) -> Filters:
        """Set the filter widgets and the triage box to ``filters`` and ``order`` (a reopened session), without
        applying them; returns the filters the widgets now say (a survey this archive lacks reads as any)."""
        widgets = (self.survey, self.cls, self.z_min, self.z_max, self.snr_min, self.text, self.state, self.triage,
                   self.unusable, self.zwarn, self.z_err_max, self.deltachi2_min)
        for w in widgets:
            w.blockSignals(True)
        try:
            self.survey.setCurrentIndex(max(self.survey.findText(filters.survey or ANY_SURVEY), 0))
            self.cls.setText(filters.cls or "")
            self.zwarn.setChecked(filters.zwarn_clean)
            for line, value in ((self.z_min, filters.z_min), (self.z_max, filters.z_max),
                                (self.snr_min, filters.snr_min), (self.z_err_max, filters.z_err_max),
                                (self.deltachi2_min, filters.deltachi2_min)):
                line.setText("" if value is None else f"{value:g}")
            self.text.setText(filters.text or "")
            self.state.setCurrentIndex(max(self.state.findText(filters.state), 0))
            self.triage.setCurrentIndex(max(self.triage.findData(order), 0))
            self.unusable.setChecked(filters.include_unusable)
        finally:
            for w in widgets:
                w.blockSignals(False)
        self._debounce.stop()
        self.model.triage_order = self.triage.currentData()
        return self.filters()

    def apply_filters(self) -> None:
        self._debounce.stop()
        self.model.set_filters(self.filters())
        self.filtersChanged.emit()

    def apply_triage(self) -> None:
        """Order the queue as the triage box says (a column sort indicator is cleared first)."""
        order = self.triage.currentData()
        if order != "queue":
            header = self.table.horizontalHeader()
            header.blockSignals(True)
            header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
            header.blockSignals(False)
        self.model.set_triage(order)
        self.filtersChanged.emit()

    def _column_sorted(self, column: int, _order) -> None:
        if column >= 0 and self.triage.currentData() != "queue":
            self.triage.blockSignals(True)  # the model dropped the triage order for the column sort
            self.triage.setCurrentIndex(ORDERS.index("queue"))
            self.triage.blockSignals(False)

    def update_count(self) -> None:
        loaded, total = self.model.loaded_rows(), self.model.total_hint()
        source = "candidate list" if self.model.is_candidate_list else "index"
        active = self.model.filters.describe()
        self.count.setText(f"{loaded:,} loaded of {total:,} ({source})" + (f" · filtered: {active}" if active else ""))

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

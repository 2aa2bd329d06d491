"""The interactive spectrum viewer (pyqtgraph).

What it draws, for the human (the model's images come from `speco3.render`, unchanged):

* flux, optionally boxcar-smoothed (inverse-variance weighted, masked pixels excluded);
* the 1σ noise level from ivar (a light-blue line), masked pixels shaded red, telluric bands shaded grey (observed frame);
* line markers with labels that follow the redshift and the frame: the current task's lines or a line list chosen
  in the line bar independent of the task (QSO, galaxy emission / absorption, stars by type, the user's own
  CSV/ECSV file; `speco3.spectra.linelists`), optionally with night-sky lines (observed frame), drawn at a z the
  vetter types or slides (the catalogue z until then), in air for spectra in air; laid out in up to
  three rows so that none overlap at the current zoom (labels that fit nowhere are hidden; re-laid out on zoom,
  pan and resize; the marker's tooltip still names the line); a rest-frame marker dragged sideways takes every
  marker with it (the z follows, `markerDragged` when let go), and `centroid_z` measures the z from the line in
  view;
* a y-range spanning the good pixels in the visible x-range except isolated one-pixel spikes and noisy ends
  (`speco3.gui.lines.display_range`): no real line or steep continuum is cut, and cosmic rays and ragged edges
  never squash the plot; mouse drag/wheel pan and zoom in wavelength; a y-range by hand (`zoom_y`, `pan_y`,
  Shift+drag, dragging the flux axis) stays until `auto_y_range` or `reset_zoom`;
* a header stating object, class, z, S/N, frame and the wavelength medium (air / vacuum);
* the evidence windows the vetter marked (`set_evidence`; kept in the observed frame, drawn in the frame shown),
  shaded green and numbered with their labels, laid out in rows so that overlapping windows' labels never cover
  each other, and kept inside the plot while any part of the window is in view.
"""

from __future__ import annotations

import logging

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSlider,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from speco3.agent.tasks import Line, Task
from speco3.gui.dialogs import dialogs_off
from speco3.gui.labels import MarkerLabel, WrapLabel
from speco3.gui.lines import (
    TELLURIC_BANDS,
    air_to_vac,
    boxcar,
    display_range,
    label_rows,
    lines_for_task,
    mask_runs,
)
from speco3.gui.text import esc, literal, tooltip
from speco3.render.layout import nonsingular
from speco3.spectra.linelists import (
    LineList,
    LineListError,
    builtin_line_lists,
    line_centroid,
    marker_position,
    marker_z,
    read_line_list,
)
from speco3.spectra.model import ERROR_SPECTRUM_NOTE, Frame, Spectrum, pipeline_fit, to_frame, within_limits
from speco3.vetting.records import Evidence

log = logging.getLogger(__name__)

SMOOTH_WIDTHS = (1, 3, 5, 9, 15, 25, 41)
FLUX_PEN = pg.mkPen((31, 90, 200), width=1)
MODEL_PEN = pg.mkPen((215, 90, 20), width=1.5)  # the survey pipeline's best-fit model (SDSS's model column)
SIGMA_PEN = pg.mkPen(120, 150, 220, 200, width=1)  # the 1σ noise level (a line: a band between two edges cost
# 2-3x the whole switch to fill, and pyqtgraph's fill-between gives up on curves with gaps)
MASK_BRUSH = pg.mkBrush(230, 60, 60, 45)
TELLURIC_BRUSH = pg.mkBrush(120, 120, 120, 35)
HIGHLIGHT_BRUSH = pg.mkBrush(255, 190, 0, 70)
EVIDENCE_BRUSH = pg.mkBrush(40, 170, 90, 45)
EVIDENCE_PEN = pg.mkPen(30, 130, 70, 160, width=1)
EVIDENCE_LABEL_AT = 0.2  # rows of evidence labels, stacked up from here (the bottom of row 0, a share of the view
# height from the bottom): above the telluric band labels
LINE_PEN = pg.mkPen((20, 140, 60), width=1, style=pg.QtCore.Qt.PenStyle.DashLine)
LINE_HOVER_PEN = pg.mkPen((20, 140, 60), width=3)  # a marker under the mouse: drag it and every marker follows
LABEL_ROWS = 3  # rows of line labels, stacked down from the top (row 0 at LABEL_TOP of the view height)
LABEL_TOP = 0.97
TELLURIC_ROWS = 2  # rows of telluric band labels, stacked up from the bottom (row 0 at TELLURIC_BOTTOM)
TELLURIC_BOTTOM = 0.04
LABEL_FILL = pg.mkBrush(255, 255, 255, 210)  # labels stay legible where another marker crosses them
TASK_LINES = "task"  # the line-list box's entry for the current task's lines (`lines_for_task`)
OWN_FILE = "open"  # its entry that reads the user's own file
Z_SLIDER_STEPS = 1000  # the z slider spans ±Z_SLIDER_SPAN (1 + z) about the z it was centred on
Z_SLIDER_SPAN = 0.02
LINE_NOTE_MAX = 150  # px the line bar keeps for its note ("markers in vacuum"); a longer one is cut, whole in its tooltip


def flux_axis_label(spectrum: Spectrum) -> str:
    """The y-axis label: what the values are (an error spectrum's are errors) and the flux unit as the file states
    it; a file that states none says so (LAMOST's files state none: their flux is calibrated relatively, against
    the flux standard stars their FSTAR names, not in physical units)."""
    what = "Flux error (σ)" if (spectrum.meta.note or "").startswith(ERROR_SPECTRUM_NOTE) else "Flux"
    unit = spectrum.flux_unit.strip()
    if unit.lower().startswith("flux"):  # a unit string that names the quantity ("Flux (10^-17 erg/s/cm^2/Ang)")
        return f"Flux error: {unit}" if what != "Flux" else unit
    if unit:
        return f"{what} ({unit})"
    relative = (spectrum.meta.survey or "").upper().startswith("LAMOST")
    return f"{what} ({'relative; ' if relative else ''}no unit in the file)"



def finite_curve(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """``setData``'s ``x``, ``y`` and ``connect`` for a curve: only the finite points, each joined to the next only when the two are
    neighbouring pixels, so a masked pixel stays a gap. pyqtgraph's peak downsampling (the full view of a long
    spectrum) takes each bin's max and min, which a NaN left in the data turns into NaN: a spectrum with masked
    pixels scattered through it then drew no line at all at full view."""
    keep = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    connect = np.zeros(keep.size, dtype=bool)
    connect[:-1] = np.diff(keep) == 1
    return {"x": x[keep], "y": y[keep], "connect": connect}

class PlotBars(pg.BarGraphItem):
    """Shaded wavelength ranges (masks, telluric bands). The plot item lists them with its curves, and its context
    menu applies downsampling, clipping, FFT mode and alpha to every one of those: bars (a rectangle per range) have
    nothing to thin or transform, and take the alpha as their opacity."""

    def setDownsampling(self, *args, **kwargs) -> None:  # noqa: N802 - pyqtgraph's curve API
        pass

    def setClipToView(self, *args, **kwargs) -> None:  # noqa: N802
        pass

    def setFftMode(self, *args, **kwargs) -> None:  # noqa: N802
        pass

    def setAlpha(self, alpha: float, auto: bool = False) -> None:  # noqa: N802
        self.setOpacity(alpha)


class SpectrumViewBox(pg.ViewBox):
    """The plot's view box: dragging and the wheel in the plot move the wavelength axis only (the flux axis follows
    the data, `display_range`); Shift+drag in the plot, or dragging / the wheel over the flux axis, moves the
    y-range by hand (`SpectrumViewer.y_manual`)."""

    def mouseDragEvent(self, ev, axis=None) -> None:  # noqa: N802 - pyqtgraph's API
        if axis is None and not ev.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            axis = 0
        super().mouseDragEvent(ev, axis)

    def wheelEvent(self, ev, axis=None) -> None:  # noqa: N802
        super().wheelEvent(ev, 0 if axis is None else axis)


class SpectrumViewer(QWidget):
    """Plot of one spectrum with smoothing, error band, masks, telluric bands and line markers.

    Signals
    -------
    viewChanged(str)
        A one-line description of the state (frame, smoothing), for the status bar.
    """

    viewChanged = Signal(str)
    #: A line marker was dragged and let go: the markers' new z and the line's name (the owner takes it as the
    #: vetter's z).
    markerDragged = Signal(float, str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.spectrum: Spectrum | None = None
        self.frame: Frame = "observed"
        self.smooth_index = 0
        self.show_lines = True
        self.show_sigma = True
        self.show_model = True  # the pipeline's model spectrum, where the file has one (key M)
        self._lines: tuple[Line, ...] = lines_for_task(None)  # the task's lines
        #: Which lines are marked: TASK_LINES, a key of `builtin_line_lists`, or "file:PATH" (the user's file).
        self.line_choice = TASK_LINES
        self.own_list: LineList | None = None
        self.show_sky = False
        #: The redshift the rest-frame line markers are drawn at: None follows the spectrum's catalogue z.
        self.z_lines: float | None = None
        self._z_centre = 0.0
        self._line_problem = ""  # why the user's line list could not be read (shown in the line bar)
        self._x = self._y = self._sig = np.empty(0)
        self._mask_runs = np.empty((0, 2))  # (lo, hi) of the masked runs, drawn by one bar item
        self._line_items: list[pg.InfiniteLine] = []
        self._line_of: dict[int, tuple[Line, Frame]] = {}  # id of a marker item -> the line it marks, its list's frame
        self._dragging: str | None = None  # the name of the line whose marker is being dragged
        self._telluric_labels: list[MarkerLabel] = []
        self._telluric_key: tuple | None = None
        self._axis_frame = ""
        self._axis_y = "Flux"
        self._quiet = False  # set while _redraw changes the x-range: it updates y-range and labels itself
        self.highlight: pg.LinearRegionItem | None = None
        self.evidence: list[Evidence] = []  # the vetter's marked windows, observed frame
        self._evidence_items: list[pg.LinearRegionItem] = []

        self.header = WrapLabel("No spectrum")
        self.header.setObjectName("viewerHeader")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)  # our markup; every value in it is escaped (_update_header)
        # room for two lines whatever the spectrum: a header that changes height would resize the plot on every switch
        self.header.setMinimumHeight(2 * self.header.fontMetrics().lineSpacing() + 4)
        self.plot = pg.PlotWidget(background="w", viewBox=SpectrumViewBox())
        self.plot.setObjectName("spectrumPlot")
        pi = self.plot.getPlotItem()
        pi.showGrid(x=True, y=True, alpha=0.15)
        pi.setLabel("left", "Flux")
        pi.setLabel("bottom", "Wavelength (Å)")
        for name in ("left", "bottom", "right", "top"):  # no units, so no SI prefix: spares re-setting each axis
            pi.getAxis(name).enableAutoSIPrefix(False)  # label's HTML on each range (the hidden axes' too)
        for name in ("left", "bottom"):
            # major and minor ticks and grid lines; the third level (faint lines between the minor ones) cost a
            # third of each repaint in Python tick specs and blended lines
            pi.getAxis(name).setStyle(maxTickLevel=1)
        # the flux axis grows to its widest tick labels and never shrinks back: an axis whose width follows each
        # spectrum's labels re-lays out the plot (resizing the view and everything in it) on many switches
        pi.getAxis("left").setStyle(autoReduceTextSpace=False)
        self.vb = pi.getViewBox()
        self.vb.setMouseEnabled(x=True, y=True)  # y by Shift+drag or over the flux axis only (SpectrumViewBox)
        self.vb.enableAutoRange(x=False, y=False)
        #: The y-range the vetter set by hand (keys, dragging), kept across zooms and pans until
        #: `auto_y_range`, `reset_zoom` or another spectrum; None: the automatic range of the visible data (`display_range`).
        self.y_manual: tuple[float, float] | None = None
        self._setting_y = False  # set while the viewer itself sets the y-range
        self.vb.sigXRangeChanged.connect(self._update_y_range)
        self.vb.sigYRangeChanged.connect(self._y_range_changed)
        self.vb.sigXRangeChanged.connect(self._layout_labels)
        self.vb.sigResized.connect(self._layout_labels)
        self.sigma = pg.PlotDataItem(pen=SIGMA_PEN)
        self.curve = pg.PlotDataItem(pen=FLUX_PEN)
        # beyond the view's pixel count, curves are drawn peak-downsampled and clipped to the visible range. Set on
        # the plot item: it imposes its own modes on every curve added to it (constructor keywords were overridden
        # by them, so nothing was downsampled). Peak downsampling keeps each bin's maximum and minimum, so one bin
        # per device pixel draws the strokes every pixel would; pyqtgraph's default factor keeps five bins a
        # pixel, five times the path to build and stroke.
        pi.setDownsampling(auto=True, mode="peak")
        pi.setClipToView(True)
        self.curve.opts["autoDownsampleFactor"] = max(1.0, self.devicePixelRatioF())
        self.mask_bars = PlotBars(x0=[], x1=[], y0=[], y1=[], pen=pg.mkPen(None), brush=MASK_BRUSH)
        self.telluric_bars = PlotBars(x0=[], x1=[], y0=[], y1=[], pen=pg.mkPen(None), brush=TELLURIC_BRUSH)
        self._telluric_x = np.empty((0, 2))
        for bars in (self.mask_bars, self.telluric_bars):
            bars.setZValue(-10)
            pi.addItem(bars)
        self.sigma.opts["autoDownsampleFactor"] = self.curve.opts["autoDownsampleFactor"]
        self.sigma.setZValue(-5)
        pi.addItem(self.sigma)
        pi.addItem(self.curve)
        self.model_curve = pg.PlotDataItem(pen=MODEL_PEN, name="pipeline model")
        self.model_curve.opts["autoDownsampleFactor"] = self.curve.opts["autoDownsampleFactor"]
        pi.addItem(self.model_curve)
        self.legend = pg.LegendItem(offset=(-10, 30), labelTextColor=(60, 60, 60), brush=pg.mkBrush(255, 255, 255, 200))
        self.legend.setParentItem(self.vb)
        self.legend.addItem(self.model_curve, "pipeline model (M)")
        self.legend.setVisible(False)
        # an entry that cannot be shown (unreadable file, no spectrum in it) says why in place of the plot, never
        # over the previous spectrum's axes
        self.notice = QLabel("", objectName="viewerNotice", wordWrap=True,
                             alignment=Qt.AlignmentFlag.AlignCenter, textFormat=Qt.TextFormat.PlainText)
        self.notice.setStyleSheet("background:white; color:#7a1f1f; font-size:13pt; padding:24px")
        self.pages = QStackedWidget(objectName="viewerPages")
        self.pages.addWidget(self.plot)
        self.pages.addWidget(self.notice)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.header)
        layout.addWidget(self._line_bar())
        layout.addWidget(self.pages, 1)

    def _line_bar(self) -> QWidget:
        """Line list, sky lines, the z the markers are drawn at (typed or slid), and the medium they are in."""
        bar = QWidget(objectName="lineBar")
        row = QHBoxLayout(bar)
        row.setContentsMargins(4, 0, 4, 0)
        self.line_box = QComboBox(objectName="lineListBox")
        self.line_box.addItem("Task lines", TASK_LINES)
        for key, lst in builtin_line_lists().items():
            if lst.frame == "rest":
                self.line_box.addItem(lst.title, key)
                self.line_box.setItemData(self.line_box.count() - 1, f"Source: {lst.source}",
                                          Qt.ItemDataRole.ToolTipRole)
        self.line_box.addItem("Own file (CSV/ECSV)…", OWN_FILE)
        self.line_box.setToolTip("Which lines to mark, independent of the task")
        self.line_box.activated.connect(self._line_box_chosen)
        self.sky_box = QCheckBox("Sky", objectName="skyLinesBox")
        self.sky_box.setToolTip("Night-sky lines ([O I] 5577, 6300, 6364; Na I; Hg I) in the observed frame. "
                                f"Source: {builtin_line_lists()['sky'].source}")
        self.sky_box.toggled.connect(self.set_show_sky)
        self.z_box = QDoubleSpinBox(objectName="lineZBox", decimals=5, minimum=-0.05, maximum=12.0, singleStep=0.001)
        self.z_box.setKeyboardTracking(False)
        self.z_box.setToolTip("The redshift the line markers are drawn at (the catalogue z until you change it)")
        self.z_box.valueChanged.connect(self.set_line_z)
        self.z_slider = QSlider(Qt.Orientation.Horizontal, objectName="lineZSlider")
        self.z_slider.setRange(0, Z_SLIDER_STEPS)
        self.z_slider.setValue(Z_SLIDER_STEPS // 2)
        self.z_slider.setMinimumWidth(60)  # the room the note needs comes from here
        self.z_slider.setToolTip(f"Slide the markers: ±{Z_SLIDER_SPAN:g}·(1+z) about the z typed")
        self.z_slider.valueChanged.connect(self._z_slid)
        self.z_reset = QToolButton(objectName="lineZReset", text="catalogue z")
        self.z_reset.setToolTip("Draw the markers at the spectrum's catalogue redshift again")
        self.z_reset.clicked.connect(lambda: self.set_line_z(None))
        self.line_note = QLabel("", objectName="lineNote", textFormat=Qt.TextFormat.PlainText)
        self.line_note.setStyleSheet("color:#555")
        # the note never widens the window (a long one is cut; its tooltip holds it all)
        self.line_note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.line_note.setMinimumWidth(60)
        for w, stretch in ((QLabel("Lines"), 0), (self.line_box, 0), (self.sky_box, 0), (QLabel("z"), 0),
                           (self.z_box, 0), (self.z_slider, 1), (self.z_reset, 0), (self.line_note, 1)):
            row.addWidget(w, stretch)
        return bar

    # -- public API ----------------------------------------------------------------------------------------------
    @property
    def smoothing(self) -> int:
        return SMOOTH_WIDTHS[self.smooth_index]

    def set_spectrum(self, spectrum: Spectrum | None, keep_range: bool = False, unavailable: str | None = None) -> None:
        """Show ``spectrum``; None clears the plot, and ``unavailable`` then says why in its place."""
        self.spectrum = spectrum
        if not keep_range:  # the markers follow the new spectrum's catalogue z
            self.z_lines = None
            self._z_centre = self.line_z()
            self._sync_z_widgets(centre=True)
        self._clear_highlight()
        self.set_evidence([])  # the owner shows the new spectrum's own windows
        self._redraw(reset_x=not keep_range)
        if spectrum is None and unavailable:
            self.notice.setText(f"This entry cannot be shown.\n\n{unavailable}")
            self.header.setText(f"<b>{esc(unavailable.split(': ', 1)[0])}</b> · cannot be shown")
            self.pages.setCurrentWidget(self.notice)
        elif spectrum is not None and spectrum.n_pixels == 0:
            self.notice.setText(f"{spectrum.name}: the file holds no pixels to draw.")
            self.pages.setCurrentWidget(self.notice)
        elif self.pages.currentWidget() is not self.plot:
            self.pages.setCurrentWidget(self.plot)

    def set_task(self, task: Task | None) -> None:
        """The lines of ``task`` (the generic list when None), marked while the line list is "Task lines"."""
        self._lines = lines_for_task(task)
        self._draw_lines()

    def set_line_list(self, choice: str) -> None:
        """Mark ``choice``'s lines: TASK_LINES, a key of `builtin_line_lists`, or the own file's "file:…" key."""
        if choice != TASK_LINES and choice not in builtin_line_lists() and \
                (self.own_list is None or choice != self.own_list.key):
            raise ValueError(f"no line list {choice!r}")
        self.line_choice = choice
        self._line_problem = ""
        i = self.line_box.findData(choice)
        if i >= 0 and i != self.line_box.currentIndex():
            self.line_box.setCurrentIndex(i)
        self._draw_lines()

    def load_line_list(self, path: str) -> bool:
        """Read the user's line list (CSV/ECSV) and mark it; False (the reason in the line bar) when unusable."""
        try:
            lst = read_line_list(path)
        except LineListError as exc:
            self._line_problem = str(exc)
            self.line_box.setCurrentIndex(max(0, self.line_box.findData(self.line_choice)))
            self._draw_lines()
            return False
        if self.own_list is not None:
            self.line_box.removeItem(self.line_box.findData(self.own_list.key))
        self.own_list = lst
        self.line_box.insertItem(self.line_box.count() - 1, lst.title, lst.key)
        self.line_box.setItemData(self.line_box.count() - 2, lst.source, Qt.ItemDataRole.ToolTipRole)
        self.set_line_list(lst.key)
        return True

    def _line_box_chosen(self, index: int) -> None:
        choice = self.line_box.itemData(index)
        if choice != OWN_FILE:
            self.set_line_list(choice)
            return
        path = "" if dialogs_off() else QFileDialog.getOpenFileName(
            self, "Line list", "", "Line lists (*.csv *.ecsv);;All files (*)")[0]
        if path:
            self.load_line_list(path)
        else:
            self.line_box.setCurrentIndex(max(0, self.line_box.findData(self.line_choice)))

    def set_show_sky(self, on: bool) -> None:
        self.show_sky = bool(on)
        if self.sky_box.isChecked() != self.show_sky:
            self.sky_box.setChecked(self.show_sky)
        self._draw_lines()

    def line_z(self) -> float:
        """The redshift the rest-frame markers are drawn at."""
        if self.z_lines is not None:
            return self.z_lines
        return self.spectrum.z if self.spectrum is not None else 0.0

    def set_line_z(self, z: float | None) -> None:
        """Draw the markers at redshift ``z`` (None: the catalogue z); the slider is centred on it."""
        self.z_lines = None if z is None or (self.spectrum is not None and z == self.spectrum.z) else float(z)
        self._z_centre = self.line_z()
        self._sync_z_widgets(centre=True)
        self._draw_lines()

    def _marker_dragged(self, item: pg.InfiniteLine) -> None:
        """A rest-frame marker is being dragged: the markers' z follows it (every marker moves with it)."""
        marked, s = self._line_of.get(id(item)), self.spectrum
        if marked is None or marked[1] != "rest" or s is None:
            return
        z = marker_z(marked[0], s.medium, float(item.value()), s.z, self.frame)
        if not self.z_box.minimum() <= z <= self.z_box.maximum():
            return
        self._dragging = marked[0].name
        self.z_lines = round(z, 5)
        self._sync_z_widgets(centre=False)
        self._draw_lines()

    def _marker_released(self, _item: pg.InfiniteLine) -> None:
        name, self._dragging = self._dragging, None
        if name is None:
            return
        self._z_centre = self.line_z()
        self._sync_z_widgets(centre=True)
        self.markerDragged.emit(self.line_z(), name)

    def centroid_z(self) -> tuple[float, Line, float] | str:
        """The markers' z from the centroid of the line in view (`line_centroid` over the visible window, unsmoothed
        good pixels): the rest-frame marker nearest the window's middle names the line. Returns (z, line, centroid
        on the axis shown), and draws the markers there; or a sentence saying why not."""
        s = self.spectrum
        if s is None or not self._x.size:
            return "no spectrum shown: no line to measure"
        lo, hi = self.x_range()
        mid = (lo + hi) / 2
        z_lines = self.line_z()
        near = [(abs(w - mid), ln) for ln, frame in self._marked_lines() if frame == "rest"
                and lo <= (w := marker_position(ln, s.medium, z_lines, s.z, self.frame)) <= hi]
        if not near:
            return "no line marker in view: zoom onto a marked line (its marker inside the plot), then measure"
        line = min(near, key=lambda t: t[0])[1]
        good = s.good & within_limits(self._x, s.flux)
        centre = line_centroid(self._x, s.flux, good, lo, hi, line.kind,
                               near=marker_position(line, s.medium, z_lines, s.z, self.frame))
        if centre is None:
            return f"{line.name}: no line to measure in {lo:.0f}–{hi:.0f} Å (too few good pixels or flat)"
        z = marker_z(line, s.medium, centre, s.z, self.frame)
        if not self.z_box.minimum() <= z <= self.z_box.maximum():
            return f"{line.name}: its centroid {centre:.1f} Å gives z = {z:.4f}, outside what the markers take"
        self.set_line_z(round(z, 5))
        return round(z, 5), line, centre

    def _z_slid(self, position: int) -> None:
        z = self._z_centre + (position / Z_SLIDER_STEPS * 2 - 1) * Z_SLIDER_SPAN * (1 + self._z_centre)
        self.z_lines = round(z, 5)
        self._sync_z_widgets(centre=False)
        self._draw_lines()

    def _sync_z_widgets(self, centre: bool) -> None:
        for w in (self.z_box, self.z_slider):
            w.blockSignals(True)
        try:
            self.z_box.setValue(self.line_z())
            if centre:
                self.z_slider.setValue(Z_SLIDER_STEPS // 2)
        finally:
            for w in (self.z_box, self.z_slider):
                w.blockSignals(False)

    def _marked_lines(self) -> list[tuple[Line, Frame]]:
        """The lines to mark now, each with the frame of its list."""
        if self.line_choice == TASK_LINES:
            out: list[tuple[Line, Frame]] = [(ln, "rest") for ln in self._lines]
        elif self.own_list is not None and self.line_choice == self.own_list.key:
            out = [(ln, self.own_list.frame) for ln in self.own_list.lines]
        else:
            out = [(ln, "rest") for ln in builtin_line_lists()[self.line_choice].lines]
        if self.show_sky:
            out += [(ln, "observed") for ln in builtin_line_lists()["sky"].lines]
        return out

    def _line_note_text(self) -> str:
        s = self.spectrum
        if s is None:
            return ""
        medium = {"air": "markers in air", "vacuum": "markers in vacuum"}.get(s.medium, "medium unknown: in vacuum")
        moved = "" if self.z_lines is None else f" · catalogue z {s.z:.5f}"
        return medium + moved

    def set_frame(self, frame: Frame) -> None:
        """Switch between ``"rest"`` and ``"observed"`` wavelengths, keeping the same physical window."""
        if frame not in ("rest", "observed") or frame == self.frame:
            return
        lo, hi = self.vb.viewRange()[0]
        lo, hi = self._in_frame(lo, hi, self.frame, frame)
        self.frame = frame
        self._redraw(reset_x=False)
        self._draw_evidence()
        if self.spectrum is not None:
            self.vb.setXRange(lo, hi, padding=0)

    def toggle_frame(self) -> None:
        self.set_frame("rest" if self.frame == "observed" else "observed")

    def smooth_more(self) -> None:
        self.set_smoothing_index(self.smooth_index + 1)

    def smooth_less(self) -> None:
        self.set_smoothing_index(self.smooth_index - 1)

    def set_smoothing_index(self, index: int) -> None:
        self.smooth_index = int(np.clip(index, 0, len(SMOOTH_WIDTHS) - 1))
        self._redraw(reset_x=False)

    def toggle_model(self) -> None:
        """Show or hide the survey pipeline's model spectrum (where the file has one)."""
        self.show_model = not self.show_model
        self._redraw(reset_x=False)

    def toggle_lines(self) -> None:
        self.show_lines = not self.show_lines
        self._draw_lines()

    def reset_zoom(self) -> None:
        """The whole spectrum, with the automatic y-range."""
        self._clear_highlight()
        self.y_manual = None
        x = self._x[within_limits(self._x)]
        if x.size:  # a single wavelength, or one repeated, gets matplotlib's widening instead of a zero-width range
            self.vb.setXRange(*nonsingular(float(x.min()), float(x.max())), padding=0.01)
        self._update_y_range()

    def auto_y_range(self) -> None:
        """Back to the automatic y-range (the x-range stays)."""
        self.y_manual = None
        self._update_y_range()
        self.viewChanged.emit(self.describe())

    def zoom_y(self, factor: float) -> None:
        """A manual y-range ``factor`` times the visible one (< 1 zooms in), about its centre."""
        lo, hi = self.y_range()
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * factor
        self._set_manual_y(mid - half, mid + half)

    def pan_y(self, fraction: float) -> None:
        """A manual y-range moved up (> 0) or down by ``fraction`` of its height."""
        lo, hi = self.y_range()
        step = (hi - lo) * fraction
        self._set_manual_y(lo + step, hi + step)

    def _set_manual_y(self, lo: float, hi: float) -> None:
        if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
            return
        self.vb.setYRange(lo, hi, padding=0)  # `_y_range_changed` records it as the manual range
        self.viewChanged.emit(self.describe())

    def _y_range_changed(self, *args) -> None:
        """A y-range the viewer did not set (keys, Shift+drag, the flux axis) is the vetter's: kept until reset."""
        if self._setting_y:
            return
        self.y_manual = self.y_range()
        self._draw_masks()

    def zoom(self, factor: float) -> None:
        """Zoom in (factor < 1) or out (factor > 1) about the centre of the visible range."""
        lo, hi = self.vb.viewRange()[0]
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * factor
        self.vb.setXRange(mid - half, mid + half, padding=0)

    def pan(self, fraction: float) -> None:
        lo, hi = self.vb.viewRange()[0]
        step = (hi - lo) * fraction
        self.vb.setXRange(lo + step, hi + step, padding=0)

    def x_range(self) -> tuple[float, float]:
        lo, hi = self.vb.viewRange()[0]
        return float(lo), float(hi)

    def y_range(self) -> tuple[float, float]:
        lo, hi = self.vb.viewRange()[1]
        return float(lo), float(hi)

    def visible_window(self) -> Evidence | None:
        """The visible x-range as an evidence window: observed frame, within the spectrum's wavelengths, to 0.1 Å
        (None without a spectrum or when the plot shows none of it)."""
        s = self.spectrum
        if s is None or not self._x.size:
            return None
        lo, hi = self.x_range()
        lo, hi = to_frame(lo, s.z, self.frame, "observed"), to_frame(hi, s.z, self.frame, "observed")
        wl = s.wavelength[np.isfinite(s.wavelength)]
        lo, hi = round(max(lo, float(wl.min())), 1), round(min(hi, float(wl.max())), 1)
        return Evidence(lo, hi) if lo < hi else None

    def _in_frame(self, lo: float, hi: float, frame: Frame, shown: Frame | None = None) -> tuple[float, float]:
        """``[lo, hi]`` given in ``frame`` as wavelengths of the frame shown (or of ``shown``)."""
        if self.spectrum is None:
            return lo, hi
        z, dst = self.spectrum.z, shown or self.frame
        return to_frame(lo, z, frame, dst), to_frame(hi, z, frame, dst)

    def zoom_to(self, lo: float, hi: float, frame: Frame = "observed") -> None:
        """Show the window ``[lo, hi]`` (Å in ``frame``) with a margin of 15 % each side."""
        lo, hi = self._in_frame(lo, hi, frame)
        pad = 0.15 * (hi - lo)
        self.vb.setXRange(lo - pad, hi + pad, padding=0)

    def show_window(self, lo: float, hi: float, frame: Frame = "rest", label: str = "") -> None:
        """Show the window ``[lo, hi]`` (Å in ``frame``) with the region highlighted (agent zooms are rest frame)."""
        self._clear_highlight()
        self.highlight = pg.LinearRegionItem(self._in_frame(lo, hi, frame), movable=False, brush=HIGHLIGHT_BRUSH)
        self.highlight.setZValue(-5)
        if label:  # keep a Python reference: PySide would otherwise drop the wrapper and its attributes
            self.highlight.label = pg.InfLineLabel(self.highlight.lines[0], literal(label), position=0.92,
                                                   anchors=[(0, 0), (0, 0)])
        self.plot.addItem(self.highlight)
        self.zoom_to(lo, hi, frame)

    def set_evidence(self, windows: list[Evidence]) -> None:
        """Shade the vetter's evidence windows (observed frame), numbered in order with their labels."""
        windows = list(windows)
        if windows == self.evidence:
            return
        self.evidence = windows
        self._draw_evidence()

    def _draw_evidence(self) -> None:
        for item in self._evidence_items:
            self.plot.removeItem(item)
            self.vb.scene().removeItem(item.label)
        self._evidence_items = []
        if self.spectrum is None:
            return
        for i, e in enumerate(self.evidence):
            lo, hi = self._in_frame(e.lo, e.hi, "observed")
            item = pg.LinearRegionItem((lo, hi), movable=False, brush=EVIDENCE_BRUSH, pen=EVIDENCE_PEN)
            item.setZValue(-6)
            text = f"{i + 1}" + (f" {e.label}" if e.label else "")
            # referenced, see show_window; laid out with the other labels (`_layout_labels`): in rows in the lower
            # part of the plot, above the telluric band labels and clear of the line labels at its top, on a white
            # ground where they cross the spectrum
            item.label = MarkerLabel(text, (20, 100, 50), lo, LABEL_FILL)
            item.label.anchor_end = hi
            item.label.setParentItem(self.vb)
            self.plot.addItem(item)
            self._evidence_items.append(item)
        self._layout_labels()

    # -- drawing -------------------------------------------------------------------------------------------------
    def _clear_highlight(self) -> None:
        if self.highlight is not None:
            self.plot.removeItem(self.highlight)
            self.highlight = None

    def _redraw(self, reset_x: bool) -> None:
        """Update the existing items in place (`setData`, `setRegion`, ...) and set x and y ranges in one step."""
        s = self.spectrum
        if s is None or s.n_pixels == 0:
            self.curve.setData([], [])
            self.sigma.setData([], [])
            self.model_curve.setData([], [])
            self.legend.setVisible(False)
            self._x = self._y = self._sig = np.empty(0)
            self._mask_runs = np.empty((0, 2))
            self.header.setText("No spectrum")
            self._draw_lines()
            self._draw_telluric()
            self._draw_masks()
            return
        x = s.rest_wavelength() if self.frame == "rest" else s.wavelength
        good = s.good & within_limits(x, s.flux)  # beyond ±1e150 (a spectrum not from a reader) counts as bad
        y, sig = boxcar(s.flux, good, self.smoothing, s.ivar)
        x = np.where(within_limits(x), x, np.nan)
        self._x, self._y = x, y
        self._sig = sig if sig is not None else np.empty(0)
        self.curve.setData(**finite_curve(x, y))
        if sig is not None and self.show_sigma:
            self.sigma.setData(**finite_curve(x, sig))
        else:
            self.sigma.setData([], [])
        if s.model is not None and self.show_model:  # smoothed as the flux is, so that the two compare
            self.model_curve.setData(**finite_curve(x, boxcar(s.model, good, self.smoothing)[0]))
            self.legend.setVisible(True)
        else:
            self.model_curve.setData([], [])
            self.legend.setVisible(False)
        runs = np.asarray(mask_runs(~good), dtype=np.intp).reshape(-1, 2)
        if runs.size:
            last = len(x) - 1
            a, b = runs[:, 0], np.minimum(runs[:, 1], last)
            self._mask_runs = np.column_stack([x[a] - 0.5 * np.abs(x[np.minimum(a + 1, last)] - x[a]), x[b]])
        else:
            self._mask_runs = np.empty((0, 2))
        self._draw_telluric()
        self._draw_lines(layout=False)
        self._update_header()
        if reset_x:
            self._quiet = True  # the range handlers run once below, even when the x-range is unchanged
            try:
                self.reset_zoom()
            finally:
                self._quiet = False
        self._update_y_range()
        self._layout_labels()
        self.vb.updateMatrix()  # move the markers' labels now, not during the paint (which would then paint twice)
        self.viewChanged.emit(self.describe())

    def _draw_masks(self) -> None:
        """Masked runs and telluric bands as bars over the visible y-range: one item each, whatever their number."""
        lo, hi = self.vb.viewRange()[1]
        for bars, r in ((self.mask_bars, self._mask_runs), (self.telluric_bars, self._telluric_x)):
            bars.setOpts(x0=r[:, 0], x1=r[:, 1], y0=np.full(len(r), lo), y1=np.full(len(r), hi))

    def _draw_telluric(self) -> None:
        """Telluric bands (observed frame, air; shifted to vacuum / rest as needed), labelled at their blue edge."""
        if not self._telluric_labels:
            for _lo, _hi, name in TELLURIC_BANDS:
                label = MarkerLabel(f"⊕ {name}", (110, 110, 110))
                label.setParentItem(self.vb)
                self._telluric_labels.append(label)
        s = self.spectrum
        key = (s is not None, s.z if s is not None and self.frame == "rest" else 0.0,
               s is not None and s.medium == "vacuum")
        if key == self._telluric_key:  # the same bands as for the previous spectrum: nothing to move
            return
        self._telluric_key = key
        bands = np.array([(lo, hi) for lo, hi, _name in TELLURIC_BANDS], dtype=float)
        if s is not None and s.medium == "vacuum":
            bands = np.asarray(air_to_vac(bands), dtype=float)
        if s is not None:
            bands = to_frame(bands, s.z, "observed", self.frame)
        self._telluric_x = bands if s is not None else np.empty((0, 2))
        for label, (lo, hi) in zip(self._telluric_labels, bands, strict=True):
            label.anchor, label.anchor_end = float(lo), float(hi)
            label.setVisible(s is not None)

    def _draw_lines(self, layout: bool = True) -> None:
        """Line markers of the chosen list at the markers' z (`marker_position`); items are reused across spectra."""
        s = self.spectrum
        wanted = self._marked_lines() if s is not None and self.show_lines else []
        while len(self._line_items) > len(wanted):
            item = self._line_items.pop()
            self._line_of.pop(id(item), None)
            self.plot.removeItem(item)
            self.vb.scene().removeItem(item.label)
        z_lines = self.line_z()
        medium, z = (s.medium, s.z) if s is not None else ("air", 0.0)  # (no line is wanted without a spectrum)
        for i, (line, list_frame) in enumerate(wanted):
            w = marker_position(line, medium, z_lines, z, self.frame, list_frame)
            if i < len(self._line_items):
                item = self._line_items[i]
                if self._line_of.get(id(item)) != (line, list_frame):
                    self._line_of[id(item)] = (line, list_frame)
                    item.setMovable(list_frame == "rest")  # sky lines stay where the sky puts them
                if item.label.format != line.name:
                    item.label.setFormat(line.name)
                    item.setToolTip(tooltip(line.name))
                if item.value() != w:
                    item.setValue(w)
                item.label.anchor = w
                continue
            item = pg.InfiniteLine(w, angle=90, pen=LINE_PEN, hoverPen=LINE_HOVER_PEN, movable=list_frame == "rest")
            item.label = MarkerLabel(line.name, (20, 120, 50), w, LABEL_FILL)  # referenced, see show_window
            item.label.setParentItem(self.vb)
            item.setZValue(-2)
            item.setToolTip(tooltip(line.name))
            item.sigDragged.connect(self._marker_dragged)
            item.sigPositionChangeFinished.connect(self._marker_released)
            self.plot.addItem(item)
            self._line_items.append(item)
            self._line_of[id(item)] = (line, list_frame)
        note = self._line_problem or self._line_note_text()
        if self.line_note.text() != note:
            self.line_note.setText(note)
            self.line_note.setToolTip(note)
            # room for a short note ("markers in vacuum", cut at 1366 px by the slider's share), not a long one
            need = self.line_note.fontMetrics().horizontalAdvance(note) + 4
            self.line_note.setMinimumWidth(max(60, min(need, LINE_NOTE_MAX)))
        if layout:
            self._layout_labels()

    def _layout_labels(self, *args) -> None:
        """Put each label in the first free row of its group at the current zoom (`label_rows`): line labels from
        the top (what fits nowhere is hidden), telluric band labels from the bottom, evidence labels above those
        (as many rows as windows: every one is shown). A band's or window's label stays inside the plot wherever
        the visible part of its range is."""
        if self._quiet:
            return
        (lo, hi), width, height = self.vb.viewRange()[0], float(self.vb.width()), float(self.vb.height())
        if hi <= lo or width <= 0 or height <= 0:
            return
        tellurics = [label for label in self._telluric_labels if self.spectrum is not None]
        evidence = [item.label for item in self._evidence_items]
        # (labels, rows, base): base None stacks rows down from LABEL_TOP, a number stacks them up from that height
        for labels, n_rows, base in (([i.label for i in self._line_items], LABEL_ROWS, None),
                                     (tellurics, TELLURIC_ROWS, TELLURIC_BOTTOM),
                                     (evidence, len(evidence), EVIDENCE_LABEL_AT)):
            if not labels:
                continue
            xs = [(label.anchor - lo) / (hi - lo) * width for label in labels]
            widths = [label.boundingRect().width() for label in labels]
            if base is None:  # a line's label starts at its line
                xs = [x if -1.0 <= x <= width else float("nan") for x in xs]
            else:  # a range's label stays inside the plot wherever the visible part of the range is
                ends = [(label.anchor_end - lo) / (hi - lo) * width for label in labels]
                xs = [min(max(x, 0.0), width - w - 4) if x <= width and end >= 0 else float("nan")
                      for x, end, w in zip(xs, ends, widths, strict=True)]
            for label, x, row in zip(labels, xs, label_rows(xs, widths, n_rows), strict=True):
                label.setVisible(row is not None)
                if row is None:
                    continue
                h = label.boundingRect().height()  # rows are one label high apart: rows never overlap
                if base is None:
                    y = (1 - LABEL_TOP) * height + row * h
                    label.orthoPos = LABEL_TOP if row == 0 else 1 - y / height
                else:
                    y = base * height + (row + 1) * h  # the label's top; it sits above its anchor
                    label.orthoPos = base if row == 0 else (y - h) / height
                    y = height - y
                label.setPos(x + 2, y)

    def _update_y_range(self, *args) -> None:
        if not self._x.size or self._quiet:
            return
        if self.y_manual is not None:
            rng: tuple[float, float] | None = self.y_manual
        else:
            lo, hi = self.vb.viewRange()[0]
            sel = (self._x >= lo) & (self._x <= hi)
            rng = display_range(self._y[sel] if sel.any() else self._y)
        if rng is not None and rng != self.y_range():
            self._setting_y = True
            try:
                self.vb.setYRange(*rng, padding=0)
            finally:
                self._setting_y = False
        self._draw_masks()

    def _update_header(self) -> None:
        s = self.spectrum
        if s is None:
            return
        m = s.meta
        # every value here comes from the file: escaped (speco3.gui.text), only the bold/italic markup is ours
        parts = [f"<b>{esc(s.name)}</b>"]
        if m.survey:  # a release that already names the survey ("LAMOST DR7") is not prefixed with it again
            release = m.data_release or ""
            parts.append(esc(release if release.upper().startswith(m.survey.upper())
                             else f"{m.survey} {release}".strip()))
        if m.cls:
            parts.append(esc(f"{m.cls} {m.subclass or ''}".strip()))
        fit = pipeline_fit(m)  # the pipeline's fit beside its class and z: error, warning bits, Δχ²
        if m.redshift is None:  # e.g. a DESI coadd without its redrock file: say so rather than show z = 0
            parts.append("z unknown (lines at z = 0)")
        else:
            err = f" ± {fit.z_err:.1g}" if fit.z_err is not None else ""
            parts.append(f"z = {s.z:.5f}{err}" + (f" ({esc(m.redshift_source)})" if m.redshift_source else ""))
        if fit.zwarn is not None:
            parts.append(f"{esc(fit.zwarn_name)} {fit.zwarn}" + ("" if fit.zwarn == 0 else " ⚠"))
        if fit.deltachi2 is not None:
            parts.append(f"Δχ² {fit.deltachi2:.0f}")
        if m.snr is not None:  # one definition for every survey (SNR_DEFINITION: the table's header and tooltip
            parts.append(f"S/N {m.snr:.1f}")  # name it; spelled out here it wrapped the header to a third line)
        medium = {"air": "air", "vacuum": "vacuum"}.get(s.medium, "medium unknown (lines in vacuum)")
        parts.append(f"{self.frame} frame · wavelengths in {medium}")
        if s.masked_fraction > 0:
            parts.append(f"{100 * s.masked_fraction:.1f} % masked")
        if self.smoothing > 1:
            parts.append(f"smoothed over {self.smoothing} px")
        if m.note:  # the reader's own word on it: "error spectrum (its flux spectrum is …)", "sky fibre"
            parts.append(f"<i>{esc(m.note)}</i>")
        if fit.no_model and s.model is None:  # DESI: why redrock's fit is not drawn (last: the rest comes first)
            parts.append(f"<i>{esc(fit.no_model)}</i>")
        self.header.setText(" · ".join(parts))
        y_label = flux_axis_label(s)
        if self._axis_y != y_label:  # a new axis label re-lays out the whole plot: only when it changes
            self._axis_y = y_label
            self.plot.getPlotItem().setLabel("left", esc(y_label))  # pyqtgraph renders axis labels as HTML
        if self._axis_frame != self.frame:  # a new axis label re-lays out the whole plot: only when it changes
            self._axis_frame = self.frame
            self.plot.getPlotItem().setLabel("bottom", f"{'Rest' if self.frame == 'rest' else 'Observed'} wavelength (Å)")

    def describe(self) -> str:
        medium = self.spectrum.medium if self.spectrum is not None else "unknown"
        y = " · y-range set by hand" if self.y_manual is not None else ""
        return f"{self.frame} frame · smoothing {self.smoothing} px · {medium}{y}"

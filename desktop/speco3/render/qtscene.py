"""The offscreen pyqtgraph scene that draws a :class:`~speco3.render.geometry.FigureLayout`.

One :class:`FigureScene` per thread (see :func:`thread_scene`): a ``QGraphicsScene`` holding a grid item, a
pyqtgraph ``PlotCurveItem`` clipped to the axes, and an overlay item with the frame, ticks, texts and the
stats box. Every render reuses the scene; only data and geometry change. Colours, line widths and the pixel
snapping follow matplotlib's Agg output at 80 dpi so the image looks like the training renderer's.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import struct
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from speco3.render.geometry import PT, ROLES, FigureLayout
from speco3.render.qtcompat import pin_singletons

logger = logging.getLogger(__name__)

FONT_DIR = Path(__file__).with_name("fonts")
FONT_FILES = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf")
FONT_FAMILY = "DejaVu Sans"
DPM = round(80 / 0.0254)  # 80 dpi in dots per metre: Qt resolves point sizes against the image

LINE_COLOR = QtGui.QColor(0, 0, 255, round(0.8 * 255))  # matplotlib "b", alpha 0.8
LINE_WIDTH = 1.0 * PT
GRID_RGB = (0xB0, 0xB0, 0xB0)  # matplotlib grid.color
MAJOR_GRID = (0.5 * PT, 0.3)  # width, alpha
MINOR_GRID = (0.3 * PT, 0.1)
SPINE_WIDTH = 0.8 * PT
MAJOR_TICK = (3.5 * PT, 0.8 * PT)  # length, width
MINOR_TICK = (2.0 * PT, 0.6 * PT)
BOX_EDGE = QtGui.QColor(0, 0, 0, round(0.8 * 255))
BOX_FACE = QtGui.QColor(255, 255, 255, round(0.8 * 255))
BOX_EDGE_WIDTH = 1.0 * PT
#: Qt maps PNG "quality" to the zlib level; 60 encodes ~2× faster than the default for ~14 % larger files.
PNG_QUALITY = 60

pin_singletons()  # PySide6 6.12 on CPython 3.11 drops references to None/True (see qtcompat)
_app_lock = threading.Lock()
_fonts_ready = False
_local = threading.local()
_scenes: weakref.WeakSet[FigureScene] = weakref.WeakSet()


def ensure_app() -> QtCore.QCoreApplication:
    """Return the running Qt application, creating an offscreen ``QApplication`` when there is none.

    Also registers the bundled DejaVu Sans fonts (the fonts matplotlib uses) once per process.
    """
    global _fonts_ready
    with _app_lock:
        app = QtCore.QCoreApplication.instance()
        if app is None and threading.current_thread() is not threading.main_thread():
            # Qt needs its application object in the main thread; one made in a worker crashes at exit.
            raise RuntimeError(
                "no Qt application is running: call speco3.render.init_qt() in the main thread "
                "before rendering from worker threads"
            )
        if app is None:
            if sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM"):
                os.environ["QT_QPA_PLATFORM"] = "offscreen"
            logger.debug("creating an offscreen QApplication for rendering")
            app = QtWidgets.QApplication(["speco3-render"])
        if not _fonts_ready:
            for name in FONT_FILES:
                fid = QtGui.QFontDatabase.addApplicationFont(str(FONT_DIR / name))
                if fid < 0:
                    logger.warning("could not load bundled font %s; text metrics may differ", name)
            _fonts_ready = True
    return app


def make_font(role: str) -> QtGui.QFont:
    size, bold = ROLES[role]
    font = QtGui.QFont(FONT_FAMILY)
    font.setPointSizeF(size)
    font.setBold(bold)
    font.setHintingPreference(QtGui.QFont.HintingPreference.PreferFullHinting)
    font.setStyleStrategy(QtGui.QFont.StyleStrategy.PreferAntialias)
    font.setKerning(True)
    return font


def _snap(v: float, width: float) -> float:
    """Agg's pixel snapping: odd (rounded) widths on pixel centres, even widths on pixel edges."""
    return math.floor(v + 0.5) + (0.5 if round(width) % 2 else 0.0)


def _pen(color: QtGui.QColor, width: float, cap=QtCore.Qt.PenCapStyle.FlatCap) -> QtGui.QPen:
    pen = QtGui.QPen(color)
    pen.setWidthF(width)
    pen.setCapStyle(cap)
    pen.setCosmetic(True)
    return pen


class _LayoutItem(QtWidgets.QGraphicsItem):
    """Base for items that paint from the current layout over the whole image."""

    def __init__(self) -> None:
        super().__init__()
        self.layout: FigureLayout | None = None
        self._rect = QtCore.QRectF()

    def set_layout(self, lay: FigureLayout) -> None:
        self.prepareGeometryChange()
        self.layout = lay
        self._rect = QtCore.QRectF(0, 0, lay.width, lay.height)

    def boundingRect(self) -> QtCore.QRectF:  # noqa: N802 (Qt API)
        return self._rect


class GridItem(_LayoutItem):
    """Light major and minor grid lines inside the axes."""

    def paint(self, p: QtGui.QPainter, *args) -> None:
        lay = self.layout
        if lay is None:
            return
        left, top, right, bottom = lay.axes
        p.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, True)
        for (width, alpha), xs, ys in (
            (MINOR_GRID, lay.xminor, lay.yminor),
            (MAJOR_GRID, lay.xmajor, lay.ymajor),
        ):
            p.setPen(_pen(QtGui.QColor(*GRID_RGB, round(alpha * 255)), width))
            for v in np.atleast_1d(lay.x_to_px(xs)):
                x = _snap(float(v), width)
                p.drawLine(QtCore.QPointF(x, top), QtCore.QPointF(x, bottom))
            for v in np.atleast_1d(lay.y_to_px(ys)):
                y = _snap(float(v), width)
                p.drawLine(QtCore.QPointF(left, y), QtCore.QPointF(right, y))


class OverlayItem(_LayoutItem):
    """Frame, inward ticks, tick labels, axis labels, title, stats box and the no-data message."""

    def __init__(self) -> None:
        super().__init__()
        self.fonts = {role: make_font(role) for role in ROLES}
        self.message = ""
        self.single_point: tuple[float, float] | None = None

    def paint(self, p: QtGui.QPainter, *args) -> None:
        lay = self.layout
        if lay is None:
            return
        p.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, True)
        p.setRenderHint(QtGui.QPainter.RenderHint.TextAntialiasing, True)
        left, top, right, bottom = lay.axes
        black = QtGui.QColor(0, 0, 0)
        if self.single_point is not None:
            p.setPen(QtCore.Qt.PenStyle.NoPen)
            p.setBrush(LINE_COLOR)
            p.drawEllipse(QtCore.QPointF(*self.single_point), 3.0, 3.0)
        # ticks (inward, left and bottom only)
        for (length, width), xs, ys in (
            (MINOR_TICK, lay.xminor, lay.yminor),
            (MAJOR_TICK, lay.xmajor, lay.ymajor),
        ):
            p.setPen(_pen(black, width))
            yb = _snap(bottom, SPINE_WIDTH)
            xl = _snap(left, SPINE_WIDTH)
            for v in np.atleast_1d(lay.x_to_px(xs)):
                x = _snap(float(v), width)
                p.drawLine(QtCore.QPointF(x, yb), QtCore.QPointF(x, yb - length))
            for v in np.atleast_1d(lay.y_to_px(ys)):
                y = _snap(float(v), width)
                p.drawLine(QtCore.QPointF(xl, y), QtCore.QPointF(xl + length, y))
        # frame
        p.setPen(_pen(black, SPINE_WIDTH, QtCore.Qt.PenCapStyle.SquareCap))
        p.setBrush(QtCore.Qt.BrushStyle.NoBrush)
        l_, r_ = _snap(left, SPINE_WIDTH), _snap(right, SPINE_WIDTH)
        t_, b_ = _snap(top, SPINE_WIDTH), _snap(bottom, SPINE_WIDTH)
        p.drawRect(QtCore.QRectF(QtCore.QPointF(l_, t_), QtCore.QPointF(r_, b_)))
        if self.message:
            p.setPen(QtGui.QColor(90, 90, 90))
            p.setFont(self.fonts["label"])
            p.drawText(QtCore.QRectF(left, top, right - left, bottom - top), QtCore.Qt.AlignmentFlag.AlignCenter, self.message)
        # stats box
        if lay.stats_box is not None:
            sl, st, sr, sb = lay.stats_box
            path = QtGui.QPainterPath()
            path.addRoundedRect(QtCore.QRectF(sl, st, sr - sl, sb - st), lay.stats_radius, lay.stats_radius)
            p.setPen(_pen(BOX_EDGE, BOX_EDGE_WIDTH))
            p.setBrush(BOX_FACE)
            p.drawPath(path)
        # texts
        p.setPen(black)
        for t in lay.texts:
            p.setFont(self.fonts[t.role])
            if t.rotation:
                p.save()
                p.translate(t.x, t.baseline)
                p.rotate(-t.rotation)
                p.drawText(QtCore.QPointF(0.0, 0.0), t.text)
                p.restore()
            else:
                p.drawText(QtCore.QPointF(round(t.x), round(t.baseline)), t.text)


class TextMeasure:
    """Qt text metrics in matplotlib's conventions (see :class:`speco3.render.geometry.Measure`)."""

    def __init__(self, fonts: dict[str, QtGui.QFont], device: QtGui.QPaintDevice) -> None:
        self._metrics = {role: QtGui.QFontMetricsF(font, device) for role, font in fonts.items()}
        self._font_metrics = {role: _typo_metrics(font, ROLES[role][0]) for role, font in fonts.items()}
        self._cache: dict[tuple[str, str], tuple[float, float, float]] = {}

    def __call__(self, text: str, role: str) -> tuple[float, float, float]:
        """(advance width, ink height, ink descent) in pixels; matches FreeType's hinted extents."""
        key = (text, role)
        hit = self._cache.get(key)
        if hit is None:
            fm = self._metrics[role]
            tight = fm.tightBoundingRect(text)
            descent = max(0.0, tight.bottom())
            height = max(0.0, tight.bottom() - min(0.0, tight.top()))
            hit = (fm.horizontalAdvance(text), height, descent)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def font_metrics(self, role: str) -> tuple[float, float, float]:
        return self._font_metrics[role]


def _typo_metrics(font: QtGui.QFont, size_pt: float) -> tuple[float, float, float]:
    """(ascent, descent, line gap) in pixels from the font's OS/2 table (hhea as fallback)."""
    raw = QtGui.QRawFont.fromFont(font)
    scale_px = size_pt * PT
    head = bytes(raw.fontTable("head").data())
    os2 = bytes(raw.fontTable("OS/2").data())
    hhea = bytes(raw.fontTable("hhea").data())
    if len(head) >= 20:
        units = struct.unpack(">H", head[18:20])[0] or 2048
        if len(os2) >= 74:
            asc, desc, gap = struct.unpack(">hhh", os2[68:74])
            return asc * scale_px / units, -desc * scale_px / units, gap * scale_px / units
        if len(hhea) >= 10:
            asc, desc, gap = struct.unpack(">hhh", hhea[4:10])
            return asc * scale_px / units, -desc * scale_px / units, gap * scale_px / units
    fm = QtGui.QFontMetricsF(font)
    logger.warning("font tables of %s unreadable; using Qt metrics", font.family())
    return fm.ascent(), fm.descent(), fm.leading()


class FigureScene:
    """A reusable offscreen scene: grid, pyqtgraph curve clipped to the axes, overlay."""

    def __init__(self) -> None:
        ensure_app()
        self.scene: QtWidgets.QGraphicsScene | None = QtWidgets.QGraphicsScene()
        self.scene.setItemIndexMethod(QtWidgets.QGraphicsScene.ItemIndexMethod.NoIndex)
        self.scene.setBackgroundBrush(QtGui.QColor(255, 255, 255))
        self.grid = GridItem()
        self.grid.setZValue(0)
        self.scene.addItem(self.grid)
        self.clip = QtWidgets.QGraphicsRectItem()
        self.clip.setPen(QtGui.QPen(QtCore.Qt.PenStyle.NoPen))
        self.clip.setFlag(QtWidgets.QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape, True)
        self.clip.setZValue(1)
        self.scene.addItem(self.clip)
        pen = pg.mkPen(color=LINE_COLOR, width=LINE_WIDTH)
        pen.setJoinStyle(QtCore.Qt.PenJoinStyle.RoundJoin)
        pen.setCapStyle(QtCore.Qt.PenCapStyle.SquareCap)
        self.curve = pg.PlotCurveItem(pen=pen, antialias=True, skipFiniteCheck=True)
        self.curve.setParentItem(self.clip)
        self.overlay = OverlayItem()
        self.overlay.setZValue(2)
        self.scene.addItem(self.overlay)
        self.measure = TextMeasure(self.overlay.fonts, self.new_image(1, 1))
        self._lock = threading.Lock()
        _scenes.add(self)

    def close(self) -> None:
        """Take the items out of the scene and drop it (before Qt shuts down, see :func:`_shutdown`)."""
        with self._lock:
            if self.scene is None:
                return
            self.curve.setParentItem(None)
            for item in (self.grid, self.clip, self.overlay):
                self.scene.removeItem(item)
            self.scene = None

    @staticmethod
    def new_image(width: int, height: int) -> QtGui.QImage:
        img = QtGui.QImage(width, height, QtGui.QImage.Format.Format_RGB32)
        img.setDotsPerMeterX(DPM)
        img.setDotsPerMeterY(DPM)
        return img

    def render(self, lay: FigureLayout, px: np.ndarray, py: np.ndarray, message: str = "") -> QtGui.QImage:
        """Draw a layout with the curve through pixel coordinates ``(px, py)`` into a new image (encode it with
        :func:`png_bytes`, read its pixels with :func:`rgb_array`)."""
        with self._lock:
            if self.scene is None:
                raise RuntimeError("the render scene has been closed (interpreter shutting down)")
            return self._render(self.scene, lay, px, py, message)

    def _render(self, scene: QtWidgets.QGraphicsScene, lay: FigureLayout, px: np.ndarray, py: np.ndarray,
                message: str) -> QtGui.QImage:
        self.grid.set_layout(lay)
        self.overlay.set_layout(lay)
        self.overlay.message = message
        left, top, right, bottom = lay.axes
        self.clip.setRect(QtCore.QRectF(left, top, right - left, bottom - top))
        self.overlay.single_point = (float(px[0]), float(py[0])) if len(px) == 1 else None
        if len(px) >= 2:
            self.curve.setData(px, py)
            self.curve.setVisible(True)
        else:
            self.curve.setData([], [])
            self.curve.setVisible(False)
        rect = QtCore.QRectF(0, 0, lay.width, lay.height)
        scene.setSceneRect(rect)
        img = self.new_image(lay.width, lay.height)
        img.fill(QtGui.QColor(255, 255, 255))
        painter = QtGui.QPainter(img)
        try:
            painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, True)
            scene.render(painter, rect, rect)
        finally:
            painter.end()
        return img


def png_bytes(img: QtGui.QImage) -> bytes:
    """PNG encoding of a rendered image (RGB, lossless)."""
    buf = QtCore.QBuffer()
    buf.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    if not img.save(buf, "PNG", PNG_QUALITY):  # type: ignore[call-overload]  # PySide6 wants str (bytes: ValueError); stubs say bytes
        raise RuntimeError("Qt could not encode the PNG")
    return bytes(buf.data().data())


def rgb_array(img: QtGui.QImage) -> np.ndarray:
    """The pixels of a rendered image as a read-only ``(height, width, 3)`` uint8 RGB array (a copy)."""
    rgb = img.convertToFormat(QtGui.QImage.Format.Format_RGB888)  # RGB32 is 0xffRRGGBB: exact
    w, h, bpl = rgb.width(), rgb.height(), rgb.bytesPerLine()
    rows = np.frombuffer(rgb.constBits(), dtype=np.uint8, count=h * bpl).reshape(h, bpl)
    out = rows[:, : w * 3].reshape(h, w, 3).copy()
    out.flags.writeable = False
    return out


def thread_scene() -> FigureScene:
    """The calling thread's scene, created on first use."""
    scene = getattr(_local, "scene", None)
    if scene is None or scene.scene is None:
        scene = FigureScene()
        _local.scene = scene
    return scene


def release_thread_scene() -> None:
    """Close and drop the calling thread's scene (call at the end of a worker thread, e.g. a ``QThread``).

    Left in the ``threading.local``, the scene would be destroyed while the thread's Python state is torn down,
    which PySide6 does not survive in every thread type.
    """
    scene = getattr(_local, "scene", None)
    if scene is not None:
        try:
            scene.close()
        finally:
            del _local.scene


@atexit.register
def _shutdown() -> None:
    """Dismantle all scenes before Qt and the interpreter tear down their objects in arbitrary order."""
    for scene in list(_scenes):
        with contextlib.suppress(RuntimeError):  # already deleted by Qt
            scene.close()

"""Pure layout rules (no Qt): figure sizes, tick steps and labels, stats text, corner choice."""

from __future__ import annotations

import numpy as np
import pytest

from speco3.render import layout


@pytest.mark.parametrize(
    ("span", "n", "zoom", "size"),
    [
        (5399.0, 3909, False, (10.0, 6.0)),
        (3000.0, 3909, False, (8.0, 5.0)),  # "> 3000" is strict
        (1000.5, 500, False, (8.0, 5.0)),
        (1000.0, 500, False, (7.0, 4.5)),
        (200.0, 100, False, (6.0, 4.0)),
        (49.9, 60, True, (6.0, 4.0)),
        (50.0, 60, True, (7.0, 4.5)),
        (199.9, 60, True, (7.0, 4.5)),
        (200.0, 60, True, (8.0, 5.0)),
        (999.0, 600, True, (8.0, 5.0)),
        (1000.0, 1200, True, (9.0, 5.5)),
        (39.2, 27, True, (5.7, 4.0)),  # < 50 points: width × 0.95
        (4000.0, 12000, True, (9.45, 5.5)),  # > 10 000 points: width × 1.05
        (5000.0, 10000, False, (10.0, 6.0)),
    ],
)
def test_figure_size_classes(span, n, zoom, size):
    w, h = layout.figure_size(span, n, zoom)
    assert (round(w, 6), h) == size


@pytest.mark.parametrize(
    ("span", "steps"),
    [
        (5399.0, (1000, 200)),
        (5000.0, (1000, 200)),
        (4999.9, (200, 50)),
        (1000.0, (200, 50)),
        (599.0, (100, 20)),
        (499.0, (100, 25)),
        (300.0, (100, 25)),
        (299.2, (50, 25)),
        (150.0, (50, 25)),
        (118.7, (25, 5)),
        (98.1, (10, 2)),
        (50.0, (10, 2)),
        (48.9, (5, 1)),
        (20.0, (5, 1)),
        (19.9, (2, 0.5)),
        (5.0, (2, 0.5)),
        (4.99, (1, 0.2)),
        (0.0, (1, 0.2)),
    ],
)
def test_x_tick_steps_by_span(span, steps):
    assert layout.x_tick_steps(span) == steps


def test_stats_lines_format():
    x = np.array([6501.04, 6550.0, 6599.06])
    y = np.array([359.4, 400.0, 523.1])
    assert layout.stats_lines(x, y) == [
        "Data points: 3",
        "λ range: 6501.0 - 6599.1 Å",
        "Flux range: 3.59e+02 - 5.23e+02",
    ]
    assert layout.stats_lines(x, -y)[2] == "Flux range: -5.23e+02 - -3.59e+02"
    assert layout.stats_lines(np.array([]), np.array([])) == ["Data points: 0"]


def test_emptiest_corner_quadrants():
    x = np.linspace(0, 10, 101)
    rising = x.copy()  # data from lower left to upper right: upper left and lower right are empty
    assert layout.emptiest_corner(x, rising) == "upper left"  # tie: upper left is tried before lower right
    falling = 10 - x
    assert layout.emptiest_corner(x, falling) == "upper right"
    dip_right = np.where(x > 7, 0.0, 5.0) + 5  # high on the left, a low step on the right
    assert layout.emptiest_corner(x, dip_right) == "lower left"
    assert layout.emptiest_corner(np.array([]), np.array([])) == "upper right"


def test_with_margins_and_nonsingular():
    assert layout.with_margins(0.0, 100.0) == pytest.approx((-5.0, 105.0))
    lo, hi = layout.with_margins(500.0, 500.0)
    assert lo < 500.0 < hi
    assert layout.with_margins(0.0, 0.0) == pytest.approx((-0.055, 0.055))


def test_multiple_ticks_clip_to_view():
    t = layout.multiple_ticks(6495.1, 6604.9, 10.0)
    assert t[0] == 6500.0 and t[-1] == 6600.0 and len(t) == 11
    assert layout.multiple_ticks(1.0, 0.5, 1.0).size == 0


@pytest.mark.parametrize("seed", range(3))
def test_auto_ticks_and_labels_match_matplotlib(seed):
    """Our MaxNLocator / ScalarFormatter port gives matplotlib's ticks and labels for random views."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    try:
        for _ in range(30):
            scale = 10.0 ** rng.uniform(-19, 8)
            lo = rng.uniform(-1, 1) * scale
            hi = lo + abs(rng.normal()) * scale * 10 ** rng.uniform(-4, 1) + scale * 1e-6
            ax.set_ylim(lo, hi)
            fig.canvas.draw()
            nbins = layout.y_nbins(ax.get_window_extent().height)
            want = ax.yaxis.get_majorticklocs()
            got = layout.auto_ticks(lo, hi, nbins)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=abs(hi - lo) * 1e-9)
            labels = layout.format_ticks(got, lo, hi)
            fmt = ax.yaxis.get_major_formatter()
            visible = [i for i, v in enumerate(want) if lo <= v <= hi]
            want_labels = [t.get_text() for t in ax.yaxis.get_majorticklabels()]
            assert [labels.labels[i] for i in visible] == [want_labels[i] for i in visible] or not visible
            assert labels.offset_text == fmt.get_offset()
    finally:
        plt.close(fig)


def test_minor_step_auto_divisions():
    assert layout.minor_step(100.0) == 20.0
    assert layout.minor_step(25.0) == 5.0
    assert layout.minor_step(50.0) == 10.0
    assert layout.minor_step(20.0) == 5.0  # mantissa 2 → 4 divisions
    assert layout.minor_step(0.2) == pytest.approx(0.05)


def test_format_ticks_unicode_minus_and_offset():
    lab = layout.format_ticks(np.array([-20.0, 0.0, 20.0]), -25.0, 25.0)
    assert lab.labels == ["\u221220", "0", "20"]
    big = layout.format_ticks(np.array([1.0e-15, 2.0e-15, 3.0e-15]), 0.5e-15, 3.5e-15)
    assert big.labels == ["1", "2", "3"] and big.offset_text == "1e\u221215"
    off = layout.format_ticks(np.array([16000.2, 16000.4, 16000.6]), 16000.1, 16000.7)
    assert off.offset_text.startswith("+1.6e4") and off.labels[0] == "0.2"


def test_layout_module_is_qt_free():
    import subprocess
    import sys

    code = "import sys, speco3.render.layout, speco3.render.geometry; print([m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph'))])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"

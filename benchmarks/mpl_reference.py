"""A matplotlib implementation of the training renderer (docs/design.md §3), for benchmarks and tests only.

matplotlib is not a runtime dependency of Spec-o3 Desktop. This module reproduces the training routine's
plotting so that the pyqtgraph renderer can be measured against it (speed, pixel size, layout) in the same
process. Layout rules (figure size, tick steps, stats text, corner) come from :mod:`speco3.render.layout`;
matplotlib does the y ticks, text metrics, tight layout and tight bounding box itself.
"""

from __future__ import annotations

import io
import logging

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MultipleLocator  # noqa: E402

from speco3.render import layout  # noqa: E402
from speco3.spectra.view import View  # noqa: E402

logger = logging.getLogger(__name__)

#: Anchor of the stats text in axes fraction, alignment, per corner.
_CORNER_ANCHOR = {
    "upper right": (0.98, 0.98, "right", "top"),
    "upper left": (0.02, 0.98, "left", "top"),
    "lower left": (0.02, 0.02, "left", "bottom"),
    "lower right": (0.98, 0.02, "right", "bottom"),
}


def render_arrays(x: np.ndarray, y: np.ndarray, title: str, zoom: bool) -> bytes:
    """Render prepared data (finite, sorted) to PNG bytes the way the training routine did."""
    span = float(x.max() - x.min()) if len(x) else 0.0
    figsize = layout.figure_size(span, len(x), zoom)
    fig, ax = plt.subplots(figsize=figsize, dpi=layout.DPI)
    try:
        ax.plot(x, y, "b-", linewidth=1, alpha=0.8)
        ax.set_xlabel("Wavelength (Å)", fontsize=12, fontweight="bold")
        ax.set_ylabel("Flux", fontsize=12, fontweight="bold")
        ax.set_title(title, fontsize=14, fontweight="bold", pad=20)
        ax.grid(True, which="major", alpha=0.3, linewidth=0.5)
        ax.minorticks_on()
        ax.grid(True, which="minor", alpha=0.1, linewidth=0.3)
        major, minor = layout.x_tick_steps(span)
        ax.xaxis.set_major_locator(MultipleLocator(major))
        ax.xaxis.set_minor_locator(MultipleLocator(minor))
        ax.tick_params(direction="in", which="both")
        corner = layout.emptiest_corner(x, y)
        ax_x, ax_y, ha, va = _CORNER_ANCHOR[corner]
        ax.text(
            ax_x,
            ax_y,
            "\n".join(layout.stats_lines(x, y)),
            transform=ax.transAxes,
            fontsize=9,
            ha=ha,
            va=va,
            multialignment=ha,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8},
        )
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=layout.DPI, bbox_inches="tight", facecolor="white")
        return buf.getvalue()
    finally:
        plt.close(fig)


def render_view_mpl(view: View) -> bytes:
    """Render a :class:`~speco3.spectra.view.View` with matplotlib (reference implementation)."""
    x, y = view.data()
    return render_arrays(x, y, view.display_title, view.is_zoom)

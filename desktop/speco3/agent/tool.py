"""The zoom tool ``spectral_visualization_tool``: argument checks, the View it renders, the exact response texts.

Checks run in the order of the training tool (``docs/design.md`` §2): ``wavelength_range`` must hold two
numbers with min < max and must overlap the rest-frame data range (a partial overlap is rendered); a range with no
data point inside gets the "No data points" error; arguments that are not a JSON object, or an unknown tool name,
get ``Error when executing tool: <reason>``. Ranges are in the rest frame λ/(1+z) with the catalogue redshift.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from speco3.agent.protocol import TOOL_NAME, ParsedCall, format_range, truncate_tool_text
from speco3.imaging import HasPixels, PreparedImage, prepare_image
from speco3.spectra.model import Spectrum
from speco3.spectra.view import View

logger = logging.getLogger(__name__)

#: View -> PNG bytes, or a rendered image with its pixels (`speco3.render.render_view`: no PNG round trip).
RenderFn = Callable[[View], bytes | HasPixels]


@dataclass
class ToolResult:
    """What one tool call produced.

    Attributes
    ----------
    ok : bool
        True when an image was rendered.
    text : str
        The response sentence the model reads (already truncated like verl's 1024-character limit).
    view : View or None
        The rendered view (rest frame) when ``ok``.
    image : PreparedImage or None
        The image exactly as the model sees it.
    label : str or None
        The label argument (None when absent or empty).
    wavelength_range : tuple or None
        The range as received (numbers unchanged) when it was well formed.
    error : str or None
        ``"invalid_range"``, ``"no_data"``, ``"bad_arguments"`` or ``"render_failed"``.
    seconds : float
        Render and preparation time.
    """

    ok: bool
    text: str
    view: View | None = None
    image: PreparedImage | None = None
    label: str | None = None
    wavelength_range: tuple | None = None
    error: str | None = None
    seconds: float = 0.0


def _is_number(x: object) -> bool:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # a JSON integer beyond the float range (e.g. 10**400)
        return False


def _decode_arguments(arguments: object) -> dict:
    """The arguments object; a JSON string holding an object is accepted. Raises ValueError / TypeError."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)  # ValueError (JSONDecodeError) with Python's reason
        except RecursionError as exc:
            raise ValueError("arguments nested too deeply") from exc
    if not isinstance(arguments, dict):
        raise TypeError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments


def success_text(received: tuple, label: str | None) -> str:
    """``Generated spectral visualization focused on wavelength range (a, b) Å[ for LABEL].``"""
    head = f"Generated spectral visualization focused on wavelength range {format_range(received)} Å"
    return f"{head} for {label}." if label else f"{head}."


def invalid_range_text(received: object, data_range: tuple[float, float] | None) -> str:
    """``Error: The specified wavelength range [a, b] is invalid or outside the available data range [lo, hi].``"""
    shown = format_range(received, "[]") if isinstance(received, (list, tuple)) else str(received)
    if data_range is None:
        avail = "[nan, nan]"
    else:
        avail = f"[{data_range[0]:.1f}, {data_range[1]:.1f}]"
    return f"Error: The specified wavelength range {shown} is invalid or outside the available data range {avail}."


def no_data_text(received: tuple) -> str:
    return (
        "Error processing spectral visualization: No data points in specified wavelength range "
        f"{format_range(received)}"
    )


def run_tool(
    call: ParsedCall,
    spectrum: Spectrum,
    render: RenderFn,
    *,
    image_max_tokens: int | None = None,
) -> ToolResult:
    """Execute one parsed tool call against ``spectrum``; never raises."""
    t0 = time.perf_counter()

    def done(result: ToolResult) -> ToolResult:
        result.text = truncate_tool_text(result.text)
        result.seconds = time.perf_counter() - t0
        return result

    if call.name != TOOL_NAME:
        return done(ToolResult(False, f"Error when executing tool: '{call.name}'", error="bad_arguments"))
    try:
        args = _decode_arguments(call.arguments)
    except (ValueError, TypeError) as exc:
        return done(ToolResult(False, f"Error when executing tool: {exc}", error="bad_arguments"))
    label_value = args.get("label")
    label = None if label_value is None or label_value == "" else str(label_value)
    received = args.get("wavelength_range")
    full = View(spectrum, None, frame="rest")
    data_range = full.data_range()
    well_formed = (
        isinstance(received, (list, tuple))
        and len(received) == 2
        and all(_is_number(v) for v in received)
        and received[0] < received[1]
    )
    if not well_formed:
        return done(ToolResult(False, invalid_range_text(received, data_range), label=label, error="invalid_range"))
    rng = tuple(received or ())  # well formed: two numbers
    if data_range is not None and (rng[1] < data_range[0] or rng[0] > data_range[1]):
        return done(
            ToolResult(False, invalid_range_text(received, data_range), label=label, wavelength_range=rng,
                       error="invalid_range")
        )
    view = View(spectrum, (float(rng[0]), float(rng[1])), frame="rest")
    x, _ = view.data()
    if x.size == 0:
        return done(ToolResult(False, no_data_text(rng), label=label, wavelength_range=rng, error="no_data"))
    try:
        image = prepare_image(render(view), max_tokens=image_max_tokens)
    except Exception as exc:  # a renderer failure is reported to the model like any tool exception
        logger.exception("zoom render failed for %s %s", spectrum.name, rng)
        return done(
            ToolResult(False, f"Error when executing tool: {exc}", label=label, wavelength_range=rng,
                       error="render_failed")
        )
    return done(ToolResult(True, success_text(rng, label), view=view, image=image, label=label, wavelength_range=rng))

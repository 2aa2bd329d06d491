"""``spec-o3 render FILE -o out.png``: draw a spectrum the way the model sees it.

Renders the full view or a zoom window (``--range A B``, rest frame unless ``--observed``) with the
training-faithful renderer and writes the PNG. ``--model-size`` also writes the image resized by Qwen2.5-VL's
``smart_resize`` rule (what the model receives, next to the output as ``<name>.model.png``) and prints its
image-token grid.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path

from speco3.errors import Speco3Error

log = logging.getLogger(__name__)


class RenderCommandError(Speco3Error):
    """Bad arguments to ``spec-o3 render``."""


def register(sub) -> None:
    p = sub.add_parser("render", help="render a spectrum (full or zoomed) as the model sees it")
    p.add_argument("file", metavar="FILE", help="spectrum file or FILE#N address")
    p.add_argument("--range", nargs=2, type=float, metavar=("A", "B"), help="wavelength window in Å")
    p.add_argument("--observed", action="store_true", help="observed frame (default: rest frame λ/(1+z))")
    p.add_argument("--title", help="plot title (default: 'Spectrum: <file name>')")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="PNG file to write")
    p.add_argument(
        "--model-size",
        action="store_true",
        help="also write the smart_resized image the model sees (<OUT>.model.png) and print its token grid",
    )
    p.add_argument("--max-tokens", type=int, help="image-token cap for --model-size (default: none)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=cmd_render)


def _check_range(rng: list[float] | None) -> tuple[float, float] | None:
    if rng is None:
        return None
    a, b = rng
    if not (math.isfinite(a) and math.isfinite(b)) or a >= b:
        raise RenderCommandError(f"--range needs two finite numbers A < B, got {a:g} {b:g}")
    return (a, b)


def model_path(output: Path) -> Path:
    """Where ``--model-size`` writes the resized image."""
    return output.with_name(output.stem + ".model.png")


def cmd_render(args) -> int:
    from speco3.imaging import prepare_image
    from speco3.render import render_view
    from speco3.spectra import read_spectrum
    from speco3.spectra.view import View

    rng = _check_range(args.range)
    spectrum = read_spectrum(args.file)
    view = View(spectrum, wavelength_range=rng, frame="observed" if args.observed else "rest", title=args.title)
    t0 = time.perf_counter()
    image = render_view(view)
    ms = (time.perf_counter() - t0) * 1000.0
    out = Path(args.output)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(image.png)
    except OSError as exc:
        raise RenderCommandError(f"cannot write {out}: {exc.strerror or exc}") from exc
    summary: dict[str, object] = {
        "output": str(out),
        "width": image.width,
        "height": image.height,
        "points": image.n_points,
        "frame": view.frame,
        "redshift": spectrum.z,
        "range": list(rng) if rng else None,
        "x_range": list(image.x_range),
        "stats_corner": image.corner,
        "render_ms": round(ms, 1),
    }
    if image.n_points == 0:
        log.warning("no data points in the requested range")
    if args.model_size:
        prepared = prepare_image(image.png, max_tokens=args.max_tokens)
        mpath = model_path(out)
        try:
            mpath.write_bytes(prepared.png)
        except OSError as exc:
            raise RenderCommandError(f"cannot write {mpath}: {exc.strerror or exc}") from exc
        summary.update(
            model_output=str(mpath),
            model_width=prepared.width,
            model_height=prepared.height,
            token_grid=list(prepared.grid),
            image_tokens=prepared.n_tokens,
        )
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    where = f"{rng[0]:g}-{rng[1]:g} Å ({view.frame})" if rng else f"full view ({view.frame})"
    print(f"{out}: {image.width}x{image.height} px, {image.n_points} points, {where}, {ms:.0f} ms")
    if args.model_size:
        nx, ny = prepared.grid
        print(
            f"{mpath}: {prepared.width}x{prepared.height} px, "
            f"token grid {nx}x{ny} = {nx * ny} image tokens"
        )
    sys.stdout.flush()
    return 0

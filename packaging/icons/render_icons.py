"""Render the application icon (``spec-o3.svg``) to PNGs of the sizes desktops and installers ask for.

Run with the project's virtual environment (uses Qt's SVG renderer, offscreen)::

    .venv/bin/python packaging/icons/render_icons.py

Writes ``png/spec-o3-<N>.png`` for N in `SIZES`, ``spec-o3.ico`` (Windows, PNG-compressed entries) and,
where ``iconutil`` exists (macOS), ``spec-o3.icns``. The PNGs are committed, so a build needs no renderer.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SVG = HERE / "spec-o3.svg"
SIZES: tuple[int, ...] = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES: tuple[int, ...] = (16, 24, 32, 48, 64, 128, 256)
# iconutil wants these names: icon_<size>x<size>[@2x].png
ICNS_MEMBERS: tuple[tuple[str, int], ...] = (
    ("icon_16x16.png", 16), ("icon_16x16@2x.png", 32), ("icon_32x32.png", 32), ("icon_32x32@2x.png", 64),
    ("icon_128x128.png", 128), ("icon_128x128@2x.png", 256), ("icon_256x256.png", 256),
    ("icon_256x256@2x.png", 512), ("icon_512x512.png", 512),
)


def render_png(svg: Path, size: int) -> bytes:
    """Render ``svg`` to a square RGBA PNG of ``size`` pixels and return its bytes."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 - keeps Qt alive
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg}: not a valid SVG for Qt's renderer")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise SystemExit(f"could not encode a {size} px PNG")
    buffer.close()
    return bytes(data.data())


def write_ico(path: Path, pngs: dict[int, bytes]) -> None:
    """Write a Windows ``.ico`` whose entries are PNG streams (valid since Windows Vista)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = 6 + 16 * len(sizes)
    entries, blobs = b"", b""
    for size in sizes:
        blob = pngs[size]
        dim = 0 if size >= 256 else size  # 0 means 256 in an ICONDIRENTRY
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset)
        offset += len(blob)
        blobs += blob
    path.write_bytes(header + entries + blobs)


def write_icns(path: Path, pngs: dict[int, bytes]) -> bool:
    """Write ``.icns`` with Apple's ``iconutil`` (macOS only). Returns False where it is missing."""
    iconutil = shutil.which("iconutil")
    if not iconutil:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        iconset = Path(tmp) / "spec-o3.iconset"
        iconset.mkdir()
        for name, size in ICNS_MEMBERS:
            (iconset / name).write_bytes(pngs[size])
        subprocess.run([iconutil, "-c", "icns", str(iconset), "-o", str(path)], check=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: next to the SVG)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    png_dir = args.out / "png"
    png_dir.mkdir(parents=True, exist_ok=True)
    pngs = {size: render_png(SVG, size) for size in sorted(set(SIZES) | set(ICO_SIZES))}
    for size in SIZES:
        (png_dir / f"spec-o3-{size}.png").write_bytes(pngs[size])
        log.info("wrote %s", png_dir / f"spec-o3-{size}.png")
    write_ico(args.out / "spec-o3.ico", {s: pngs[s] for s in ICO_SIZES})
    log.info("wrote %s", args.out / "spec-o3.ico")
    if write_icns(args.out / "spec-o3.icns", pngs):
        log.info("wrote %s", args.out / "spec-o3.icns")
    else:
        log.info("iconutil not found (not macOS): spec-o3.icns is made by build-macos.sh")
    return 0


if __name__ == "__main__":
    sys.exit(main())

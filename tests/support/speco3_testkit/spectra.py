"""A small Pillow renderer (no Qt) and synthetic spectra, shared by the agent, vetting and robustness tests.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from speco3.spectra.model import Spectrum, SpectrumMeta
from speco3.spectra.view import View


def pillow_render(view: View) -> bytes:
    """Draw the view's points as a polyline; full views 792×472, zooms 596×352 (the training size classes)."""
    w, h = (596, 352) if view.is_zoom else (792, 472)
    img = Image.new("RGB", (w, h), "white")
    x, y = view.data()
    if x.size >= 2:
        draw = ImageDraw.Draw(img)
        xs = (x - x.min()) / max(float(np.ptp(x)), 1e-9) * (w - 20) + 10
        ys = h - 10 - (y - y.min()) / max(float(np.ptp(y)), 1e-9) * (h - 20)
        draw.line(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=(0, 0, 255), width=1)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def make_spectrum(lo: float = 3700.0, hi: float = 9100.0, n: int = 3000, z: float = 0.0, gap=None,
                  name: str = "synthetic.fits", seed: int = 1) -> Spectrum:
    """A blue continuum with Hα/Hβ emission; ``gap=(a, b)`` removes the pixels in that observed range."""
    wl = np.linspace(lo, hi, n)
    rng = np.random.default_rng(seed)
    flux = 10 + 5 * np.exp(-((wl - 6564.6 * (1 + z)) / 8) ** 2) + 3 * np.exp(-((wl - 4862.7 * (1 + z)) / 8) ** 2)
    flux = flux + rng.normal(0, 0.1, n)
    if gap is not None:
        keep = (wl < gap[0]) | (wl > gap[1])
        wl, flux = wl[keep], flux[keep]
    meta = SpectrumMeta(survey="test", redshift=z, file_name=name, path=f"/data/{name}", object_id="obj-1")
    return Spectrum(wl, flux, meta=meta)


def write_csv_spectrum(folder: Path, i: int = 0) -> Path:
    """``folder/sNN.csv``: a small CSV spectrum (odd ``i``: with an Hα emission line), the folder made if needed."""
    folder.mkdir(exist_ok=True)
    wl = np.linspace(3700, 9100, 600)
    flux = 10 + (5 if i % 2 else 0) * np.exp(-((wl - 6564.6) / 8) ** 2) + 0.01 * i
    path = folder / f"s{i:02d}.csv"
    np.savetxt(path, np.c_[wl, flux], delimiter=",", header="wavelength,flux", comments="")
    return path


def write_csv_archive(folder: Path, n: int) -> Path:
    """A new folder of ``n`` such spectra, ``s00.csv`` …, for the server and CLI tests' ``vet`` runs."""
    folder.mkdir()
    for i in range(n):
        write_csv_spectrum(folder, i)
    return folder

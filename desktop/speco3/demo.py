"""The embedded demo archive: synthetic LAMOST LRS spectra with recognizable features (no Qt).

`write_demo_archive` writes about twenty spectra in the **LAMOST LRS new layout** (DR8+): an empty primary HDU
whose header carries the pipeline keywords (CLASS, SUBCLASS, Z, OBSID, RA, DEC, SNRU…SNRZ, VACUUM, COEFF0/1) and a
one-row ``COADD`` binary table with the float32 vector columns FLUX, IVAR, WAVELENGTH, ANDMASK, ORMASK and
NORMALIZATION (3909 pixels, log-linear, 3699–9100 Å in vacuum, as the real pipeline writes them).

Each task class of the agent has a few positives with the features an expert looks for, and there are ordinary
stars and galaxies as negatives:

* CV: blue continuum with Balmer, He I and He II 4686 emission;
* carbon star: red continuum with C₂ Swan band heads (4737, 5165, 5636 Å, degraded to the violet) and CN bands;
* S-type star: ZrO band heads (4620, 5298, 5552, 6345, 6474 Å) with weak TiO;
* M giant: TiO band heads (4761 … 8432 Å, degraded to the red) on a cool continuum;
* DA white dwarf: hot continuum with broad, pressure-broadened Balmer absorption;
* negatives: G/K/A stars (metal lines, narrow Balmer) and star-forming galaxies at z≈0.05–0.1.

Everything is deterministic (one seed per spectrum), with photon-like noise, a noisy blue edge, telluric
absorption in the observed frame and a few masked pixels. The files are synthetic: ``DATA_V`` says so, and
``OBJNAME`` starts with ``DEMO``.

The scripted demo session
-------------------------
Without a model, the demo archive's own spectra can still be "screened" by a canned agent session
(`demo_engine`): it drives the real agent loop through a `ScriptedEngine`: the zoom requests are real tool calls
rendered by the real renderer, but the *text* is canned and the final answer is the demo catalogue's ground truth.
Every message says so, and its runs are recorded under the model id `SCRIPTED_LABEL` ("scripted demo — not a
model"). The app offers it (File → Open demo archive) and ``spec-o3 vet --demo`` / ``spec-o3 inspect --demo`` run
it; it is refused for any other spectrum (`demo_refusal`), never run on the user's data.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from astropy.io import fits

from speco3.agent.protocol import tool_call_text
from speco3.agent.tasks import Task
from speco3.engine.base import ModelInfo
from speco3.engine.choice import SCRIPTED_LABEL
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import Speco3Error
from speco3.spectra.model import Spectrum
from speco3.votable import write_votable

log = logging.getLogger(__name__)

DEMO_VERSION = "1"
MARKER = ".speco3-demo"
N_PIXELS = 3909
COEFF0 = 3.5682  # log10 of the first pixel's wavelength (as LAMOST writes it)
COEFF1 = 1e-4  # log10 dispersion per pixel

# Rest vacuum wavelengths (Å).
BALMER = {"Hα": 6564.61, "Hβ": 4862.68, "Hγ": 4341.68, "Hδ": 4102.89, "Hε": 3971.20}
SWAN_HEADS = (4737.0, 5165.0, 5636.0)  # C2 Swan Δv = +1, 0, −1; degraded to the violet
CN_HEADS = (7088.0, 7874.0, 8067.0)  # CN red system; degraded to the red
ZRO_HEADS = (4620.0, 5298.0, 5552.0, 6345.0, 6474.0)
TIO_HEADS = (4761.0, 4954.0, 5167.0, 5448.0, 5847.0, 6159.0, 6651.0, 7054.0, 7589.0, 8432.0)
# Telluric absorption in the observed frame: (start, end, depth).
TELLURIC = ((6867.0, 6920.0, 0.25), (7160.0, 7340.0, 0.10), (7594.0, 7700.0, 0.45), (8130.0, 8350.0, 0.10))


class DemoError(Speco3Error):
    """The demo archive cannot be written."""


@dataclass(frozen=True)
class DemoObject:
    """One synthetic spectrum: what it is and how it is drawn."""

    kind: str  # builder name
    cls: str  # LAMOST CLASS
    subclass: str
    z: float
    snr: float  # S/N per pixel in the g band
    truth: str  # task class it is a positive for ("" for negatives)


CATALOGUE: tuple[DemoObject, ...] = (
    DemoObject("cv", "STAR", "CV", 0.00021, 18.0, "cv"),
    DemoObject("cv", "STAR", "CV", -0.00008, 9.0, "cv"),
    DemoObject("cv_faint", "STAR", "Non", 0.00010, 5.0, "cv"),
    DemoObject("carbon", "STAR", "Carbon", 0.00005, 25.0, "carbon"),
    DemoObject("carbon", "STAR", "Carbon", -0.00012, 12.0, "carbon"),
    DemoObject("carbon_weak", "STAR", "K5", 0.00003, 20.0, "carbon"),
    DemoObject("stype", "STAR", "M5", 0.00002, 22.0, "ss"),
    DemoObject("stype", "STAR", "M3", -0.00004, 14.0, "ss"),
    DemoObject("mgiant", "STAR", "M4", 0.00001, 30.0, "gm"),
    DemoObject("mgiant", "STAR", "M2", -0.00009, 16.0, "gm"),
    DemoObject("mgiant_early", "STAR", "M0", 0.00006, 11.0, "gm"),
    DemoObject("wd", "STAR", "WD", 0.00015, 20.0, "wd"),
    DemoObject("wd", "STAR", "WD", 0.00007, 10.0, "wd"),
    DemoObject("wd_cool", "STAR", "A0", 0.00002, 15.0, "wd"),
    DemoObject("gstar", "STAR", "G2", 0.00004, 40.0, ""),
    DemoObject("gstar", "STAR", "G8", -0.00011, 8.0, ""),
    DemoObject("kstar", "STAR", "K3", 0.00008, 25.0, ""),
    DemoObject("astar", "STAR", "A2", 0.00001, 30.0, ""),
    DemoObject("galaxy", "GALAXY", "", 0.0612, 9.0, ""),
    DemoObject("galaxy", "GALAXY", "", 0.0987, 6.0, ""),
)


def demo_wavelength() -> np.ndarray:
    """The LAMOST LRS log-linear vacuum wavelength grid (3909 pixels)."""
    return 10.0 ** (COEFF0 + COEFF1 * np.arange(N_PIXELS))


# -- spectral ingredients (all multiplicative or additive on the observed grid) ----------------------------------
def _planck(w: np.ndarray, teff: float) -> np.ndarray:
    x = 1.4388e8 / (w * teff)  # hc/(λ k T) with λ in Å
    b = 1.0 / (w**5 * np.expm1(np.clip(x, 1e-6, 700.0)))
    return b / np.median(b)


def _gauss(w: np.ndarray, center: float, sigma: float) -> np.ndarray:
    return np.exp(-0.5 * ((w - center) / sigma) ** 2)


def _lorentz(w: np.ndarray, center: float, gamma: float) -> np.ndarray:
    return 1.0 / (1.0 + ((w - center) / gamma) ** 2)


def _band(w: np.ndarray, head: float, depth: float, length: float, toward: str) -> np.ndarray:
    """Transmission of a molecular band with a sharp head, fading over ``length`` Å toward red or violet."""
    d = (w - head) if toward == "red" else (head - w)
    absorb = np.where(d >= 0, depth * np.exp(-np.clip(d, 0, None) / length), 0.0)
    return 1.0 - absorb


def _lines(w: np.ndarray, z: float, lines: dict[str, float] | tuple[float, ...], amp: float, sigma: float) -> np.ndarray:
    centres = lines.values() if isinstance(lines, dict) else lines
    return sum((amp * _gauss(w, c * (1 + z), sigma * (1 + z)) for c in centres), np.zeros_like(w))


def _telluric(w: np.ndarray) -> np.ndarray:
    t = np.ones_like(w)
    for lo, hi, depth in TELLURIC:
        inside = (w >= lo) & (w <= hi)
        t[inside] *= 1.0 - depth * np.sin(np.pi * (w[inside] - lo) / (hi - lo)) ** 0.5
    return t


def _continuum(obj: DemoObject, w: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(continuum, model) before telluric absorption and noise, both relative (median ~1)."""
    z = obj.z
    k = obj.kind
    if k.startswith("cv"):
        cont = 0.6 * _planck(w, 18000) + 0.4 * (w / 5500.0) ** -1.5
        strength = 0.35 if k == "cv_faint" else 1.0
        emit = _lines(w, z, BALMER, 2.2 * strength, 9.0)
        emit += _lines(w, z, {"He I": 5877.25, "He I 6680": 6679.99, "He I 4473": 4472.7}, 0.6 * strength, 7.0)
        emit += _lines(w, z, {"He II": 4687.02}, 1.1 * strength, 8.0)
        return cont, cont * (1 + emit)
    if k.startswith("carbon"):
        cont = _planck(w, 3000 + rng.uniform(-150, 150))
        model = cont.copy()
        depth = 0.15 if k == "carbon_weak" else 0.55
        for head in SWAN_HEADS:
            model *= _band(w, head * (1 + z), depth, 160.0, "violet")
        for head in CN_HEADS:
            model *= _band(w, head * (1 + z), depth * 0.6, 120.0, "red")
        model *= 1 - _lines(w, z, {"Na D": 5893.0}, 0.5, 4.0)
        return cont, model
    if k == "stype":
        cont = _planck(w, 3300)
        model = cont.copy()
        for head in ZRO_HEADS:
            model *= _band(w, head * (1 + z), 0.45, 110.0, "red")
        for head in TIO_HEADS[4:]:
            model *= _band(w, head * (1 + z), 0.12, 150.0, "red")
        return cont, model
    if k.startswith("mgiant"):
        cont = _planck(w, 3400 if k == "mgiant" else 3800)
        model = cont.copy()
        depth = 0.6 if k == "mgiant" else 0.3
        for head in TIO_HEADS:
            model *= _band(w, head * (1 + z), depth * (0.6 + 0.4 * (head > 5800)), 170.0, "red")
        model *= 1 - _lines(w, z, {"Ca I": 6573.0, "Na I": 8190.0}, 0.25, 3.0)
        return cont, model
    if k.startswith("wd"):
        teff, gamma, depth = (22000, 38.0, 0.55) if k == "wd" else (9500, 9.0, 0.6)
        cont = _planck(w, teff)
        absorb = sum(depth * (0.7 + 0.06 * i) * _lorentz(w, c * (1 + z), gamma * (1 + 0.15 * i))
                     for i, c in enumerate(BALMER.values()))
        return cont, cont * np.clip(1 - absorb, 0.05, None)
    if k in ("gstar", "kstar", "astar"):
        teff = {"gstar": 5800, "kstar": 4500, "astar": 9000}[k]
        cont = _planck(w, teff)
        metals = {"Ca K": 3934.78, "Ca H": 3969.59, "G band": 4305.0, "Mg b": 5176.7, "Na D": 5893.0, "Ca II": 8544.4}
        m_amp = {"gstar": 0.45, "kstar": 0.6, "astar": 0.15}[k]
        b_amp = {"gstar": 0.25, "kstar": 0.12, "astar": 0.55}[k]
        absorb = _lines(w, z, metals, m_amp, 4.0) + _lines(w, z, BALMER, b_amp, 6.0 if k == "astar" else 3.0)
        return cont, cont * np.clip(1 - absorb, 0.05, None)
    if k == "galaxy":
        cont = _planck(w, 5200) * np.where(w / (1 + z) < 4000, 0.65, 1.0)
        emit = _lines(w, z, {"Hα": 6564.61, "Hβ": 4862.68, "[O III]": 5008.24, "[N II]": 6585.27}, 1.2, 3.5)
        emit += _lines(w, z, {"[O II]": 3728.48, "[O III] 4960": 4960.30, "[S II]": 6718.29, "[S II] b": 6732.67},
                       0.5, 3.5)
        return cont, cont * (1 + emit)
    raise DemoError(f"unknown demo object kind {obj.kind!r}")


def make_demo_arrays(obj: DemoObject, seed: int) -> dict[str, np.ndarray]:
    """The six COADD columns of one synthetic spectrum (float32)."""
    rng = np.random.default_rng(seed)
    w = demo_wavelength()
    cont, model = _continuum(obj, w, rng)
    scale = 10 ** rng.uniform(2.0, 3.3)
    is_star = obj.cls == "STAR"
    flux_true = scale * model * (_telluric(w) if is_star else 1.0)
    # S/N per pixel scaled from the g-band value, worse at both ends (LAMOST blue edge is noisy).
    edge = 1 + 6 * np.exp(-(w - w[0]) / 60.0) + 1.5 * np.exp(-(w[-1] - w) / 150.0)
    sigma = scale * np.median(model) / obj.snr * np.sqrt(np.clip(model / np.median(model), 0.05, None)) * edge
    flux = flux_true + rng.normal(0, 1, w.size) * sigma
    ivar = 1.0 / sigma**2
    andmask = np.zeros(w.size, dtype=np.float32)
    ormask = np.zeros(w.size, dtype=np.float32)
    for _ in range(int(rng.integers(1, 4))):  # a few bad runs: cosmic rays / bad columns
        start = int(rng.integers(200, w.size - 20))
        run = slice(start, start + int(rng.integers(1, 6)))
        flux[run] = flux_true[run] + scale * rng.uniform(3, 8)
        ivar[run] = 0.0
        andmask[run] = 8.0  # "bad pixel" bit
        ormask[run] = 8.0
    sky = rng.integers(w.size // 2, w.size - 10)  # a flagged sky residual
    ormask[sky:sky + 3] = 2.0
    normalization = flux / np.clip(scale * cont, 1e-6, None)
    return {
        "FLUX": flux.astype(np.float32),
        "IVAR": ivar.astype(np.float32),
        "WAVELENGTH": w.astype(np.float32),
        "ANDMASK": andmask,
        "ORMASK": ormask,
        "NORMALIZATION": normalization.astype(np.float32),
    }


def _header(obj: DemoObject, i: int, file_name: str, rng: np.random.Generator) -> fits.Header:
    h = fits.Header()
    h["FILENAME"] = (file_name.removesuffix(".gz"), "")
    h["OBSID"] = (900000001 + i, "Unique number ID of this spectrum")
    h["AUTHOR"] = ("Spec-o3 demo", "synthetic spectrum, not an observation")
    h["DATA_V"] = ("SPEC-O3 DEMO (synthetic)", "Data release version")
    h["TELESCOP"] = ("LAMOST", "layout follows LAMOST LRS DR8+")
    h["PLANID"] = ("SPECO3DEMO", "Plan ID in use")
    h["RA"] = (round(float(rng.uniform(0, 360)), 6), "[deg] Right ascension of object")
    h["DEC"] = (round(float(rng.uniform(-10, 70)), 6), "[deg] Declination of object")
    h["FIBERID"] = (i + 1, "Fiber ID of Object")
    h["OBJNAME"] = (f"DEMO-{i + 1:03d}", "Name of object")
    h["OBJTYPE"] = ("Star" if obj.cls == "STAR" else "galaxy", "Object type from input catalog")
    h["HELIO"] = (True, "Heliocentric correction")
    h["VACUUM"] = (True, "Wavelengths are in vacuum")
    h["WFITTYPE"] = ("LOG-LINEAR", "Linear-log10 dispersion")
    h["COEFF0"] = (COEFF0, "Central wavelength (log10) of first pixel")
    h["COEFF1"] = (COEFF1, "Log10 dispersion per pixel")
    h["CLASS"] = (obj.cls, "Class of object")
    h["SUBCLASS"] = (obj.subclass, "Subclass of object")
    h["Z"] = (obj.z, "Redshift of object")
    h["Z_ERR"] = (0.00002, "Redshift error of object")
    h["ZFLAG"] = ("LASP", "Which method computes the redshift")
    for band, factor in zip("UGRIZ", (0.35, 1.0, 1.3, 1.4, 1.1), strict=True):
        h[f"SNR{band}"] = (round(obj.snr * factor, 2), f"SNR of {band.lower()} filter")
    h["DEMOTRUE"] = (obj.truth or "none", "demo: task class of this positive")
    return h


def write_demo_spectrum(path: Path, obj: DemoObject, i: int) -> Path:
    """Write one demo spectrum to ``path`` (LAMOST LRS new layout)."""
    rng = np.random.default_rng(20260601 + i)
    arrays = make_demo_arrays(obj, seed=20260601 + 1000 * i)
    primary = fits.PrimaryHDU(header=_header(obj, i, path.name, rng))
    cols = [fits.Column(name=name, format=f"{N_PIXELS}E", array=arr[np.newaxis, :]) for name, arr in arrays.items()]
    coadd = fits.BinTableHDU.from_columns(cols, name="COADD")
    tmp = path.with_name(path.name + ".part")
    fits.HDUList([primary, coadd]).writeto(tmp, overwrite=True)
    if path.suffix == ".gz":  # astropy decides compression by the name it writes to
        import gzip
        import shutil

        with open(tmp, "rb") as src, open(path, "wb") as raw, gzip.GzipFile(
            filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0
        ) as dst:  # mtime 0: byte-identical rewrites
            shutil.copyfileobj(src, dst)
        tmp.unlink()
    else:
        tmp.replace(path)
    return path


def demo_file_name(i: int) -> str:
    return f"spec-60001-SPECO3DEMO_sp01-{i + 1:03d}.fits.gz"


def write_demo_archive(folder: str | Path, progress: Callable[[int, int], None] | None = None) -> list[Path]:
    """Write the demo archive into ``folder`` once and return the spectrum files.

    A marker file records the demo version; an up-to-date archive is not rewritten. A ``candidates.vot``
    VOTable (obsid, file_name, task) of the positives is written beside the spectra as an example candidate list
    (an extension the archive index does not read as a spectrum).

    Raises
    ------
    DemoError
        If the folder cannot be written.
    """
    folder = Path(folder)
    paths = [folder / demo_file_name(i) for i in range(len(CATALOGUE))]
    marker = folder / MARKER
    try:
        if marker.is_file() and marker.read_text().strip() == DEMO_VERSION and all(p.is_file() for p in paths):
            return paths
        folder.mkdir(parents=True, exist_ok=True)
        for i, (obj, path) in enumerate(zip(CATALOGUE, paths, strict=True)):
            write_demo_spectrum(path, obj, i)
            if progress:
                progress(i + 1, len(paths))
        from astropy.table import Table

        chosen = [(i, obj, p) for i, (obj, p) in enumerate(zip(CATALOGUE, paths, strict=True)) if obj.truth]
        table = Table({"obsid": [900000001 + i for i, _, _ in chosen], "file_name": [p.name for _, _, p in chosen],
                       "task": [obj.truth for _, obj, _ in chosen]})
        write_votable(table, folder / "candidates.vot", "demo candidates")
        marker.write_text(DEMO_VERSION + "\n")
    except OSError as exc:
        raise DemoError(f"cannot write the demo archive in {folder}: {exc}") from exc
    log.info("demo archive written to %s (%d spectra)", folder, len(paths))
    return paths


# -- the scripted demo session (see module doc) -------------------------------------------------------------------
_DEMO_NAME = re.compile(r"spec-60001-SPECO3DEMO_sp01-(\d{3})\.fits")


def demo_truth_of(file_name: str | None) -> str | None:
    """The task class the demo spectrum in file ``file_name`` is a positive for ("" for negatives), None when it
    is not a demo spectrum's file (`demo_file_name`)."""
    m = _DEMO_NAME.match(file_name or "")
    if not m:
        return None
    i = int(m.group(1)) - 1
    return CATALOGUE[i].truth if 0 <= i < len(CATALOGUE) else None


def demo_truth(spectrum: Spectrum) -> str | None:
    """`demo_truth_of` the spectrum's file."""
    return demo_truth_of(spectrum.meta.file_name)


def is_demo_spectrum(spectrum: Spectrum | None) -> bool:
    return spectrum is not None and demo_truth(spectrum) is not None


def demo_refusal(file_name: str | None) -> str | None:
    """Why the scripted demo session does not run on the spectrum in ``file_name`` (None: it does)."""
    if demo_truth_of(file_name) is not None:
        return None
    return (f"{file_name or 'this spectrum'}: the scripted demo session is not a model; it runs only on the demo "
            "archive's spectra (`spec-o3 demo` writes them)")


def _windows(task: Task) -> list[tuple[str, float, float]]:
    out: list[tuple[str, float, float]] = []
    for line in task.lines[:6]:
        w = line.wavelength
        lo, hi = (w - 180, w + 60) if line.kind == "band" else (w - 60, w + 60)
        out.append((f"Zoom on {line.name} region", round(lo), round(hi)))
    if not out:
        out = [("Zoom on Hβ region", 4800, 4920), ("Zoom on Hα region", 6500, 6630)]
    return out[:2]


def demo_script(file_name: str | None, task: Task) -> list[str]:
    """The canned assistant outputs for the demo spectrum in ``file_name`` and ``task`` (see module doc)."""
    truth = demo_truth_of(file_name)
    target = task.target_class
    windows = _windows(task)
    outputs = []
    for i, (label, lo, hi) in enumerate(windows):
        lead = ("[Scripted demo — not a model.] This canned text shows how a session streams in. "
                f"The question is whether this is a {target}; " if i == 0 else "[Scripted demo.] ")
        outputs.append(f"<think>{lead}next I request the {label.removeprefix('Zoom on ')} "
                       f"({lo}–{hi} Å, rest frame) to show the zoom tool.</think>\n{tool_call_text([lo, hi], label)}")
    verdict = "YES" if truth == task.id else "NO"
    outputs.append(
        "<think>[Scripted demo.] A real model would weigh the zoomed features here. This scripted session "
        "instead reads the demo catalogue's ground truth for this synthetic spectrum.</think>\n"
        f"<answer>\\boxed{{{verdict}}}</answer> Scripted demo answer from the demo catalogue's ground truth, "
        "not a model's judgement."
    )
    return outputs


def demo_file_engine(file_name: str | None, task: Task, delay_s: float = 0.01) -> ScriptedEngine:
    """A `ScriptedEngine` replaying `demo_script` for the demo spectrum in ``file_name`` (a short delay per piece
    makes the streaming visible; the command line runs it without one)."""
    return ScriptedEngine(demo_script(file_name, task), delay_s=delay_s,
                          info=ModelInfo(model_id=SCRIPTED_LABEL, quant="none"))


def demo_engine(spectrum: Spectrum, task: Task, delay_s: float = 0.01) -> ScriptedEngine:
    """`demo_file_engine` of ``spectrum``'s file."""
    return demo_file_engine(spectrum.meta.file_name, task, delay_s)

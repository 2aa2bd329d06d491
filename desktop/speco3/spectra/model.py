"""The `Spectrum` type: one 1D spectrum with its metadata.

Wavelengths are always in Ångström, float64, ascending. ``mask`` is True where a pixel is bad.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Literal, TypeVar, overload

import numpy as np

Medium = Literal["air", "vacuum", "unknown"]
#: Which wavelengths: as observed, or in the rest frame ``λ / (1 + z)`` of the catalogue redshift.
Frame = Literal["rest", "observed"]

#: `SpectrumMeta.note` of a DESI sky fibre (the index keeps such entries out of the vetting queue by default).
SKY_FIBRE_NOTE = "sky fibre"
#: Start of `SpectrumMeta.note` of a file that holds the errors of another spectrum (the viewer labels its axis so).
ERROR_SPECTRUM_NOTE = "error spectrum"

#: The one S/N of every spectrum (`SpectrumMeta.snr`), computed by us for every survey and file: the median S/N
#: per pixel, flux·√ivar, over the good pixels (unmasked, finite, ivar > 0) whose observed wavelength lies in
#: `SNR_BAND`; over all good pixels when fewer than `SNR_MIN_PIXELS` lie there (a spectrum outside the optical).
#: None without an error column. The survey's own figure (LAMOST's g-band SNRG, SDSS's SN_MEDIAN_ALL, DESI's
#: MEDIAN_COADD_SNR_R …) is kept beside it as ``extra["survey_snr"]``, named by ``extra["survey_snr_name"]``.
SNR_BAND = (4000.0, 8000.0)
SNR_MIN_PIXELS = 50
SNR_LABEL = "S/N 4000–8000 Å"
SNR_DEFINITION = ("median S/N per pixel (flux·√ivar) over the good pixels at 4000–8000 Å observed, computed by "
                  "Spec-o3 for every survey (over all good pixels when fewer than 50 lie there)")


@dataclass(frozen=True)
class PipelineFit:
    """What the survey pipeline said beyond class, subclass and z (`SpectrumMeta.cls`, ``subclass``, ``redshift``):
    the z error, the redshift warning bits (SDSS ZWARNING, DESI redrock ZWARN, SDSS DR7 Z_WARNIN; 0 is clean) under
    the survey's own name, and redrock's DELTACHI2 (χ² gap to the next-best fit). None where the file has none
    (LAMOST states no warning bits)."""

    z_err: float | None = None
    zwarn: int | None = None
    zwarn_name: str | None = None
    deltachi2: float | None = None
    #: why the pipeline's model spectrum is not drawn though its fit is known (None: nothing to say)
    no_model: str | None = None


#: What a DESI redrock file holds and why its fit is not drawn: its REDSHIFTS table has the best fit only (Z, ZERR,
#: ZWARN, CHI2, SPECTYPE, SUBTYPE, DELTACHI2 and the COEFF of the template's terms); the model is those
#: coefficients times redrock's templates, which are not shipped with the app, and the next-best fits are written
#: only to redrock's rrdetails HDF5 files, which it does not read.
REDROCK_NO_MODEL = ("redrock model not drawn: its templates are not shipped; the file holds the best fit only "
                    "(next-best fits are in rrdetails files, not read)")


def pipeline_fit(meta: SpectrumMeta) -> PipelineFit:
    """The `PipelineFit` of a spectrum from the keys its reader kept in ``meta.extra`` (one home for the per-survey
    names: LAMOST Z_ERR; SDSS z_err, zwarning / z_warnin; DESI zerr, zwarn, deltachi2)."""
    e = meta.extra

    def num(*keys: str) -> float | None:
        for k in keys:
            v = e.get(k)
            try:
                f = float(v) if v is not None else None
            except (TypeError, ValueError):
                continue
            if f is not None and f == f and abs(f) != float("inf"):
                return f
        return None

    names = {"zwarning": "ZWARNING", "zwarn": "ZWARN", "z_warnin": "Z_WARNIN"}
    warn_key = next((k for k in names if num(k) is not None), None)
    zwarn = num(warn_key) if warn_key else None
    return PipelineFit(num("z_err", "zerr", "Z_ERR"), None if zwarn is None else int(zwarn),
                       names[warn_key] if warn_key else None, num("deltachi2"),
                       REDROCK_NO_MODEL if e.get("redrock_file") else None)


#: Largest magnitude a flux or wavelength value may have: squares, spans and S/N of values up to it stay finite in
#: float64. The readers replace values beyond it (1e308 from a damaged file or a bit flip) by NaN and mask them
#: (with a note); the renderer and the viewer leave such points out, as they leave out non-finite ones.
VALUE_LIMIT = 1e150


def within_limits(*arrays: np.ndarray) -> np.ndarray:
    """True where every array's value is finite and within ±`VALUE_LIMIT` (NaN compares False)."""
    ok = np.ones(np.shape(arrays[0]), dtype=bool)
    with np.errstate(invalid="ignore"):
        for a in arrays:
            ok &= np.abs(a) <= VALUE_LIMIT
    return ok


T = TypeVar("T")
W = TypeVar("W", float, np.ndarray)


def to_frame(wavelength: W, z: float, src: Frame, dst: Frame) -> W:
    """Wavelengths given in frame ``src`` as wavelengths in ``dst``: observed = rest × (1 + z).

    The one home of the shift between frames (the renderer's rest frame, the viewer's axes, the evidence windows
    kept in the observed frame, the tool's rest-frame ranges)."""
    if src == dst:
        return wavelength
    return wavelength * (1.0 + z) if dst == "observed" else wavelength / (1.0 + z)


class Deferred(Generic[T]):
    """A value computed on first access of a :class:`LazyField` (e.g. an S/N estimate nobody may ask for)."""

    __slots__ = ("compute",)

    def __init__(self, compute: Callable[[], T | None]):
        self.compute = compute


class LazyField(Generic[T]):
    """Data descriptor for a dataclass field that may hold a :class:`Deferred`: resolved once, then cached.

    Reading the field (attribute access, ``to_dict``, ``repr``, ``==``, pickling) always yields the value, never
    the Deferred; assigning a plain value replaces it.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> None: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T | None: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> T | None:
        if obj is None:
            return None  # the dataclass default
        value = obj.__dict__.get(self.name)
        if isinstance(value, Deferred):
            value = obj.__dict__[self.name] = value.compute()
        return value

    def __set__(self, obj: object, value: T | Deferred[T] | None) -> None:
        obj.__dict__[self.name] = value


@dataclass
class SpectrumMeta:
    """Catalogue and provenance metadata of a spectrum. Unknown values are None."""

    survey: str | None = None  # "LAMOST", "SDSS", "DESI", "generic", ...
    data_release: str | None = None
    object_id: str | None = None  # obsid / targetid / plate-mjd-fiber
    ra: float | None = None
    dec: float | None = None
    redshift: float | None = None
    redshift_source: str | None = None  # e.g. "LAMOST pipeline", "SPECOBJ", "redrock"
    cls: str | None = None  # STAR / GALAXY / QSO ...
    subclass: str | None = None
    snr: LazyField[float] = LazyField()  # SNR_DEFINITION, computed on first read (the survey's: extra["survey_snr"])
    file_name: str | None = None
    path: str | None = None
    hdu: str | int | None = None
    row: int | None = None
    index: int = 0  # position of the spectrum in its file (FILE#N)
    format: str | None = None  # registry name of the reader
    note: str | None = None  # e.g. "all pixels masked"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __getstate__(self) -> dict[str, Any]:  # pickle resolved values, never a Deferred's closure
        return {k: getattr(self, k) for k in self.__dict__}


def spectrum_address(path: str, index: int) -> str:
    """The address of the ``index``-th spectrum of the file at ``path``: ``PATH#N``, the key a spectrum is stored
    and traced under (`Spectrum.address`, `speco3.spectra.index.IndexEntry.address`)."""
    return f"{path}#{index}"


@dataclass
class Spectrum:
    """One 1D spectrum.

    Attributes
    ----------
    wavelength : ndarray of float64
        Wavelength in Å, ascending.
    flux : ndarray of float64
        Flux, as stored in the file (bad pixels are not altered; a value beyond ±1e150, which no real flux has,
        reads as NaN: see `VALUE_LIMIT`).
    ivar : ndarray of float64 or None
        Inverse variance (0 where unknown or bad), or None if the file has no error information.
    mask : ndarray of bool
        True where a pixel is bad.
    flux_unit : str
        Flux unit as given by the file ("" when unknown / arbitrary).
    medium : {"air", "vacuum", "unknown"}
        Wavelength medium.
    meta : SpectrumMeta
        Metadata.
    model : ndarray of float64 or None
        The survey pipeline's best-fit model flux on the same pixels (SDSS's ``model`` column), or None.
    """

    wavelength: np.ndarray
    flux: np.ndarray
    ivar: np.ndarray | None = None
    mask: np.ndarray = None  # type: ignore[assignment]  # None: all pixels good (__post_init__ makes the array)
    flux_unit: str = ""
    medium: Medium = "unknown"
    meta: SpectrumMeta = field(default_factory=SpectrumMeta)
    model: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.wavelength = np.asarray(self.wavelength, dtype=np.float64)
        self.flux = np.asarray(self.flux, dtype=np.float64)
        n = self.wavelength.shape[0]
        if self.wavelength.ndim != 1 or self.flux.shape != (n,):
            raise ValueError(f"wavelength {self.wavelength.shape} and flux {self.flux.shape} must be 1D of equal length")
        if self.ivar is not None:
            self.ivar = np.asarray(self.ivar, dtype=np.float64)
            if self.ivar.shape != (n,):
                raise ValueError(f"ivar shape {self.ivar.shape} does not match {n} pixels")
        if self.model is not None:
            self.model = np.asarray(self.model, dtype=np.float64)
            if self.model.shape != (n,):
                raise ValueError(f"model shape {self.model.shape} does not match {n} pixels")
        if self.mask is None:
            self.mask = np.zeros(n, dtype=bool)
        else:
            self.mask = np.asarray(self.mask, dtype=bool)
            if self.mask.shape != (n,):
                raise ValueError(f"mask shape {self.mask.shape} does not match {n} pixels")

    # -- derived ---------------------------------------------------------------------------------------
    @property
    def n_pixels(self) -> int:
        return int(self.wavelength.shape[0])

    @property
    def good(self) -> np.ndarray:
        """Boolean array: pixel not masked and flux finite."""
        return ~self.mask & np.isfinite(self.flux) & np.isfinite(self.wavelength)

    @property
    def masked_fraction(self) -> float:
        if self.n_pixels == 0:
            return 1.0
        return float(1.0 - self.good.mean())

    @property
    def is_empty(self) -> bool:
        """True when no pixel is usable (all masked or non-finite)."""
        return self.n_pixels == 0 or not bool(self.good.any())

    @property
    def z(self) -> float:
        """Catalogue redshift, 0 when unknown."""
        z = self.meta.redshift
        return float(z) if z is not None and np.isfinite(z) else 0.0

    @property
    def name(self) -> str:
        """Short display name: file name, plus ``#N`` for multi-spectrum files."""
        base = self.meta.file_name or "spectrum"
        return base if self.meta.index == 0 and not self.meta.extra.get("multi") else f"{base}#{self.meta.index}"

    @property
    def address(self) -> str:
        """Its address ``PATH#N`` (`spectrum_address`), or its name when it was not read from a file."""
        return spectrum_address(self.meta.path, self.meta.index) if self.meta.path else self.name

    def rest_wavelength(self) -> np.ndarray:
        """Wavelength divided by (1 + z) with the catalogue redshift."""
        return to_frame(self.wavelength, self.z, "observed", "rest")

    @property
    def sigma(self) -> np.ndarray | None:
        """1σ error from ivar (inf where ivar ≤ 0), or None."""
        if self.ivar is None:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.ivar > 0, 1.0 / np.sqrt(np.where(self.ivar > 0, self.ivar, 1.0)), np.inf)

"""The bridge to specutils (an optional dependency, imported only in this module).

``to_specutils(spectrum)`` gives a ``specutils.Spectrum`` (``Spectrum1D`` on specutils < 2): flux with its unit
(dimensionless when the file states none or one astropy cannot parse), the spectral axis in Å, the uncertainty
as an ``InverseVariance`` from ivar, the mask, the redshift, and Spec-o3's metadata under ``meta["speco3"]``.
``from_specutils(sp)`` is the reverse: any specutils 1D spectrum (wavelength, frequency or energy axis) becomes a
`Spectrum` in Å, ascending, with ivar from whatever uncertainty type it carries.

``register(reg)`` adds the ``specutils-fallback`` format at the lowest priority: for a file none of the
built-in readers know, specutils' own loaders are asked (only for files on disk, only when specutils is
installed); the format name says where the spectrum came from (``spec-o3 info`` shows it). Asking specutils
costs about 3 s per unknown file (it runs every loader's identifier), so the fallback is on only where a person
reads one file: `spec-o3 info` (`fallback_enabled`), or everywhere with ``SPECO3_SPECUTILS_FALLBACK=1`` (archive
scans, `vet`, the desktop app). Archive scans stay fast and list unknown files as unreadable otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import fields
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from speco3.errors import SpectrumReadError
from speco3.spectra.model import Medium, Spectrum, SpectrumMeta

if TYPE_CHECKING:  # astropy and specutils ship no type information: the names say what is passed
    from astropy.units import UnitBase
    from specutils import Spectrum1D

    from speco3.spectra.source import Source

log = logging.getLogger(__name__)

FALLBACK = "specutils-fallback"
_META_KEY = "speco3"


class SpecutilsMissing(SpectrumReadError):
    """specutils is not installed (``pip install 'spec-o3[specutils]'`` or ``pip install specutils``)."""

    def __init__(self, what: str = "specutils"):
        super().__init__(what, "specutils is not installed; install it with: pip install specutils")


def _specutils() -> ModuleType:
    try:
        import specutils
    except ImportError as exc:
        raise SpecutilsMissing() from exc
    return specutils


def spectrum_class() -> type[Any]:  # specutils has no type information
    """``specutils.Spectrum`` (specutils ≥ 2) or ``specutils.Spectrum1D``."""
    su = _specutils()
    return getattr(su, "Spectrum", None) or su.Spectrum1D


def _flux_unit(text: str) -> UnitBase:
    import astropy.units as u

    if not text.strip():
        return u.dimensionless_unscaled
    try:
        return u.Unit(text.strip(), format="fits", parse_strict="raise")
    except ValueError:
        try:
            return u.Unit(text.strip(), parse_strict="raise")
        except ValueError:
            return u.dimensionless_unscaled


def to_specutils(spec: Spectrum) -> Spectrum1D:
    """A specutils spectrum of ``spec`` (see module doc)."""
    import astropy.units as u
    from astropy.nddata import InverseVariance

    cls = spectrum_class()
    unit = _flux_unit(spec.flux_unit)
    meta: dict[str, Any] = {_META_KEY: spec.meta.to_dict(), "medium": spec.medium, "flux_unit_text": spec.flux_unit}
    kwargs: dict[str, Any] = {}
    if spec.ivar is not None:
        kwargs["uncertainty"] = InverseVariance(spec.ivar.copy(), unit=unit**-2)
    z = spec.meta.redshift
    if z is not None and math.isfinite(z):
        kwargs["redshift"] = float(z)
    return cls(flux=spec.flux.copy() * unit, spectral_axis=spec.wavelength.copy() * u.AA, mask=spec.mask.copy(),
               meta=meta, **kwargs)


def _ivar_of(sp: Spectrum1D, flux_unit: UnitBase | None) -> np.ndarray | None:
    unc = getattr(sp, "uncertainty", None)
    if unc is None:
        return None
    try:
        from astropy.nddata import InverseVariance

        with np.errstate(divide="ignore", invalid="ignore"):
            ivar = unc if isinstance(unc, InverseVariance) else unc.represent_as(InverseVariance)
            arr = np.asarray(ivar.array, dtype=np.float64)
        if ivar.unit is not None and flux_unit is not None:
            arr = (arr * ivar.unit).to_value(flux_unit**-2)
    except Exception as exc:  # an uncertainty type without a conversion: keep the spectrum, drop the errors
        log.debug("uncertainty %s not converted: %s", type(unc).__name__, exc)
        return None
    return np.where(np.isfinite(arr) & (arr > 0), arr, 0.0)


def from_specutils(sp: Spectrum1D, **meta: object) -> Spectrum:
    """A `Spectrum` from a specutils 1D spectrum; ``meta`` overrides `SpectrumMeta` fields."""
    import astropy.units as u

    flux_q = sp.flux
    if flux_q.ndim != 1:
        raise ValueError(f"only 1D spectra can be converted (flux has shape {tuple(flux_q.shape)})")
    wave = sp.spectral_axis.to_value(u.AA, equivalencies=u.spectral())
    flux = np.asarray(flux_q.value, dtype=np.float64)
    ivar = _ivar_of(sp, flux_q.unit)
    mask = np.zeros(flux.shape, dtype=bool) if sp.mask is None else np.asarray(sp.mask, dtype=bool).copy()
    order = np.argsort(wave, kind="stable")
    if not np.array_equal(order, np.arange(order.size)):
        wave, flux, mask = wave[order], flux[order], mask[order]
        ivar = ivar[order] if ivar is not None else None
    saved = sp.meta.get(_META_KEY) if isinstance(getattr(sp, "meta", None), dict) else None
    known = {f.name for f in fields(SpectrumMeta)}
    m = SpectrumMeta(**{k: v for k, v in (saved or {}).items() if k in known})
    z = getattr(sp, "redshift", None)
    zval = float(z.value) if z is not None and hasattr(z, "value") else None
    saved_z = m.redshift
    # specutils keeps z through a SpectralCoord (last-bit rounding): an unchanged z keeps the exact saved value
    changed = saved_z is None or not math.isclose(zval or 0.0, saved_z, rel_tol=1e-12, abs_tol=1e-15)
    if zval is not None and math.isfinite(zval) and (zval != 0.0 or saved_z is not None) and changed:
        m.redshift = zval
    for k, v in meta.items():
        setattr(m, k, v)
    unit_text = sp.meta.get("flux_unit_text") if isinstance(sp.meta, dict) else None
    if unit_text is None:
        unit_text = "" if flux_q.unit == u.dimensionless_unscaled else flux_q.unit.to_string()
    medium: Medium = "unknown"
    if isinstance(sp.meta, dict) and sp.meta.get("medium") in ("air", "vacuum"):
        medium = sp.meta["medium"]
    return Spectrum(wave, flux, ivar=ivar, mask=mask, flux_unit=unit_text, medium=medium, meta=m)


# -- fallback reader -------------------------------------------------------------------------------------------
def _available() -> bool:
    try:
        import specutils  # noqa: F401
    except ImportError:
        return False
    return True


def _loaders(path: str) -> list[str]:
    from specutils.io.registers import identify_spectrum_format

    try:
        found = identify_spectrum_format(path, dtype=spectrum_class())
    except Exception as exc:  # ambiguous or unreadable: specutils raises for both
        log.debug("specutils identify %s: %s", path, exc)
        return []
    return [found] if isinstance(found, str) else list(found or [])


_enabled = [os.environ.get("SPECO3_SPECUTILS_FALLBACK") == "1"]


@contextlib.contextmanager
def fallback_enabled(on: bool = True):
    """Within this block, files no built-in reader knows are offered to specutils' loaders."""
    before = _enabled[0]
    _enabled[0] = on
    try:
        yield
    finally:
        _enabled[0] = before


def identify_fallback(src: Source) -> bool:
    return _enabled[0] and src.path_str is not None and _available() and bool(_loaders(src.path_str))


def read_fallback(src: Source) -> list[Spectrum]:
    import warnings

    path = src.path_str
    if path is None:  # (identify_fallback took only a file on disk)
        raise SpectrumReadError(src.display, "specutils reads files on disk only")
    loaders = _loaders(path)
    cls = spectrum_class()
    errors = []
    for fmt in loaders:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sp = cls.read(path, format=fmt)
        except Exception as exc:
            errors.append(f"{fmt}: {type(exc).__name__}: {exc}")
            continue
        flux = sp.flux
        rows = [sp] if flux.ndim == 1 else [sp[i] for i in range(flux.shape[0])]
        out = [from_specutils(r) for r in rows]
        for s in out:
            s.meta.extra["specutils_loader"] = fmt
            s.meta.note = f"read by specutils' '{fmt}' loader (no Spec-o3 reader knows this layout)"
        return out
    raise SpectrumReadError(src.display, f"unknown layout: {src.describe()} (specutils' loaders failed too: "
                            + "; ".join(errors) + ")")


def register(reg) -> None:
    reg(FALLBACK, identify_fallback, read_fallback, -100)

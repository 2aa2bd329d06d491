"""Built-in readers. Each module has ``register(register_format)``; priorities decide the order of detection."""

from __future__ import annotations

from collections.abc import Callable

MODULES = ("lamost", "sdss", "desi", "survey_other", "iraf", "generic", "ascii")


def load_all(register: Callable[..., None]) -> None:
    """Register every built-in format with ``register(name, identify, read, priority)``."""
    import importlib

    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}").register(register)
    from speco3.spectra import specutils_io  # lowest priority: specutils' loaders, when installed

    specutils_io.register(register)

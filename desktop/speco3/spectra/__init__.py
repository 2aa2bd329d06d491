"""speco3.spectra: the Spectrum model, views, format registry and readers, archive index.

Public API::

    read_spectra(source) -> list[Spectrum]
    read_spectrum(source, index=None) -> Spectrum        # source: path, file object, "FILE#N", "FILE#<id>"
    read_file(source) -> FileContents                    # spectra + skipped entries + dependencies
    identify(source) -> str; formats() -> list[str]; register_format(name, identify, read, priority)
    parse_address("FILE#N") -> (path, selector)
    ArchiveIndex(db).scan(root) / .query(...) / .count(...)   # archive index (speco3.spectra.index)
"""

from __future__ import annotations

from speco3.errors import SpectrumReadError
from speco3.spectra.index import ArchiveIndex, ArchiveIndexError, IndexEntry, ScanSummary
from speco3.spectra.model import Frame, Spectrum, SpectrumMeta, to_frame
from speco3.spectra.registry import (
    CompanionFileError,
    FileContents,
    NoSpectraError,
    formats,
    identify,
    parse_address,
    read_file,
    read_spectra,
    read_spectrum,
    register_format,
)
from speco3.spectra.source import Source
from speco3.spectra.view import View

__all__ = [
    "ArchiveIndex",
    "ArchiveIndexError",
    "CompanionFileError",
    "IndexEntry",
    "ScanSummary",
    "FileContents",
    "Frame",
    "NoSpectraError",
    "Source",
    "Spectrum",
    "SpectrumMeta",
    "SpectrumReadError",
    "View",
    "formats",
    "identify",
    "parse_address",
    "read_file",
    "read_spectra",
    "to_frame",
    "read_spectrum",
    "register_format",
]

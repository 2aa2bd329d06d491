"""The export formats of a vetting store, in one registry: ``spec-o3 export``, the app's Export menu and its export
helper read it, so a new format is one `register` call.

Each `ExportFormat` declares its name (the command line's ``--NAME`` option and the app's format id), its title for
people (the menu entry), the file extension the save dialog suggests, a help line, where a given output goes
(`ExportFormat.target`: the HTML report makes a folder's ``index.html``) and its writer, ``(store, out, options) ->
path written``. Every writer writes atomically and refuses to replace the store itself (`check_target`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from speco3.errors import StoreError
from speco3.vetting.export import export
from speco3.vetting.report import RenderFn, report_path, write_report
from speco3.vetting.store import VettingStore


@dataclass(frozen=True)
class ExportOptions:
    """What every export is given: the task (None: all), whether an existing file is replaced, and for the HTML
    report how images are kept (embedded or copied beside it) and the renderer of its spectrum views (None: none
    drawn; `write_report`) and the folders beyond the configured ones its traces may be read from."""

    task: str | None = None
    overwrite: bool = False
    embed_images: bool = True
    render: RenderFn | None = None
    trace_roots: tuple[Path, ...] = ()


#: (store, out as given: a trailing "/" names a folder, options) -> the path written
Writer = Callable[[VettingStore, str | Path, ExportOptions], Path]


def _same_path(out: str | Path) -> Path:
    return Path(out).expanduser()


@dataclass(frozen=True)
class ExportFormat:
    """One export format (see module doc)."""

    name: str
    title: str
    extension: str
    help: str
    write: Writer
    target: Callable[[str | Path], Path] = _same_path

    def __call__(self, store: VettingStore, out: str | Path, options: ExportOptions = ExportOptions()) -> Path:
        """Write ``store`` to ``out`` in this format; returns where it went."""
        return self.write(store, out, options)


FORMATS: dict[str, ExportFormat] = {}


def register(fmt: ExportFormat) -> ExportFormat:
    """Add ``fmt`` to the registry (in menu order); a second format of the same name is refused."""
    if fmt.name in FORMATS:
        raise ValueError(f"export format {fmt.name!r} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


def export_format(name: str) -> ExportFormat:
    """The registered format ``name``. Raises `StoreError` naming the known ones."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise StoreError(f"unknown export format {name!r} ({', '.join(FORMATS)})")
    return fmt


def _table(fmt: str) -> Writer:
    def write(store: VettingStore, out: str | Path, options: ExportOptions) -> Path:
        return export(store, out, fmt, task=options.task, overwrite=options.overwrite)

    return write


def _report(store: VettingStore, out: str | Path, options: ExportOptions) -> Path:
    return write_report(store, out, task=options.task, embed_images=options.embed_images,
                        overwrite=options.overwrite, render=options.render,
                        trace_roots=options.trace_roots)


register(ExportFormat("csv", "CSV", "csv", "the table as CSV (UTF-8)", _table("csv")))
register(ExportFormat("votable", "VOTable", "vot", "the table as a VOTable", _table("votable")))
register(ExportFormat("fits", "FITS table", "fits", "the table as a FITS binary table (ASCII text)", _table("fits")))
register(ExportFormat("html", "HTML audit report", "html",
                      "HTML audit report: a folder (existing, or ending in /) gets OUT/index.html; any other OUT is "
                      "written as OUT.html", _report, target=report_path))

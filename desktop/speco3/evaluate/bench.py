"""SpecVI-Bench parquet files: one row per item, read with pyarrow into `BenchItem`s.

The columns of the SpecVI-Bench release: ``images`` (a list of ``{bytes, path}``, the first image the model
saw in training), ``data_source`` (carbon/cv/gm/ss/wd), ``prompt`` (the chat as a list of ``{content, role}``),
``reward_model.ground_truth`` (YES/NO), ``extra_info.name`` and
``extra_info.tools_kwargs.spectral_visualization_tool.create_kwargs`` with ``wavelength``, ``flux`` and
``redshift``. A missing column or one of the wrong type is a `BenchFormatError` naming the column; a bad row
(empty flux, lengths that differ, no finite point, an unknown label) becomes an item with ``error`` set, recorded as
a per-item input failure by the evaluation, never a crash.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speco3.agent.tasks import load_tasks
from speco3.errors import Speco3Error
from speco3.spectra.model import Spectrum, SpectrumMeta

TASKS = ("carbon", "cv", "gm", "ss", "wd")
KWARGS = "extra_info.tools_kwargs.spectral_visualization_tool.create_kwargs"
# column -> what it must be ("list<number>", "number", "string", "images", "prompt")
COLUMNS: dict[str, str] = {
    "data_source": "string",
    "reward_model.ground_truth": "string",
    "extra_info.name": "string",
    f"{KWARGS}.wavelength": "list<number>",
    f"{KWARGS}.flux": "list<number>",
    f"{KWARGS}.redshift": "number",
    "images": "images",
    "prompt": "prompt",
}
OPTIONAL = ("images", "prompt")


class BenchFormatError(Speco3Error):
    """A benchmark file that cannot be read as SpecVI-Bench (names the file and the column)."""


@dataclass
class BenchItem:
    """One benchmark row."""

    row: int
    name: str
    task: str
    truth: str | None  # YES / NO
    wavelength: np.ndarray
    flux: np.ndarray
    redshift: float | None
    image: bytes | None = None  # the shipped first image (PNG/JPEG bytes)
    prompt: str = ""  # the shipped first user turn's text
    error: str | None = None  # why this row cannot be evaluated

    @property
    def key(self) -> str:
        return f"specvi#{self.row}:{self.name}"

    def spectrum(self) -> Spectrum:
        """The row's arrays as a `Spectrum` (observed frame; the view's rest frame divides by 1+z)."""
        if self.error:
            raise ValueError(self.error)
        meta = SpectrumMeta(survey="SpecVI-Bench", redshift=self.redshift, file_name=self.name, object_id=self.name,
                            index=self.row, format="specvi-bench")
        order = np.argsort(self.wavelength, kind="stable")
        return Spectrum(self.wavelength[order], self.flux[order], meta=meta)


def _import_pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow is a core dependency
        raise Speco3Error("reading SpecVI-Bench parquet needs pyarrow, a dependency of spec-o3 (pip install pyarrow)") from exc
    return pa, pq


def _field(table, dotted: str, path: Path):
    """The column at ``dotted`` (struct fields joined by dots) as one Arrow array."""
    pa, _ = _import_pyarrow()
    head, *rest = dotted.split(".")
    if head not in table.column_names:
        raise BenchFormatError(f"{path}: missing column {dotted!r} (columns: {', '.join(table.column_names)})")
    arr = table.column(head).combine_chunks()
    walked = head
    for name in rest:
        if not pa.types.is_struct(arr.type):
            raise BenchFormatError(f"{path}: column {walked!r} is {arr.type}, expected a struct with field {name!r}")
        if arr.type.get_field_index(name) < 0:
            fields = ", ".join(arr.type.field(i).name for i in range(arr.type.num_fields))
            raise BenchFormatError(f"{path}: missing column {walked + '.' + name!r} (fields of {walked}: {fields})")
        arr = arr.field(name)
        walked += "." + name
    return arr


def _check_type(arr, dotted: str, kind: str, path: Path) -> None:
    pa, _ = _import_pyarrow()
    t = arr.type

    def numeric(x) -> bool:
        return pa.types.is_floating(x) or pa.types.is_integer(x) or pa.types.is_null(x)

    ok = {
        "string": lambda: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t),
        "number": lambda: numeric(t),
        "list<number>": lambda: (pa.types.is_list(t) or pa.types.is_large_list(t)) and numeric(t.value_type),
        "images": lambda: (pa.types.is_list(t) or pa.types.is_large_list(t)),
        "prompt": lambda: (pa.types.is_list(t) or pa.types.is_large_list(t)),
    }[kind]()
    if not ok:
        raise BenchFormatError(f"{path}: column {dotted!r} has type {t}, expected {kind}")


def _first_image(value) -> bytes | None:
    """Bytes of the first entry of an ``images`` cell (HF Image feature: ``{bytes, path}``; or raw bytes)."""
    if not value:
        return None
    first = value[0]
    if isinstance(first, dict):
        first = first.get("bytes")
    return bytes(first) if isinstance(first, (bytes, bytearray)) else None


def _prompt_text(value) -> str:
    """The text of the first user message of a ``prompt`` cell."""
    for msg in value or []:
        if isinstance(msg, dict) and msg.get("role") == "user":
            return str(msg.get("content") or "")
    return ""


def _row_error(task, truth, wl: np.ndarray, flux: np.ndarray, known: frozenset[str] = frozenset(TASKS)) -> str | None:
    if task not in known:
        return f"data_source {task!r} is not a known task ({', '.join(sorted(known))})"
    if truth not in ("YES", "NO"):
        return f"reward_model.ground_truth {truth!r} is not YES or NO"
    if flux.size == 0 or wl.size == 0:
        return "empty wavelength or flux array"
    if flux.size != wl.size:
        return f"wavelength has {wl.size} values but flux has {flux.size}"
    if not np.any(np.isfinite(flux) & np.isfinite(wl)):
        return "no finite (wavelength, flux) point"
    return None


def _numbers(arr, i: int) -> np.ndarray:
    cell = arr[i]
    if not cell.is_valid:
        return np.zeros(0)
    return np.asarray(cell.values.to_numpy(zero_copy_only=False), dtype=np.float64)


class BenchFile:
    """A SpecVI-Bench parquet file, checked on open (every column present with its type)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        pa, pq = _import_pyarrow()
        try:
            table = pq.read_table(self.path)
        except FileNotFoundError as exc:
            raise BenchFormatError(f"{self.path}: no such file") from exc
        except (pa.ArrowException, OSError) as exc:
            raise BenchFormatError(f"{self.path}: not a readable parquet file ({exc})") from exc
        self.n_rows = table.num_rows
        # the five SpecVI-Bench tasks and the user's own (a file made by `spec-o3 export-training` for a new class)
        self.known_tasks = frozenset(TASKS) | frozenset(load_tasks(errors=[]))
        self._cols = {}
        for dotted, kind in COLUMNS.items():
            try:
                arr = _field(table, dotted, self.path)
            except BenchFormatError:
                if dotted in OPTIONAL:
                    continue
                raise
            _check_type(arr, dotted, kind, self.path)
            self._cols[dotted] = arr

    def __len__(self) -> int:
        return self.n_rows

    def item(self, i: int) -> BenchItem:
        c = self._cols
        task = c["data_source"][i].as_py()
        truth = c["reward_model.ground_truth"][i].as_py()
        truth = truth.strip().upper() if isinstance(truth, str) else truth
        name = c["extra_info.name"][i].as_py() or f"row{i}"
        wl, flux = _numbers(c[f"{KWARGS}.wavelength"], i), _numbers(c[f"{KWARGS}.flux"], i)
        z = c[f"{KWARGS}.redshift"][i].as_py()
        image = _first_image(c["images"][i].as_py()) if "images" in c else None
        prompt = _prompt_text(c["prompt"][i].as_py()) if "prompt" in c else ""
        return BenchItem(i, str(name), str(task), truth, wl, flux, None if z is None else float(z), image, prompt,
                         _row_error(task, truth, wl, flux, self.known_tasks))

    def items(self, tasks: list[str] | None = None, limit: int | None = None) -> Iterator[BenchItem]:
        """Rows in file order, only ``tasks`` (all when None), at most ``limit`` (per task when tasks are mixed)."""
        counts: dict[str, int] = {}
        for i in range(self.n_rows):
            item = self.item(i)
            if tasks and item.task not in tasks:
                continue
            counts[item.task] = counts.get(item.task, 0) + 1
            if limit is not None and counts[item.task] > limit:
                continue
            yield item

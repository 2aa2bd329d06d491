"""Table model over the archive index with lazy paging (`canFetchMore` / `fetchMore` over ``query(limit, offset)``).

The model never holds more rows than the view has asked for, so an index of 100,000 spectra opens at once and
scrolls smoothly. Filters that the index knows (survey, class, z, S/N, free text) go into the SQL query; the
verdict-state filter needs the vetting store and is applied page by page. Sorting by the index's fields is done by
the index; sorting by model verdict or decision materialises the filtered rows once (a deliberate user action).
The queue of the vetting workflow is this model's row order; a candidate list replaces it with explicit entries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush, QColor

from speco3.agent.adaptive import describe_use
from speco3.gui.text import tooltip
from speco3.spectra.index import ArchiveIndex, IndexEntry
from speco3.spectra.model import SNR_DEFINITION, SNR_LABEL
from speco3.vetting.records import ModelVerdict

log = logging.getLogger(__name__)

PAGE = 256
# (IndexEntry attribute or "model"/"decision", header, index sort key or None when the index cannot sort by it)
COLUMNS: tuple[tuple[str, str, str | None], ...] = (
    ("name", "Spectrum", "key"),
    ("model", "Model", None),
    ("confidence", "p(YES)", None),
    ("decision", "Decision", None),
    ("survey", "Survey", "survey"),
    ("cls", "Class", "cls"),
    ("subclass", "Subclass", "subclass"),
    ("redshift", "z", "redshift"),
    ("snr", SNR_LABEL, "snr"),
    ("object_id", "Object ID", "object_id"),
    ("survey_snr", "Survey S/N", "survey_snr"),
    ("z_err", "z err", "z_err"),
    ("zwarn", "z warn", "zwarn"),
    ("deltachi2", "Δχ²", "deltachi2"),
)
#: Header tooltips: what a column holds where its header cannot say it all.
HEADER_TIPS = {"snr": f"{SNR_LABEL}: {SNR_DEFINITION}",
               "survey_snr": "The S/N the survey's own file states (LAMOST: SNRG, g band; SDSS: SN_MEDIAN_ALL; DESI: "
                             "MEDIAN_COADD_SNR_R …): a different definition per survey, for reference",
               "cls": "The survey pipeline's class", "subclass": "The survey pipeline's subclass",
               "redshift": "The survey pipeline's redshift (the catalogue z the rest frame uses)",
               "z_err": "The pipeline's redshift error",
               "zwarn": "The pipeline's redshift warning bits (SDSS ZWARNING, DESI redrock ZWARN, SDSS DR7 Z_WARNIN): "
                        "0 is clean; LAMOST files state none",
               "deltachi2": "redrock's DELTACHI2 (DESI): χ² difference to the next-best fit; small is ambiguous"}
COL = {name: i for i, (name, _h, _s) in enumerate(COLUMNS)}
VERDICT_STATES = ("any", "undecided", "decided", "YES", "NO", "UNSURE", "model YES", "model NO", "no model verdict",
                  "model abstained")
#: Data roles of the confidence column (drawn as a bar by `speco3.gui.archive_panel.ConfidenceDelegate`).
P_YES_ROLE = Qt.ItemDataRole.UserRole + 1
ABSTAINED_ROLE = Qt.ItemDataRole.UserRole + 2
_COLOURS = {"YES": QColor(40, 150, 60), "NO": QColor(190, 50, 50), "UNSURE": QColor(200, 140, 0)}
_SKIPPABLE = QColor(150, 150, 150)  # left unread by a certified stop

StateFn = Callable[[IndexEntry], tuple[str | None, str | None]]  # entry -> (model verdict, human decision)
ConfidenceFn = Callable[[IndexEntry], ModelVerdict | None]  # entry -> its latest model verdict or None


@dataclass
class Filters:
    """Filters of the archive table (None = no constraint)."""

    survey: str | None = None
    cls: str | None = None
    z_min: float | None = None
    z_max: float | None = None
    snr_min: float | None = None
    text: str | None = None
    state: str = "any"
    #: sky fibres and spectra with every pixel masked (`IndexEntry.unusable`) are left out unless this is set
    include_unusable: bool = False
    #: only spectra whose pipeline states no redshift warning (ZWARNING / ZWARN = 0, or none stated)
    zwarn_clean: bool = False
    #: the pipeline's z error at most this, and redrock's DELTACHI2 (DESI) at least this; a spectrum whose file
    #: states none is kept
    z_err_max: float | None = None
    deltachi2_min: float | None = None

    @classmethod
    def of(cls, saved: dict[str, Any]) -> Filters:
        """Filters as `dataclasses.asdict` stored them (a field missing or of another type: its default)."""
        out = cls()
        for f in fields(cls):
            value = saved.get(f.name)
            kind = {"bool": bool, "str": str, "str | None": str, "float | None": float}[str(f.type)]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
                setattr(out, f.name, value)
        return out

    def index_kwargs(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("survey", "cls", "z_min", "z_max", "snr_min", "text")}
        kwargs = {k: v for k, v in out.items() if v not in (None, "")}
        if not self.include_unusable:
            kwargs["usable"] = True
        if self.zwarn_clean:
            kwargs["zwarn_clean"] = True
        for name in ("z_err_max", "deltachi2_min"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        return kwargs

    def describe(self) -> str:
        """The active filters in words ("" when none narrows the table beyond the default)."""
        parts = [f"{name} {value}" for name, value in (("survey", self.survey), ("class", self.cls),
                                                        ("z ≥", self.z_min), ("z ≤", self.z_max),
                                                        ("S/N ≥", self.snr_min), ("z err ≤", self.z_err_max),
                                                        ("Δχ² ≥", self.deltachi2_min), ("text", self.text))
                 if value not in (None, "")]
        if self.state != "any":
            parts.append(self.state)
        if self.zwarn_clean:
            parts.append("no z warning")
        return ", ".join(parts)


#: A column's value (an `IndexEntry` field of `COLUMNS`).
ColumnValue = str | int | float | None


def entry_value(entry: IndexEntry, name: str) -> ColumnValue:
    """The value of column ``name`` (an `IndexEntry` attribute of `COLUMNS`) for ``entry``."""
    return getattr(entry, name)


@dataclass
class _Source:
    """Where rows come from: the index with filters, or an explicit list of entries."""

    index: ArchiveIndex | None = None
    filters: Filters = field(default_factory=Filters)
    sort: str | None = None
    descending: bool = False
    entries: list[IndexEntry] | None = None
    offset: int = 0  # next index offset to read
    total: int = 0  # rows the index reports for the SQL filters
    exhausted: bool = True


class ArchiveTableModel(QAbstractTableModel):
    """Lazy table of index entries; see module doc."""

    def __init__(self, state_fn: StateFn | None = None, parent=None):
        super().__init__(parent)
        self.state_fn: StateFn = state_fn or (lambda entry: (None, None))
        self.confidence_fn: ConfidenceFn = lambda entry: None
        #: store keys (``PATH#N``) a certified stop leaves unread (`speco3.vetting.stopping`): shown greyed
        self.skippable: set[str] = set()
        self.triage_order = "queue"  # `speco3.vetting.triage.ORDERS`: "queue", "p_yes" or "uncertainty"
        self._conf_cache: dict[str, ModelVerdict | None] = {}
        self._src = _Source()
        self._rows: list[IndexEntry] = []
        self._state_cache: dict[str, tuple[str | None, str | None]] = {}
        self._sort_col: int | None = None
        self._sort_desc = False

    # -- configuration ---------------------------------------------------------------------------------------
    def set_index(self, index: ArchiveIndex | None, filters: Filters | None = None) -> None:
        """Show ``index`` (with ``filters``, else the current ones)."""
        self._src.index = index
        self._src.entries = None
        if filters is not None:
            self._src.filters = filters
        self.refresh()

    def set_filters(self, filters: Filters) -> None:
        self._src.filters = filters
        self.refresh()

    def set_triage(self, order: str) -> None:
        """Order the queue by the model's confidence (`speco3.vetting.triage`): ``p_yes`` (likely positives first),
        ``uncertainty`` (closest to 0.5 first) or ``queue`` (the index / list order). Clears a column sort."""
        from speco3.vetting.triage import ORDERS

        if order not in ORDERS:
            raise ValueError(f"unknown triage order {order!r}")
        self.triage_order = order
        if order != "queue":
            self._sort_col = None
        self.refresh()

    def set_skippable(self, keys: set[str]) -> None:
        """Grey the rows of these store keys (a certified stop leaves them unread); an empty set greys none."""
        if keys != self.skippable:
            self.skippable = set(keys)
            if self._rows:
                self.dataChanged.emit(self.index(0, 0), self.index(len(self._rows) - 1, len(COLUMNS) - 1))

    def set_entries(self, entries: list[IndexEntry] | None) -> None:
        """Use an explicit entry list (a loaded candidate list) as the queue; None goes back to the index."""
        self._src.entries = list(entries) if entries is not None else None
        self.refresh()

    @property
    def filters(self) -> Filters:
        return self._src.filters

    @property
    def is_candidate_list(self) -> bool:
        return self._src.entries is not None

    def refresh(self) -> None:
        """Re-run the query from the first page (after a filter, sort or index change)."""
        self.beginResetModel()
        self._rows = []
        self._state_cache.clear()
        self._conf_cache.clear()
        src = self._src
        src.offset, src.total, src.exhausted = 0, 0, True
        if src.entries is not None:
            keep_unusable = src.filters.include_unusable
            rows = [e for e in src.entries if self._state_ok(e) and (keep_unusable or e.unusable is None)]
            self._rows = self._sorted_by_state(rows) if self._state_sort() else self._triaged(rows)
        elif src.index is not None:
            try:
                src.total = int(src.index.count(**src.filters.index_kwargs()))
            except Exception as exc:  # a bad filter value must not kill the table
                log.warning("index count failed: %s", exc)
                src.total = 0
            src.exhausted = src.total == 0
            if self._state_sort() or self.triage_order != "queue":
                while not src.exhausted:
                    self._read_page(PAGE * 8)
                self._rows = self._sorted_by_state(self._rows) if self._state_sort() else self._triaged(self._rows)
        self.endResetModel()
        if not self._rows and self.canFetchMore(QModelIndex()):
            self.fetchMore(QModelIndex())

    def rows_follow_states(self) -> bool:
        """True when which rows are shown, or their order, depends on verdicts and decisions (a state filter, a sort
        by model or decision, a triage order): a new verdict then calls for `refresh`, not only a repaint."""
        return self._src.filters.state != "any" or self._state_sort() or self.triage_order != "queue"

    def invalidate_states(self, keys: list[str] | None = None) -> None:
        """Forget cached verdict states (all, or of ``keys``) and repaint the state columns."""
        if keys is None:
            self._state_cache.clear()
            self._conf_cache.clear()
            rows: range | list[int] = range(len(self._rows))
        else:
            for k in keys:
                self._state_cache.pop(k, None)
                self._conf_cache.pop(k, None)
            wanted = set(keys)
            rows = [i for i, e in enumerate(self._rows) if e.key in wanted]
        for r in rows:
            self.dataChanged.emit(self.index(r, COL["model"]), self.index(r, COL["decision"]))

    # -- lazy paging ---------------------------------------------------------------------------------------------
    def _read_page(self, size: int = PAGE) -> list[IndexEntry]:
        src = self._src
        kwargs = src.filters.index_kwargs()
        sort_key = COLUMNS[self._sort_col][2] if self._sort_col is not None else None
        if sort_key:
            kwargs.update(sort=sort_key, descending=self._sort_desc)
        try:
            page = list(src.index.query(limit=size, offset=src.offset, **kwargs)) if src.index is not None else []
        except Exception as exc:
            log.warning("index query failed: %s", exc)
            page = []
        src.offset += len(page)
        if len(page) < size or src.offset >= src.total:
            src.exhausted = True
        new = [e for e in page if self._state_ok(e)]
        self._rows.extend(new)
        return new

    def canFetchMore(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> bool:  # noqa: N802, B008
        return not parent.isValid() and self._src.entries is None and not self._src.exhausted

    def fetchMore(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> None:  # noqa: N802, B008
        if parent.isValid() or self._src.exhausted:
            return
        start = len(self._rows)
        src = self._src
        pending: list[IndexEntry] = []
        # With a verdict-state filter a page may yield nothing: keep reading (bounded) until rows appear.
        for _ in range(64):
            before = len(self._rows)
            self._read_page()
            pending.extend(self._rows[before:])
            if pending or src.exhausted:
                break
        del self._rows[start:]
        if pending:
            self.beginInsertRows(QModelIndex(), start, start + len(pending) - 1)
            self._rows.extend(pending)
            self.endInsertRows()

    def fetch_next(self) -> bool:
        """Read the next page (the queue of `speco3.vetting.session.VettingSession`); False when all are loaded."""
        if not self.canFetchMore():
            return False
        self.fetchMore()
        return True

    def has_more(self) -> bool:
        """Whether pages are left to read (the session's queue: Next stays possible at the last loaded row)."""
        return self.canFetchMore()

    def fetch_all(self) -> None:
        while self.canFetchMore():
            self.fetchMore()

    # -- verdict states ------------------------------------------------------------------------------------------
    def state(self, entry: IndexEntry) -> tuple[str | None, str | None]:
        """(model verdict, human decision) of an entry, cached by entry key."""
        key = entry.key
        if key not in self._state_cache:
            try:
                self._state_cache[key] = self.state_fn(entry)
            except Exception as exc:
                log.warning("verdict state of %s unavailable: %s", key, exc)
                self._state_cache[key] = (None, None)
        return self._state_cache[key]

    def confidence(self, entry: IndexEntry) -> ModelVerdict | None:
        """The latest model verdict of an entry (with ``p_yes``, ``abstained`` …) or None, cached by entry key."""
        key = entry.key
        if key not in self._conf_cache:
            try:
                self._conf_cache[key] = self.confidence_fn(entry)
            except Exception as exc:
                log.warning("confidence of %s unavailable: %s", key, exc)
                self._conf_cache[key] = None
        return self._conf_cache[key]

    def _state_ok(self, entry: IndexEntry) -> bool:
        want = self._src.filters.state
        if want == "any":
            return True
        if want == "model abstained":
            mv = self.confidence(entry)
            return bool(mv is not None and mv.abstained)
        model, human = self.state(entry)
        model = model.split(" ", 1)[0] if model else None  # "YES (demo)": the scripted demo's answer counts too
        return {
            "undecided": human is None, "decided": human is not None,
            "YES": human == "YES", "NO": human == "NO", "UNSURE": human == "UNSURE",
            "model YES": model == "YES", "model NO": model == "NO",
            "no model verdict": model not in ("YES", "NO"),  # not run, or a run without a verdict to accept
        }.get(want, True)

    def _state_sort(self) -> bool:
        return self._sort_col is not None and COLUMNS[self._sort_col][2] is None

    def _triaged(self, rows: list[IndexEntry]) -> list[IndexEntry]:
        from speco3.vetting.triage import triage

        return triage(rows, self.triage_order, verdict_of=self.confidence)

    def _sorted_by_state(self, rows: list[IndexEntry]) -> list[IndexEntry]:
        if self._sort_col is None:  # (called only when sorting by a state column)
            return rows
        name = COLUMNS[self._sort_col][0]
        if name == "confidence":  # ascending: likely positives first (as the p_yes triage order)
            from speco3.vetting.triage import triage

            ranked = triage(rows, "p_yes", verdict_of=self.confidence)
            return ranked[::-1] if self._sort_desc else ranked
        which = 0 if name == "model" else 1
        order = {"YES": 0, "UNSURE": 1, "NO": 2, None: 3}
        return sorted(rows, key=lambda e: order.get(self.state(e)[which], 3), reverse=self._sort_desc)

    # -- Qt model API --------------------------------------------------------------------------------------------
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section][1]
        if role == Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS.get(COLUMNS[section][0])
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        entry = self._rows[index.row()]
        name = COLUMNS[index.column()][0]
        if name == "confidence":
            return self._confidence_data(self.confidence(entry), role)
        if name in ("model", "decision"):
            value = self.state(entry)[0 if name == "model" else 1]
            if role == Qt.ItemDataRole.DisplayRole:
                return value or ""
            if role == Qt.ItemDataRole.ForegroundRole and value in _COLOURS:
                return QBrush(_COLOURS[value])
            return None
        if (role == Qt.ItemDataRole.ForegroundRole and self.skippable
                and f"{entry.path}#{entry.index}" in self.skippable):  # the store key (gui.vetting.store_key)
            return QBrush(_SKIPPABLE)
        if role == Qt.ItemDataRole.DisplayRole:
            cell = entry_value(entry, name)
            if cell is None:
                return ""
            if name == "redshift":
                return f"{float(cell):.5f}"
            if name in ("snr", "survey_snr"):
                return f"{float(cell):.1f}"
            if name == "z_err":
                return f"{float(cell):.2g}"
            if name == "deltachi2":
                return f"{float(cell):.0f}"
            return str(cell)
        if role == Qt.ItemDataRole.ToolTipRole:  # the full path, and which spectrum of a multi-spectrum file
            return tooltip((entry.path or entry.key) + (f" #{entry.index}" if entry.path and entry.index else ""))
        if role == Qt.ItemDataRole.TextAlignmentRole and name in ("redshift", "snr", "survey_snr", "z_err", "zwarn",
                                                                  "deltachi2"):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    @staticmethod
    def _confidence_data(mv: ModelVerdict | None, role):
        p = None if mv is None else mv.p_yes
        abstained = bool(mv is not None and mv.abstained)
        if role == P_YES_ROLE:
            return p
        if role == ABSTAINED_ROLE:
            return abstained
        if role == Qt.ItemDataRole.DisplayRole:
            if p is None:
                return "abstained" if abstained else ""
            return f"{p:.2f}" + (" ?" if abstained else "")
        if role == Qt.ItemDataRole.ToolTipRole and mv is not None:
            outcomes = mv.outcomes or []
            k = mv.rollouts or 1
            text = (f"p_yes {p:.2f}" if p is not None else "no answer") + " · " + describe_use(k, mv.k_max,
                                                                                              mv.stop_reason)
            if outcomes:
                text += f" · {outcomes.count('YES')} YES / {outcomes.count('NO')} NO"
            if mv.agreement is not None:
                text += f" · agreement {mv.agreement:.2f}"
            if mv.p_yes_token is not None:
                text += f" · P(YES) at the answer token {mv.p_yes_token:.2f}"
            if mv.format_failures:
                text += f" · {mv.format_failures} format failures"
            if abstained:
                text += " · " + (mv.headline if k > 1 else f"no answer ({mv.outcome})")
            return text
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        self._sort_col = column if 0 <= column < len(COLUMNS) else None
        if self._sort_col is not None:
            self.triage_order = "queue"  # a column sort replaces the triage order
        self._sort_desc = order == Qt.SortOrder.DescendingOrder
        if self._src.entries is not None and not self._state_sort() and self._sort_col is not None:
            name = COLUMNS[self._sort_col][0]

            def keyf(e):
                v = entry_value(e, name)
                return (v is None, v if v is not None else 0)

            self._src.entries.sort(key=keyf, reverse=self._sort_desc)
        self.refresh()

    # -- rows ----------------------------------------------------------------------------------------------------
    def entry(self, row: int) -> IndexEntry | None:
        return self._rows[row] if 0 <= row < len(self._rows) else None

    def loaded_rows(self) -> int:
        return len(self._rows)

    def total_hint(self) -> int:
        """Rows the index reports for the SQL filters (an upper bound when a verdict filter is active)."""
        return len(self._rows) if self._src.entries is not None else max(self._src.total, len(self._rows))

    def row_of(self, key: str, fetch_limit: int = 20000) -> int | None:
        """Row of ``key``, fetching further pages (up to ``fetch_limit`` rows) when it is not loaded yet."""
        start = 0
        while True:
            for i in range(start, len(self._rows)):
                if self._rows[i].key == key:
                    return i
            start = len(self._rows)
            if not self.canFetchMore() or len(self._rows) >= fetch_limit:
                return None
            self.fetchMore()

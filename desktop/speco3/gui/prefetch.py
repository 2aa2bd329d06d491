"""Spectrum prefetch for fast next/previous (no Qt).

A small LRU cache of loaded `Spectrum` objects keyed by index key, filled by one background thread. After every
switch the main window asks for the neighbours of the current row; when the vetter moves on, the next spectrum is
already in memory and the switch only redraws (≤ 50 ms on a laptop).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from speco3.spectra.index import IndexEntry
from speco3.spectra.model import Spectrum

log = logging.getLogger(__name__)


def load_entry(entry: IndexEntry) -> Spectrum:
    """Load the spectrum of an index entry (``entry.load()``)."""
    return entry.load()


class SpectrumCache:
    """Thread-safe LRU cache with background loading.

    Parameters
    ----------
    loader : callable
        ``entry -> Spectrum``; may raise `speco3.errors.SpectrumReadError` (kept and re-raised on `get`).
    capacity : int
        Spectra kept in memory.
    """

    def __init__(self, loader: Callable[[IndexEntry], Spectrum] = load_entry, capacity: int = 24):
        self.loader = loader
        self.capacity = capacity
        self._items: OrderedDict[str, Spectrum | Exception] = OrderedDict()
        self._pending: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speco3-prefetch")
        self.hits = 0
        self.misses = 0

    def _store(self, key: str, value: Spectrum | Exception) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
            self._pending.pop(key, None)

    def _load(self, entry: IndexEntry) -> None:
        try:
            value: Spectrum | Exception = self.loader(entry)
        except Exception as exc:  # kept: get() re-raises it for the entry the vetter opens
            value = exc
        self._store(entry.key, value)

    def cached(self, key: str) -> bool:
        with self._lock:
            return key in self._items

    def get(self, entry: IndexEntry) -> Spectrum:
        """The spectrum of ``entry``: from the cache, from a pending prefetch, or loaded now."""
        key = entry.key
        with self._lock:
            value = self._items.get(key)
            fut = self._pending.get(key)
            if value is not None:
                self._items.move_to_end(key)
        if value is None and fut is not None:
            fut.result()
            with self._lock:
                value = self._items.get(key)
        if value is None:
            self.misses += 1
            self._load(entry)
            with self._lock:
                value = self._items[key]
        else:
            self.hits += 1
        if isinstance(value, Exception):
            raise value
        return value

    def prefetch(self, entries: list[IndexEntry]) -> None:
        """Load ``entries`` in the background (already cached or pending ones are skipped)."""
        for entry in entries:
            if entry is None:
                continue
            with self._lock:
                if entry.key in self._items or entry.key in self._pending:
                    continue
                self._pending[entry.key] = self._pool.submit(self._load, entry)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Block until pending prefetches are done (tests, benchmarks)."""
        with self._lock:
            futures = list(self._pending.values())
        for fut in futures:
            fut.result(timeout=timeout)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)  # a read in flight takes milliseconds

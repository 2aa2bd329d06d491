"""`EngineWorker`: one dedicated thread owns an engine; every call from any thread runs there.

llama.cpp's contexts and mtmd's helpers are not thread-safe, and `LlamaMtmdEngine` refuses calls from a thread
other than the one that loaded it. The worker is itself an `Engine`, so the agent loop, the CLI and the GUI use
it like the engine it wraps, from whichever thread they run on. ``on_token`` callbacks run on the worker thread
(a GUI forwards them with a queued signal); `stream` offers the same pieces as an iterator instead.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

from speco3.engine.base import (
    Engine,
    EngineStats,
    GenerationResult,
    Message,
    Part,
    Sampling,
    Slots,
    StepResult,
    TokenCallback,
)
from speco3.errors import EngineError

logger = logging.getLogger(__name__)

_STOP = object()
P = ParamSpec("P")
R = TypeVar("R")


class TokenStream:
    """Iterator over the text pieces of one generation; `result` gives the `GenerationResult` at the end."""

    def __init__(self, future: Future, pieces: queue.Queue):
        self._future, self._pieces = future, pieces

    def __iter__(self) -> Iterator[str]:
        while True:
            item = self._pieces.get()
            if item is _STOP:
                return
            yield item

    def result(self, timeout: float | None = None) -> GenerationResult:
        """The finished generation (re-raises the engine's error)."""
        return self._future.result(timeout)


class EngineWorker(Engine):
    """Run an engine on one dedicated thread.

    Parameters
    ----------
    engine : Engine
        The wrapped engine; from now on only the worker thread touches it.
    name : str
        Thread name (shows up in logs and debuggers).
    """

    def __init__(self, engine: Engine, name: str = "speco3-engine"):
        self.engine = engine
        self.settings, self.info = engine.settings, engine.info  # info again after load (a server names its model)
        self._jobs: queue.Queue = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ plumbing
    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # delivered to the caller
                future.set_exception(exc)

    def submit(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Queue ``fn(*args, **kwargs)`` on the worker thread and return its future."""
        if self._closed:
            raise EngineError("the engine worker is closed")
        future: Future[R] = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``fn`` on the worker thread and wait for it (directly when already on that thread)."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        return self.submit(fn, *args, **kwargs).result()

    # ------------------------------------------------------------------ Engine interface
    def load(self) -> None:
        self.call(self.engine.load)
        self.info = self.engine.info

    def reset(self, *args, **kwargs) -> None:
        self.call(self.engine.reset, *args, **kwargs)

    def extend(self, parts: Sequence[Part]) -> None:
        self.call(self.engine.extend, list(parts))

    def generate(self, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        return self.call(self.engine.generate, max_tokens=max_tokens, on_token=on_token, cancel=cancel)

    def stream(self, *, max_tokens: int | None = None, cancel: threading.Event | None = None) -> TokenStream:
        """Start a generation and return an iterator over its pieces (call from any thread but the worker)."""
        if threading.current_thread() is self._thread:
            raise EngineError("stream() would deadlock on the worker thread; use generate(on_token=...)")
        pieces: queue.Queue = queue.Queue()

        def job():
            try:
                return self.engine.generate(max_tokens=max_tokens, on_token=pieces.put, cancel=cancel)
            finally:
                pieces.put(_STOP)

        return TokenStream(self.submit(job), pieces)

    def stats(self) -> EngineStats:
        return self.call(self.engine.stats)

    def recorded_settings(self) -> dict:
        return self.engine.recorded_settings()

    def parallel_sequences(self) -> int:
        return self.engine.parallel_sequences()

    def open_pool(self) -> Slots:
        """The wrapped engine's pool of sequences, each call made on the worker thread."""
        return WorkerSlots(self.call(self.engine.open_pool), self)

    def close(self) -> None:
        """Close the engine on its thread, then stop the thread (idempotent)."""
        if self._closed:
            return
        try:
            self.call(self.engine.close)
        finally:
            self._closed = True
            self._jobs.put(_STOP)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=30)


class WorkerSlots(Slots):
    """Slots whose every call runs on the `EngineWorker` thread that owns their engine."""

    def __init__(self, slots: Slots, worker: EngineWorker):
        self._slots, self._worker = slots, worker
        self.capacity = slots.capacity

    def open(self, sampling: Sampling | None) -> int:
        return self._worker.call(self._slots.open, sampling)

    def extend(self, slot: int, parts: Sequence[Part], messages: Sequence[Message] | None = None) -> None:
        self._worker.call(self._slots.extend, slot, list(parts), messages)

    def begin(self, slot: int, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
              cancel: threading.Event | None = None) -> None:
        self._worker.call(self._slots.begin, slot, max_tokens=max_tokens, on_token=on_token, cancel=cancel)

    def step(self, rounds: int | None = None) -> list[StepResult]:
        return self._worker.call(self._slots.step, rounds)

    def release(self, slot: int) -> None:
        self._worker.call(self._slots.release, slot)

    def close(self) -> None:
        self._worker.call(self._slots.close)

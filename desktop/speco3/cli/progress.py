"""The progress line of ``vet`` and ``evaluate`` on stderr, drawn from the screening core's events."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from speco3.vetting.records import ModelVerdict
from speco3.vetting.screening import Event, Recorded, Skipped


class ProgressBar:
    """A one-line progress display on stderr (one line per item when stderr is not a terminal)."""

    def __init__(self, total: int, stream: TextIO | None = None):
        self.total = max(total, 0)
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.perf_counter()
        self.ran = 0
        self.reported = 0
        self.counts: dict[str, int] = {}
        self.last = "skipped (done before)"

    def event(self, event: Event) -> None:
        """The screening's ``on_event``: a spectrum skipped or recorded redraws the line; others are ignored."""
        if not isinstance(event, Skipped | Recorded):
            return
        self.reported += 1
        skipped = "skipped (done before)"
        if isinstance(event, Skipped) and event.elsewhere:
            skipped = "left to another run" if event.held else "screened by another run"
        self.item(event.item.key, self.reported, event.verdict if isinstance(event, Recorded) else None, skipped)

    def item(self, key: str, i: int, verdict: ModelVerdict | None, skipped: str = "skipped (done before)") -> None:
        """Item ``i`` ended with ``verdict`` (None: skipped, as ``skipped`` says): tally it and redraw."""
        self.last = skipped
        if verdict is not None:  # the run's outcome as every surface names it: "YES", "tie: 1 YES / 1 NO" …
            self.last = verdict.headline
            if verdict.outcome in ("input_error", "engine_error") and verdict.detail:  # why, as the store has it
                self.last += f" ({verdict.detail[:200]})"
            self.ran += 1
            self.counts[verdict.outcome] = self.counts.get(verdict.outcome, 0) + 1
        self.draw(key, i)

    def draw(self, key: str, i: int) -> None:
        """Redraw the line (or print one line per item without a terminal)."""
        elapsed = time.perf_counter() - self.t0
        per = elapsed / self.ran if self.ran else 0.0
        eta = per * (self.total - i) if self.ran else 0.0
        width = 24
        filled = int(width * i / self.total) if self.total else width
        tally = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {i}/{self.total} {tally} | "
                f"{per:.1f} s/spectrum | ETA {eta / 60:.1f} min")
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
        else:
            self.stream.write(f"{i}/{self.total} {key}: {self.last}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


__all__ = ["ProgressBar"]

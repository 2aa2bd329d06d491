"""speco3.evaluate: score a model build on SpecVI-Bench parquet files or on a vetting store's human decisions.

Beside `speco3.vetting` (it runs the agent through the screening core (`speco3.vetting.screening`) into an ordinary vetting store);
no Qt, no command line: the renderer is passed in, as to the agent loop.
"""

from __future__ import annotations

from speco3.evaluate.bench import BenchFile, BenchFormatError, BenchItem
from speco3.evaluate.metrics import summarize
from speco3.evaluate.run import EvalItem, RunResult, bench_items, evaluate_items, results

__all__ = ["BenchFile", "BenchFormatError", "BenchItem", "EvalItem", "RunResult", "bench_items", "evaluate_items",
           "results", "summarize"]

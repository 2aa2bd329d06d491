"""Path bootstrap of the benchmarks: puts the test kit (``tests/support``, package ``speco3_testkit``) on
``sys.path``. Benchmarks import the product and the test kit only, never test modules by file name.

Each ``bench_*.py`` imports this module first (``import _kit``; the script's folder is on ``sys.path``), offers
``--quick`` (small sizes, same code paths, same JSON keys; run by ``tests/test_benchmarks_quick.py``) and declares
the top-level keys of the JSON it prints in ``JSON_KEYS`` (the README's benchmark table lists them).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUPPORT = REPO / "tests" / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

"""Path bootstrap of the benchmarks: puts the test kit (``tests/support``, package ``speco3_testkit``) on
``sys.path``. Benchmarks import the product and the test kit only, never test modules by file name.

Each ``bench_*.py`` imports this module first (``import _kit``; the script's folder is on ``sys.path``), offers
``--quick`` (small sizes, same code paths, same JSON keys; run by ``tests/test_benchmarks_quick.py``) and declares
the top-level keys of the JSON it prints in ``JSON_KEYS`` (the manual's benchmark table lists them:
docs/contributing/benchmarks.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUPPORT = REPO / "tests" / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


def model_pair(args, tmp: str) -> tuple[str, str, str]:
    """(text GGUF, projector GGUF, label) a model benchmark runs on: the pair given with ``--text``/``--mmproj``,
    else the test kit's tiny pair at ``--quant`` (cached in ``$SPECO3_TEST_CACHE``, else in ``tmp``)."""
    if args.text and args.mmproj:
        return args.text, args.mmproj, "given"
    import os

    from speco3_testkit.tinymodel import tiny_gguf_pair  # builds (once) only when no pair is given

    text, mmproj = tiny_gguf_pair(os.environ.get("SPECO3_TEST_CACHE") or tmp, quant=args.quant)
    return str(text), str(mmproj), f"tiny Qwen2.5-VL ({args.quant})"

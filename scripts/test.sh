#!/usr/bin/env bash
# Set up (scripts/setup.sh --tests) and run lint, the import contract, the type check, the manual's build and the
# whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
export QT_QPA_PLATFORM=offscreen
export SPECO3_STRICT_SKIPS=1   # a skip fails the run unless the test is opt-in (tests/strict_skips.py)
.venv/bin/ruff check desktop converters models tests
.venv/bin/lint-imports
# type check (config: [tool.mypy] in pyproject.toml)
.venv/bin/mypy -p speco3_base -p speco3 -p speco3_models -p speco3_converters
# the manual: warnings are errors, links checked within the site (offline); screenshots made by the app
bash scripts/build-docs.sh
# Outer bound on the whole run: SIGABRT makes Python's faulthandler print every thread's stack, then the run ends.
# (macOS has no `timeout` unless coreutils is installed; the per-test watchdogs still apply there.)
bound=(); command -v timeout >/dev/null 2>&1 && bound=(timeout --signal=ABRT --kill-after=30 "${SPECO3_SUITE_TIMEOUT:-60m}")
${bound[@]+"${bound[@]}"} .venv/bin/python -m pytest "$@"

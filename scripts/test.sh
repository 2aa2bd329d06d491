#!/usr/bin/env bash
# Set up (scripts/setup.sh --tests) and run lint, the import contract and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
export QT_QPA_PLATFORM=offscreen
.venv/bin/ruff check desktop converters models tests
.venv/bin/lint-imports
.venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Build the manual: docs/ (Sphinx + MyST) → docs/_build/html, from clean, with warnings as errors and nitpicky
# cross-references (-W -n), the app's screenshots made by this build (docs/_ext/app_screenshots.py, offscreen), then
# an offline check of every link and anchor inside the site (docs/_ext/check_links.py; external links are listed,
# never fetched). scripts/test.sh runs it. PYTHON= picks another environment (default .venv, `setup.sh --tests`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
build=docs/_build
start=$SECONDS
rm -rf "$build"
QT_QPA_PLATFORM=offscreen "$PY" -m sphinx -W --keep-going -n -q -b html -d "$build/doctrees" docs "$build/html"
"$PY" docs/_ext/check_links.py "$build/html"
echo "docs: built in $((SECONDS - start)) s with no warnings: $build/html/index.html"

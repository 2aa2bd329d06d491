#!/usr/bin/env bash
# Set up and start the desktop app on the embedded demo archive (works without a model installed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/spec-o3-desktop --demo "$@"

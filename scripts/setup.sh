#!/usr/bin/env bash
# Create .venv and install Spec-o3 with what the app and its tests need. Idempotent.
# Usage: scripts/setup.sh [--tests]
set -euo pipefail
cd "$(dirname "$0")/.."
want_tests=0
[ "${1:-}" = "--tests" ] && want_tests=1

# Debian packages: Xvfb and the X/EGL libraries Qt needs (only when missing; needs root or sudo).
need_apt=()
command -v Xvfb >/dev/null 2>&1 || need_apt+=(xvfb)
if [ "$want_tests" = 1 ]; then
  command -v strace >/dev/null 2>&1 || need_apt+=(strace)                          # offline test watches syscalls
  command -v desktop-file-validate >/dev/null 2>&1 || need_apt+=(desktop-file-utils)  # packaging test
fi
for lib in libEGL.so.1 libGL.so.1 libxkbcommon.so.0 libxkbcommon-x11.so.0 libxcb-cursor.so.0 libfontconfig.so.1 libdbus-1.so.3; do
  ldconfig -p 2>/dev/null | grep -q "$lib" || need_apt+=("$lib")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    xvfb xauth libegl1 libgl1 libxkbcommon0 libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0 \
    libxcb-keysyms1 libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 \
    libfontconfig1 libdbus-1-3 fonts-dejavu-core x11-utils \
    $([ "$want_tests" = 1 ] && echo strace desktop-file-utils) >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# llama-cpp-python compiles llama.cpp (about 6 minutes on 2 cores; pip caches the wheel afterwards).
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
if [ "$want_tests" = 1 ]; then
  .venv/bin/python -m pip install -q -e ".[llm,hub,test]"
  # Optional parity against transformers: CPU torch (a local file on the project machines).
  if [ "${SPECO3_SKIP_PARITY:-0}" != 1 ]; then
    .venv/bin/python -m pip install -q "torch==2.13.0" "transformers>=4.50" || echo "warning: torch/transformers not installed; parity tests will be skipped" >&2
  fi
else
  .venv/bin/python -m pip install -q -e ".[llm,hub,samp,specutils]" || .venv/bin/python -m pip install -q -e .
fi

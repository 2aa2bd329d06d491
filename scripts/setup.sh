#!/usr/bin/env bash
# Create .venv and install Spec-o3 with what the app (and, with --tests, its test suite) needs. Idempotent.
# Usage: scripts/setup.sh [--tests] [--vulkan]
#
# System step, only on Linux with apt-get (Debian, Ubuntu): Qt's runtime libraries when they are really missing,
# and for --tests the test tools Xvfb, strace and desktop-file-utils. Elsewhere (macOS, other distributions) it
# prints a one-line hint and goes on to the virtual environment. Written for bash 3.2 (macOS's /bin/bash).
set -euo pipefail
cd "$(dirname "$0")/.."
want_tests=0
[ "${1:-}" = "--tests" ] && want_tests=1

# True when the dynamic linker can find the shared library $1: ldconfig's cache where ldconfig exists (it lives in
# /sbin, often not on a user's PATH), else the usual library folders.
lib_present() {
  local ldc d
  ldc=$(command -v ldconfig 2>/dev/null || echo /sbin/ldconfig)
  if [ -x "$ldc" ] && "$ldc" -p 2>/dev/null | grep -F "$1" >/dev/null; then return 0; fi  # no -q: no SIGPIPE
  for d in /lib /lib64 /usr/lib /usr/lib64 /usr/local/lib /lib/*-linux-gnu /usr/lib/*-linux-gnu; do
    [ -e "$d/$1" ] && return 0
  done
  return 1
}

need_pkgs=""
if [ "$(uname -s)" = Linux ]; then
  # PySide6's wheels bring Qt itself; these system libraries they load must come from the distribution.
  for lib in libEGL.so.1 libGL.so.1 libxkbcommon.so.0 libxkbcommon-x11.so.0 libxcb-cursor.so.0 libfontconfig.so.1 \
             libdbus-1.so.3; do
    if ! lib_present "$lib"; then
      need_pkgs="libegl1 libgl1 libxkbcommon0 libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0"
      need_pkgs="$need_pkgs libxcb-keysyms1 libxcb-randr0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0"
      need_pkgs="$need_pkgs libxcb-xkb1 libfontconfig1 libdbus-1-3 fonts-dejavu-core"
      break
    fi
  done
fi
if [ "$want_tests" = 1 ]; then
  command -v Xvfb >/dev/null 2>&1 || need_pkgs="$need_pkgs xvfb xauth x11-utils"         # the real-window tests
  command -v strace >/dev/null 2>&1 || need_pkgs="$need_pkgs strace"                        # offline syscall watch
  command -v desktop-file-validate >/dev/null 2>&1 || need_pkgs="$need_pkgs desktop-file-utils"  # packaging test
  # The real SAMP/VOTable peers (tests/javapeers.py): JSAMP's hub, snooper and messagesender, TOPCAT, Aladin, and
  # STILTS' votlint; each Debian package brings its Java runtime. Only the missing ones are installed.
  for tool in jsamp topcat aladin stilts; do
    command -v "$tool" >/dev/null 2>&1 || need_pkgs="$need_pkgs $tool"
  done
fi
if [ -n "$need_pkgs" ]; then
  if [ "$(uname -s)" = Linux ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing system packages:$need_pkgs" >&2
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086  # a word list on purpose
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need_pkgs >/dev/null
  else
    echo "setup: no apt-get here; skipping the system step (install the equivalents of:$need_pkgs)" >&2
  fi
fi

# Python 3.10+: $PYTHON, else the first of python3, python3.13 ... python3.10 that is new enough.
PY=""
for cand in ${PYTHON:-python3 python3.13 python3.12 python3.11 python3.10}; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null
  then PY=$cand; break; fi
done
if [ -z "$PY" ]; then
  echo "setup: Python 3.10 or newer is needed (python.org, Homebrew or your distribution); set PYTHON=/path/to/python3" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# llama-cpp-python compiles llama.cpp (about 6 minutes on 2 cores; pip caches the wheel afterwards).
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
if [ "$want_tests" = 1 ]; then
  # Everything the suite needs, parity against transformers included (CPU torch; a local file on the project
  # machines). Any failure here stops the setup: under SPECO3_STRICT_SKIPS=1 a missing package fails the tests.
  .venv/bin/python -m pip install -q -e ".[llm,hub,server,test,parity]"
  # llama.cpp's llama-server, built from the sources llama-cpp-python compiled (cached; about 8 minutes the first
  # time): the remote-engine tests run the tiny model on it. A failure stops the setup (strict skips would fail).
  scripts/build-llama-tools.sh .venv/bin/python >/dev/null
else
  .venv/bin/python -m pip install -q -e ".[llm,hub,server,samp,specutils,eval]" || {
    echo "setup: llama-cpp-python did not build; installing the app without the model engine" >&2
    .venv/bin/python -m pip install -q -e .
  }
fi
# Opt-in, in any position: --vulkan also builds .venv-vulkan, llama-cpp-python with llama.cpp's Vulkan backend
# (scripts/setup-vulkan.sh: Vulkan packages and newer headers; 15+ minutes on 2 cores; the wheel is cached).
case " $* " in *" --vulkan "*) scripts/setup-vulkan.sh ;; esac

#!/usr/bin/env bash
# Create .venv and install Spec-o3 with what the app (and, with --tests, its test suite) needs. Idempotent.
# Usage: scripts/setup.sh [--tests] [--vulkan] [--bundle]
#
# First the virtual environment (pip), then the system step, only on Linux: the libraries that the installed Qt
# really lacks, asked of the dynamic linker (`python -m speco3.syslibs`: ldd on Qt's X11 plugin, and on Wayland
# sessions its Wayland plugin, mapped to package names), and for --tests the test tools Xvfb, strace and
# desktop-file-utils. With apt-get (Debian, Ubuntu) they are installed (sudo when not root); elsewhere the exact
# dnf/pacman/apt command is printed and the setup goes on. Written for bash 3.2 (macOS's /bin/bash).
set -euo pipefail
cd "$(dirname "$0")/.."
want_tests=0
[ "${1:-}" = "--tests" ] && want_tests=1

# Python 3.10+: $PYTHON, else the first of python3, python3.13 ... python3.10 that is new enough.
. scripts/find-python.sh  # the script runs from the repository root
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
  # machines) and the manual's tools (docs: scripts/build-docs.sh). Any failure here stops the setup: under
  # SPECO3_STRICT_SKIPS=1 a missing package fails the tests.
  .venv/bin/python -m pip install -q -e ".[llm,hub,server,test,parity,docs]"
  # llama.cpp's llama-server, built from the sources llama-cpp-python compiled (cached; about 8 minutes the first
  # time): the remote-engine tests run the tiny model on it. A failure stops the setup (strict skips would fail).
  scripts/build-llama-tools.sh .venv/bin/python >/dev/null
else
  .venv/bin/python -m pip install -q -e ".[llm,hub,server,samp,specutils,eval]" || {
    echo "setup: llama-cpp-python did not build; installing the app without the model engine" >&2
    .venv/bin/python -m pip install -q -e .
  }
fi

# -- System step (after pip: it asks the installed Qt what it needs) ----------------------------------------------
need_pkgs=""
qt_hint=""
if [ "$(uname -s)" = Linux ]; then
  # Qt's runtime libraries that the dynamic linker cannot find (none when all are there), plus a font when there is
  # none at all; the soname -> package table lives in desktop/speco3/syslibs.py.
  wayland_opt=""; [ "${XDG_SESSION_TYPE:-}" = wayland ] && wayland_opt="--wayland"
  if command -v apt-get >/dev/null 2>&1; then
    need_pkgs=$(.venv/bin/python -m speco3.syslibs packages $wayland_opt)
  else
    qt_hint=$(.venv/bin/python -m speco3.syslibs hint $wayland_opt)
  fi
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
need_pkgs=$(echo $need_pkgs)  # trim
if [ -n "$need_pkgs" ]; then
  if [ "$(uname -s)" = Linux ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
      echo "setup: not root and no sudo: install the system packages yourself:" >&2
      echo "  apt-get install $need_pkgs" >&2
    else
      echo "setup: installing system packages: $need_pkgs" >&2
      $SUDO apt-get update -qq
      # shellcheck disable=SC2086  # a word list on purpose
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need_pkgs >/dev/null
    fi
  else
    echo "setup: no apt-get here; install the equivalents of: $need_pkgs" >&2
  fi
fi
[ -z "$qt_hint" ] || echo "setup: $qt_hint" >&2
if [ "$(uname -s)" = Linux ]; then
  .venv/bin/python -m speco3.syslibs check >&2 || echo "setup: the app will say the same when it starts" >&2
fi

# vLLM (opt-in, issue 28): with SPECO3_VLLM=1 also build .venv-vllm (vLLM's CPU build, its own torch and
# transformers; several GB), which the opt-in vLLM tests and benchmarks/bench_server.py use.
if [ "${SPECO3_VLLM:-}" = 1 ]; then
  scripts/setup-vllm.sh
fi

# Opt-in, in any position: --vulkan also builds .venv-vulkan, llama-cpp-python with llama.cpp's Vulkan backend
# (scripts/setup-vulkan.sh: Vulkan packages and newer headers; 15+ minutes on 2 cores; the wheel is cached).
case " $* " in *" --vulkan "*) scripts/setup-vulkan.sh ;; esac

# Opt-in, in any position: --bundle also builds .venv-bundle, one llama.cpp with dynamically loaded backends (every CPU
# variant, Vulkan and CUDA modules; scripts/build-bundle.sh, which takes --no-cuda when run itself; long: see docs/howto/gpu.md).
case " $* " in *" --bundle "*) scripts/build-bundle.sh ;; esac

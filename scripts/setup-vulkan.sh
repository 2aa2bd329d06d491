#!/usr/bin/env bash
# Opt-in: a second virtual environment, .venv-vulkan, whose llama-cpp-python is compiled with llama.cpp's Vulkan
# backend (GPUs of any vendor through their Vulkan driver; on a machine without one, Mesa's lavapipe: a Vulkan device
# that runs on the CPU). The default .venv (scripts/setup.sh) is never touched. Idempotent.
# Usage: scripts/setup-vulkan.sh            (or scripts/setup.sh --vulkan, which runs this after its own steps)
#
# Linux with apt-get (Debian 12 "bookworm" tested): installs the Vulkan loader, lavapipe, glslc and vulkaninfo.
# The llama.cpp that llama-cpp-python 0.3.36 vendors does NOT compile against bookworm's Vulkan headers 1.3.239
# ("'LayerSettingEXT' is not a member of 'vk'"); it does with the 1.4.309 headers of trixie's libvulkan-dev. So the
# script downloads that one package from the trixie suite of the same Debian mirror (a one-off apt sources list in a
# temporary folder: the system's apt configuration is untouched), unpacks it, with trixie's spirv-headers (ggml-vulkan
# asks CMake for SPIRV-Headers), into .venv-vulkan/vulkan-headers and points CMake at both; bookworm's loader
# (libvulkan1) runs the result. Elsewhere: install the Vulkan SDK and glslc,
# then set SPECO3_VULKAN_INCLUDE (the SDK's include folder) to skip the apt steps.
#
# The build takes 15+ minutes on 2 cores. The wheel is kept in ${XDG_CACHE_HOME:-~/.cache}/speco3/vulkan-wheels
# (pip's own wheel cache is keyed by the source URL only, so it would hand back the CPU build of the same version).
# At run time ggml ignores CPU-type Vulkan devices (lavapipe) unless GGML_VK_VISIBLE_DEVICES names them, e.g. =0.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=0.3.36
venv=.venv-vulkan
headers_dir=$PWD/$venv/vulkan-headers

PY=""
for cand in ${PYTHON:-python3 python3.13 python3.12 python3.11 python3.10}; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null
  then PY=$cand; break; fi
done
[ -n "$PY" ] || { echo "setup-vulkan: Python 3.10 or newer is needed; set PYTHON=/path/to/python3" >&2; exit 1; }

include=${SPECO3_VULKAN_INCLUDE:-}
if [ -z "$include" ]; then
  command -v apt-get >/dev/null 2>&1 || {
    echo "setup-vulkan: no apt-get here; install the Vulkan SDK and glslc, then set SPECO3_VULKAN_INCLUDE" >&2; exit 1; }
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  pkgs="libvulkan1 libvulkan-dev mesa-vulkan-drivers glslc vulkan-tools"
  missing=""
  for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    echo "setup-vulkan: installing system packages:$missing" >&2
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086  # a word list on purpose
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
  include=$headers_dir/usr/include
  if [ ! -f "$include/vulkan/vulkan.hpp" ]; then
    # The mirror the system already uses (deb822 "URIs:" or one-line "deb URI suite"), its debian (not -security) tree.
    mirror=$({ cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } |
      sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/\{0,1\}$/\1/p' \
             -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\/debian\)\/\{0,1\}[[:space:]].*/\2/p' |
      head -n 1)
    mirror=${mirror:-http://deb.debian.org/debian}
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/speco3-vulkan.XXXXXX") && chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$mirror" >"$tmp/trixie.sources"
    # deb822 needs the .sources suffix; apt only reads it from sourceparts, so the one-off file gets its own folder.
    mkdir -p "$tmp/parts" && mv "$tmp/trixie.sources" "$tmp/parts/"
    aptopts=(-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$tmp/parts" -o Dir::State::Lists="$tmp/lists"
             -o Dir::Cache="$tmp/cache" -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root)
    echo "setup-vulkan: fetching the Vulkan headers of trixie's libvulkan-dev from $mirror" >&2
    $SUDO apt-get "${aptopts[@]}" update -qq
    (cd "$tmp" && apt-get "${aptopts[@]}" download libvulkan-dev spirv-headers >/dev/null)
    rm -rf "$headers_dir" && mkdir -p "$headers_dir"
    dpkg-deb -x "$tmp"/libvulkan-dev_*.deb "$headers_dir"
    dpkg-deb -x "$tmp"/spirv-headers_*.deb "$headers_dir"
  fi
fi
[ -f "$include/vulkan/vulkan.hpp" ] || { echo "setup-vulkan: no vulkan/vulkan.hpp under $include" >&2; exit 1; }
spirv_args=""
[ -d "$include/../share/cmake/SPIRV-Headers" ] && spirv_args="-DSPIRV-Headers_DIR=$(cd "$include/../share/cmake/SPIRV-Headers" && pwd)"

[ -x $venv/bin/python ] || "$PY" -m venv $venv
$venv/bin/python -m pip install -q --upgrade pip
wheels=${SPECO3_VULKAN_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/speco3/vulkan-wheels}
mkdir -p "$wheels"
if ! ls "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "setup-vulkan: compiling llama-cpp-python $LLAMA_VERSION with Vulkan (15+ minutes on 2 cores)" >&2
  CMAKE_ARGS="-DGGML_VULKAN=ON -DGGML_NATIVE=OFF -DVulkan_INCLUDE_DIR=$include $spirv_args ${SPECO3_VULKAN_CMAKE_ARGS:-}" \
    $venv/bin/python -m pip wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_VERSION" -w "$wheels"
fi
$venv/bin/python -m pip install -q "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
# The app and its test dependencies (not [llm]: that would ask pip for the CPU build again).
$venv/bin/python -m pip install -q -e ".[hub,test]"
$venv/bin/python - <<'EOF'
import pathlib, llama_cpp
built = any(pathlib.Path(llama_cpp.__file__).parent.joinpath("lib").glob("libggml-vulkan*"))
print(f"setup-vulkan: llama-cpp-python {llama_cpp.__version__}, Vulkan backend built: {built}; GPU offload here: "
      f"{llama_cpp.llama_supports_gpu_offload()} (ggml uses a CPU-type Vulkan device such as lavapipe only with "
      "GGML_VK_VISIBLE_DEVICES=0)")
EOF

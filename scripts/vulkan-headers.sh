#!/usr/bin/env bash
# The Vulkan build prerequisites, shared by scripts/setup-vulkan.sh and scripts/build-bundle.sh; prints the include
# folder to pass to CMake as -DVulkan_INCLUDE_DIR (its ../share/cmake/SPIRV-Headers, when there, is for SPIRV-Headers_DIR).
# Usage: scripts/vulkan-headers.sh DEST        (DEST: the folder the trixie headers are unpacked into)
#
# Linux with apt-get (Debian 12 "bookworm" tested): installs the Vulkan loader, lavapipe, glslc and vulkaninfo.
# The llama.cpp that llama-cpp-python 0.3.36 vendors does NOT compile against bookworm's Vulkan headers 1.3.239
# ("'LayerSettingEXT' is not a member of 'vk'"); it does with the 1.4.309 headers of trixie's libvulkan-dev. So the
# script downloads that one package from the trixie suite of the same Debian mirror (a one-off apt sources list in a
# temporary folder: the system's apt configuration is untouched), unpacks it, with trixie's spirv-headers (ggml-vulkan
# asks CMake for SPIRV-Headers), into DEST; bookworm's loader (libvulkan1) runs the result. Elsewhere: install the
# Vulkan SDK and glslc, then set SPECO3_VULKAN_INCLUDE (the SDK's include folder) to skip the apt steps.
set -euo pipefail
headers_dir=${1:?usage: scripts/vulkan-headers.sh DEST}
include=${SPECO3_VULKAN_INCLUDE:-}
if [ -z "$include" ]; then
  command -v apt-get >/dev/null 2>&1 || {
    echo "vulkan-headers: no apt-get here; install the Vulkan SDK and glslc, then set SPECO3_VULKAN_INCLUDE" >&2; exit 1; }
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  pkgs="libvulkan1 libvulkan-dev mesa-vulkan-drivers glslc vulkan-tools"
  missing=""
  for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    echo "vulkan-headers: installing system packages:$missing" >&2
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086  # a word list on purpose
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
  mkdir -p "$headers_dir" && headers_dir=$(cd "$headers_dir" && pwd)
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
    echo "vulkan-headers: fetching the Vulkan headers of trixie's libvulkan-dev from $mirror" >&2
    $SUDO apt-get "${aptopts[@]}" update -qq
    (cd "$tmp" && apt-get "${aptopts[@]}" download libvulkan-dev spirv-headers >/dev/null)
    rm -rf "$headers_dir" && mkdir -p "$headers_dir"
    dpkg-deb -x "$tmp"/libvulkan-dev_*.deb "$headers_dir"
    dpkg-deb -x "$tmp"/spirv-headers_*.deb "$headers_dir"
  fi
fi
[ -f "$include/vulkan/vulkan.hpp" ] || { echo "vulkan-headers: no vulkan/vulkan.hpp under $include" >&2; exit 1; }
echo "$include"

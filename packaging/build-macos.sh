#!/usr/bin/env bash
# Build Spec-o3 Desktop as a macOS application (Spec-o3.app) with llama.cpp's Metal backend, and a .dmg.
#
#   bash packaging/build-macos.sh                 # Apple Silicon: Metal build of llama-cpp-python, .app, .dmg
#   bash packaging/build-macos.sh --skip-test     # do not run the bundle's self-test
#
# Needs: macOS 12+ with Xcode command line tools (clang, iconutil, codesign, hdiutil) and an arm64 Python
# 3.10+ (python.org or Homebrew; not an x86_64 Python under Rosetta, which builds a slow x86 llama.cpp).
# Signing and notarisation are optional, from the environment:
#   SPECO3_CODESIGN_IDENTITY="Developer ID Application: …"   PyInstaller signs every binary and the .app
#   SPECO3_ENTITLEMENTS=packaging/macos/entitlements.plist   hardened-runtime entitlements (default when signing)
#   SPECO3_NOTARY_PROFILE=<keychain profile>                 xcrun notarytool submit --wait, then stapler
# Without an identity PyInstaller ad-hoc signs the bundle (enough to run on the build Mac; Gatekeeper on other
# Macs asks the user to allow it in System Settings → Privacy & Security).
#
# Backend: Metal is on by default on Apple Silicon (llama-cpp-python's CMake sets GGML_METAL=ON and embeds the
# Metal shader library); the build passes CMAKE_ARGS="-DGGML_METAL=on" explicitly. On Intel Macs the same build
# runs on the CPU (and Metal on AMD GPUs where llama.cpp supports it).
#
# This script cannot run on the project's Linux build machines; it follows PyInstaller's BUNDLE/codesign
# documentation and llama-cpp-python's macOS install notes.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_TEST=1
[ "${1:-}" = "--skip-test" ] && RUN_TEST=0
[ "$(uname -s)" = Darwin ] || { echo "build-macos.sh runs on macOS only" >&2; exit 1; }

PY=${PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  python3 -m venv .venv
fi
arch=$(uname -m)
py_arch=$("$PY" -c "import platform; print(platform.machine())")
if [ "$arch" = arm64 ] && [ "$py_arch" != arm64 ]; then
  echo "this Python is $py_arch on an arm64 Mac (Rosetta): install an arm64 Python, or llama.cpp builds for x86" >&2
  exit 1
fi

export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_METAL=on}"
echo "== installing Spec-o3 with llama-cpp-python (CMAKE_ARGS='$CMAKE_ARGS'; compiles llama.cpp, minutes)"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -e ".[llm,hub,package]"
if ! ls "$("$PY" -c 'import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))')"/lib/libggml-metal* >/dev/null 2>&1 \
   && [ "$arch" = arm64 ]; then
  echo "== the installed llama-cpp-python has no Metal backend: recompiling it"
  "$PY" -m pip install --force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==0.3.36"
fi

echo "== icons (.icns with iconutil)"
"$PY" packaging/icons/render_icons.py

if [ -n "${SPECO3_CODESIGN_IDENTITY:-}" ]; then
  export SPECO3_ENTITLEMENTS="${SPECO3_ENTITLEMENTS:-$PWD/packaging/macos/entitlements.plist}"
fi
export SPECO3_TARGET_ARCH="${SPECO3_TARGET_ARCH:-$arch}"
echo "== PyInstaller (Spec-o3.app, target $SPECO3_TARGET_ARCH)"
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller \
  packaging/spec-o3.spec

APP=dist/Spec-o3.app
# The command line: same executable, started under the name spec-o3 (the launcher dispatches on it).
ln -sfn spec-o3-desktop "$APP/Contents/MacOS/spec-o3"
ln -sfn spec-o3-desktop dist/spec-o3/spec-o3
if [ -n "${SPECO3_CODESIGN_IDENTITY:-}" ]; then
  # The link changed the bundle after PyInstaller signed it: re-seal the outer signature.
  codesign --force --sign "$SPECO3_CODESIGN_IDENTITY" --options runtime \
    --entitlements "$SPECO3_ENTITLEMENTS" --timestamp "$APP"
else
  codesign --force --sign - "$APP"
fi
codesign --verify --strict --verbose=2 "$APP"

if [ "$RUN_TEST" = 1 ]; then
  echo "== self-test of the app bundle (clean environment)"
  gpu=""
  [ "$arch" = arm64 ] && gpu="--require-gpu"   # Apple Silicon: the Metal device must be found
  env -i HOME="$(mktemp -d)" PATH=/usr/bin:/bin "$APP/Contents/MacOS/spec-o3-desktop" --version
  env -i HOME="$(mktemp -d)" PATH=/usr/bin:/bin "$APP/Contents/MacOS/spec-o3-desktop" --self-test $gpu \
    --json dist/self-test.json
fi

version=$("$PY" -c "import sys; sys.path.insert(0, 'packaging'); import bundle_manifest as bm; print(bm.read_version())")
dmg="dist/Spec-o3-${version}-macos-${arch}.dmg"
echo "== disk image $dmg"
staging=$(mktemp -d)
cp -R "$APP" "$staging/"
ln -s /Applications "$staging/Applications"
hdiutil create -volname "Spec-o3 Desktop" -srcfolder "$staging" -ov -format UDZO "$dmg"
rm -rf "$staging"
if [ -n "${SPECO3_CODESIGN_IDENTITY:-}" ]; then
  codesign --force --sign "$SPECO3_CODESIGN_IDENTITY" --timestamp "$dmg"
  if [ -n "${SPECO3_NOTARY_PROFILE:-}" ]; then
    xcrun notarytool submit "$dmg" --keychain-profile "$SPECO3_NOTARY_PROFILE" --wait
    xcrun stapler staple "$dmg"
  fi
fi
echo "== $APP: $(du -sh "$APP" | cut -f1); $dmg: $(du -h "$dmg" | cut -f1)"

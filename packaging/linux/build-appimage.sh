#!/usr/bin/env bash
# Lay out an AppDir around a built bundle and turn it into an AppImage with appimagetool.
#
#   bash packaging/linux/build-appimage.sh dist/spec-o3 dist/Spec-o3-<version>-x86_64-cpu.AppImage
#
# appimagetool is not packaged by Debian and is downloaded from its GitHub releases, which this project's build
# machines cannot reach: put it on PATH (or set APPIMAGETOOL=/path/to/appimagetool-x86_64.AppImage) where it is
# available. Without it the AppDir is still written (dist/Spec-o3.AppDir) and the command to finish is printed.
#
# AppDir layout (AppImage spec: AppRun, one .desktop file and its icon at the top):
#   AppRun                      starts usr/lib/spec-o3/spec-o3-desktop, or the command line when the AppImage is
#                               called as spec-o3 (symlink) or with "cli" as first argument
#   spec-o3.desktop, spec-o3.png, .DirIcon
#   usr/lib/spec-o3/            the PyInstaller bundle
#   usr/share/applications/, usr/share/icons/hicolor/
set -euo pipefail
BUNDLE=${1:?usage: build-appimage.sh BUNDLE_DIR OUTPUT.AppImage}
OUTPUT=${2:?usage: build-appimage.sh BUNDLE_DIR OUTPUT.AppImage}
HERE=$(cd "$(dirname "$0")" && pwd)
APPDIR="$(dirname "$OUTPUT")/Spec-o3.AppDir"

rm -rf "$APPDIR"
mkdir -p "$APPDIR/usr/lib" "$APPDIR/usr/share"
cp -a "$BUNDLE" "$APPDIR/usr/lib/spec-o3"
cp -a "$BUNDLE/share/applications" "$BUNDLE/share/icons" "$APPDIR/usr/share/"
cp "$HERE/spec-o3.desktop" "$APPDIR/spec-o3.desktop"
cp "$HERE/../icons/png/spec-o3-256.png" "$APPDIR/spec-o3.png"
ln -s spec-o3.png "$APPDIR/.DirIcon"
cat > "$APPDIR/AppRun" <<'RUN'
#!/bin/sh
# AppImage entry point: the app, or the command line (as spec-o3, or "AppImage cli ARGS").
HERE=$(dirname "$(readlink -f "$0")")
BIN="$HERE/usr/lib/spec-o3"
case "$(basename "${ARGV0:-$0}")" in
  spec-o3|spec-o3.*) exec "$BIN/spec-o3" "$@" ;;
esac
if [ "${1:-}" = "cli" ]; then shift; exec "$BIN/spec-o3" "$@"; fi
exec "$BIN/spec-o3-desktop" "$@"
RUN
chmod 755 "$APPDIR/AppRun"
command -v desktop-file-validate >/dev/null && desktop-file-validate "$APPDIR/spec-o3.desktop"

TOOL=${APPIMAGETOOL:-$(command -v appimagetool || true)}
if [ -z "$TOOL" ]; then
  echo "AppDir ready: $APPDIR"
  echo "appimagetool not found; finish with:  ARCH=$(uname -m) appimagetool --no-appstream $APPDIR $OUTPUT"
  exit 0
fi
ARCH=$(uname -m) "$TOOL" --no-appstream "$APPDIR" "$OUTPUT"
echo "AppImage: $OUTPUT ($(du -h "$OUTPUT" | cut -f1))"

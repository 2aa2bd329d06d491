#!/usr/bin/env bash
# Install this Spec-o3 Desktop bundle for the current user (no root needed), or system-wide with --system.
#
#   ./install.sh              -> ~/.local/opt/spec-o3, commands in ~/.local/bin, menu entry and icons in ~/.local/share
#   sudo ./install.sh --system -> /opt/spec-o3, commands in /usr/local/bin, menu entry and icons in /usr/share
#
# Models, settings and caches are not part of the bundle: they live in the user folders (see README.txt) and
# survive updates. Run ./uninstall.sh (same option) to remove the program.
set -euo pipefail
SRC=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--system" ]; then
  OPT=/opt/spec-o3; BIN=/usr/local/bin; SHARE=/usr/share
else
  OPT=$HOME/.local/opt/spec-o3
  BIN=$HOME/.local/bin; SHARE=${XDG_DATA_HOME:-$HOME/.local/share}
fi
[ -x "$SRC/spec-o3-desktop" ] || { echo "run install.sh from inside the unpacked spec-o3 folder" >&2; exit 1; }

if [ "$SRC" != "$OPT" ]; then
  rm -rf "$OPT.new"
  mkdir -p "$(dirname "$OPT")"
  cp -a "$SRC" "$OPT.new"
  rm -rf "$OPT"
  mv "$OPT.new" "$OPT"
fi
mkdir -p "$BIN" "$SHARE/applications"
ln -sfn "$OPT/spec-o3-desktop" "$BIN/spec-o3-desktop"
ln -sfn "$OPT/spec-o3-desktop" "$BIN/spec-o3"
sed "s|^Exec=spec-o3-desktop|Exec=$OPT/spec-o3-desktop|; s|^TryExec=spec-o3-desktop|TryExec=$OPT/spec-o3-desktop|" \
  "$OPT/share/applications/spec-o3.desktop" > "$SHARE/applications/spec-o3.desktop"
(cd "$OPT/share/icons" && find hicolor -name 'spec-o3.*' -print0 | while IFS= read -r -d '' f; do
  mkdir -p "$SHARE/icons/$(dirname "$f")"; cp "$f" "$SHARE/icons/$f"; done)
command -v update-desktop-database >/dev/null && update-desktop-database -q "$SHARE/applications" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$SHARE/icons/hicolor" || true

echo "Spec-o3 Desktop installed in $OPT"
echo "  start it from the application menu, or run: $BIN/spec-o3-desktop"
echo "  check it:   $BIN/spec-o3 self-test"
case ":$PATH:" in *":$BIN:"*) ;; *) echo "  note: $BIN is not on your PATH" ;; esac

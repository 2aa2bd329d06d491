#!/usr/bin/env bash
# Remove Spec-o3 Desktop installed by install.sh (same option: --system for a system-wide install).
#
#   ./uninstall.sh [--system] [--purge]
#
# --purge also deletes this user's models, settings and caches (the platformdirs folders below, or the
# SPECO3_DATA_DIR / SPECO3_CONFIG_DIR / SPECO3_CACHE_DIR overrides). Without it they are kept, so a reinstall
# finds its models again.
set -euo pipefail
SYSTEM=0; PURGE=0
for arg in "$@"; do
  case "$arg" in
    --system) SYSTEM=1 ;;
    --purge) PURGE=1 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done
if [ "$SYSTEM" = 1 ]; then
  OPT=/opt/spec-o3; BIN=/usr/local/bin; SHARE=/usr/share
else
  OPT=$HOME/.local/opt/spec-o3; BIN=$HOME/.local/bin; SHARE=${XDG_DATA_HOME:-$HOME/.local/share}
fi
for link in "$BIN/spec-o3-desktop" "$BIN/spec-o3"; do
  if [ -L "$link" ] && [ "$(readlink "$link")" = "$OPT/spec-o3-desktop" ]; then rm -f "$link"; fi
done
rm -f "$SHARE/applications/spec-o3.desktop"
find "$SHARE/icons/hicolor" -path '*/apps/spec-o3.*' -delete 2>/dev/null || true
rm -rf "$OPT"
command -v update-desktop-database >/dev/null && update-desktop-database -q "$SHARE/applications" || true
echo "Spec-o3 Desktop removed from $OPT"

DATA=${SPECO3_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/spec-o3}
CONFIG=${SPECO3_CONFIG_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/spec-o3}
CACHE=${SPECO3_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spec-o3}
if [ "$PURGE" = 1 ]; then
  rm -rf "$DATA" "$CONFIG" "$CACHE"
  echo "deleted models and data ($DATA), settings ($CONFIG) and caches ($CACHE)"
else
  echo "kept your models and data ($DATA), settings ($CONFIG) and caches ($CACHE); --purge deletes them"
fi

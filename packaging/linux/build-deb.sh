#!/usr/bin/env bash
# Turn a built Linux bundle into a .deb (dpkg-deb only; run by packaging/build-linux.sh).
#
#   bash packaging/linux/build-deb.sh BUNDLE_DIR NEEDS_JSON VERSION LABEL OUT_DIR
#
# NEEDS_JSON is `python packaging/bundle_manifest.py linux-needs BUNDLE_DIR`'s output: its "depends" (the
# distribution's own packages for every library the bundle's code needs from the system, from speco3.syslibs'
# table; "new | old" where Debian 13 / Ubuntu 24.04 renamed a package) become the package's Depends, so
# `apt-get install ./spec-o3_*.deb` brings them; its "recommends" (what only a GPU backend module needs: the Vulkan
# loader) become Suggests. What the package installs:
#   /opt/spec-o3/                               the bundle (launcher, spec-o3-desktop.bin, _internal/)
#   /usr/bin/spec-o3, /usr/bin/spec-o3-desktop  links to the launcher (the command line and the app)
#   /usr/share/applications/spec-o3.desktop     menu entry (opens .fits, .fit, .fts, .fits.gz, .fit.gz)
#   /usr/share/mime/packages/spec-o3.xml        MIME types for FITS and gzipped FITS files
#   /usr/share/icons/hicolor/*/apps/spec-o3.*   icons
#   /usr/share/doc/spec-o3/                     copyright, README
# postinst/postrm refresh the desktop, MIME and icon caches where those tools are installed (the shared-mime-info,
# desktop-file-utils and hicolor packages' triggers do it too). Removal leaves each user's models, settings and
# vetting stores (postrm names the folders); nothing else of the package stays behind.
set -euo pipefail
BUNDLE=${1:?usage: build-deb.sh BUNDLE_DIR NEEDS_JSON VERSION LABEL OUT_DIR}
NEEDS=${2:?}; VERSION=${3:?}; LABEL=${4:?}; OUTDIR=${5:?}
HERE=$(cd "$(dirname "$0")" && pwd)
ICONS=$HERE/../icons
command -v dpkg-deb >/dev/null || { echo "build-deb: dpkg-deb is needed (Debian/Ubuntu: the dpkg package)" >&2; exit 1; }

arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root/DEBIAN" "$root/opt" "$root/usr/bin" "$root/usr/share/applications" "$root/usr/share/mime/packages" \
  "$root/usr/share/doc/spec-o3" "$root/usr/share/icons/hicolor/scalable/apps"
cp -a "$BUNDLE" "$root/opt/spec-o3"
# the bundle's own copies of the desktop files and the per-user installer are not needed under /opt
rm -rf "$root/opt/spec-o3/share" "$root/opt/spec-o3/install.sh" "$root/opt/spec-o3/uninstall.sh"
ln -s /opt/spec-o3/spec-o3-desktop "$root/usr/bin/spec-o3-desktop"
ln -s /opt/spec-o3/spec-o3-desktop "$root/usr/bin/spec-o3"
cp "$HERE/spec-o3.desktop" "$root/usr/share/applications/spec-o3.desktop"
cp "$HERE/spec-o3-mime.xml" "$root/usr/share/mime/packages/spec-o3.xml"
cp "$ICONS/spec-o3.svg" "$root/usr/share/icons/hicolor/scalable/apps/spec-o3.svg"
for png in "$ICONS"/png/spec-o3-*.png; do
  n=$(basename "$png" .png); n=${n#spec-o3-}
  mkdir -p "$root/usr/share/icons/hicolor/${n}x${n}/apps"
  cp "$png" "$root/usr/share/icons/hicolor/${n}x${n}/apps/spec-o3.png"
done
cp "$HERE/README-bundle.txt" "$root/usr/share/doc/spec-o3/README"
cat >"$root/usr/share/doc/spec-o3/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: spec-o3-desktop
Comment: Spec-o3 Desktop with its Python runtime, Qt (PySide6, LGPL-3.0), astropy, NumPy, pyqtgraph and
 llama.cpp (MIT) frozen by PyInstaller into /opt/spec-o3. Each bundled distribution's licence is in its
 *.dist-info folder under /opt/spec-o3/_internal.
EOF
# Files are root's, directories 755, executables keep their mode.
find "$root" -type d -exec chmod 755 {} +
depends=$(python3 -c 'import json, sys; print(", ".join(json.load(open(sys.argv[1]))["depends"]))' "$NEEDS")
# what only the GPU backend modules need (the Vulkan loader): suggested, not recommended (apt installs Recommends,
# and libvulkan1 recommends Mesa's drivers, LLVM included: 25 packages more on a bare Debian 12); without it the
# app runs on the CPU and its notice names the missing loader and its package
suggests=$(python3 -c 'import json, sys
print("".join(r + ", " for r in json.load(open(sys.argv[1])).get("recommends", [])))' "$NEEDS")
installed_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: spec-o3
Version: $VERSION+$LABEL
Architecture: $arch
Maintainer: Spec-o3 Desktop contributors <spec-o3@localhost>
Installed-Size: $installed_kib
Depends: $depends
Recommends: shared-mime-info, desktop-file-utils
Suggests: ${suggests}mesa-vulkan-drivers
Section: science
Priority: optional
Homepage: https://github.com/spec-o3/spec-o3-desktop
Description: inspect FITS spectra and vet rare-object candidates, offline
 Spec-o3 Desktop opens local archives of 1D spectra (LAMOST, SDSS, DESI, generic
 FITS), shows them, and lets an astronomer vet candidates with the help of a
 vision-language model run through llama.cpp on this machine. This package
 carries the whole application (Python, Qt, llama.cpp: $LABEL build) in
 /opt/spec-o3; the model files are added by the user (spec-o3 models import).
EOF
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q /usr/share/applications || true
  command -v update-mime-database >/dev/null 2>&1 && update-mime-database /usr/share/mime || true
  command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t -f /usr/share/icons/hicolor || true
fi
exit 0
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
case "$1" in
  remove|purge)
    command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q /usr/share/applications || true
    command -v update-mime-database >/dev/null 2>&1 && update-mime-database /usr/share/mime || true
    command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t -f /usr/share/icons/hicolor || true
    kept=""
    for home in /root /home/*; do
      for d in .local/share/spec-o3 .config/spec-o3 .cache/spec-o3 .local/state/spec-o3; do
        [ -d "$home/$d" ] && kept="$kept $home/$d"
      done
    done
    echo "Spec-o3 Desktop removed. Each user's models, vetting stores, settings and logs are kept (~/.local/share/spec-o3, ~/.config/spec-o3, ~/.cache/spec-o3, ~/.local/state/spec-o3)${kept:+; here:$kept}. Delete those folders to remove them too."
    ;;
esac
exit 0
EOF
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"
mkdir -p "$OUTDIR"
out=$OUTDIR/spec-o3_${VERSION}+${LABEL}_${arch}.deb
dpkg-deb --root-owner-group -Zgzip --build "$root" "$out" >/dev/null
echo "$out"

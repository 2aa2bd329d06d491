#!/usr/bin/env bash
# Pack the CUDA add-on of a bundle with every backend as a module (run by packaging/build-linux.sh): the CUDA module
# (libggml-cuda.so) with the redistributable CUDA runtime it needs (libcudart.so.13, libcublas.so.13,
# libcublasLt.so.13, from NVIDIA's PyPI wheels: scripts/build-bundle.sh), never the driver's libcuda. The main
# package stays small (cuBLASLt alone is about 500 MB); a machine with an NVIDIA GPU adds this.
#
#   bash packaging/linux/build-addon.sh ADDON_DIR VERSION LABEL OUT_DIR
#
# ADDON_DIR is laid out like the bundle (ADDON_DIR/_internal/llama_cpp/lib/...). Output, one path per line:
#   OUT_DIR/spec-o3-cuda_<VERSION>+<LABEL>_<arch>.deb   files under /opt/spec-o3/_internal/llama_cpp/lib;
#                                                      Depends: spec-o3 (= <VERSION>+<LABEL>), the same build
#   OUT_DIR/spec-o3-cuda-addon-<VERSION>-linux-<arch>-<LABEL>.tar.gz
#                                                      spec-o3/_internal/llama_cpp/lib/...: unpack it where the
#                                                      main tarball was unpacked (tar -C DIR -xzf ...)
# Removing the add-on (apt-get remove spec-o3-cuda, or deleting its files) leaves the app on Vulkan or the CPU.
set -euo pipefail
ADDON=${1:?usage: build-addon.sh ADDON_DIR VERSION LABEL OUT_DIR}
VERSION=${2:?}; LABEL=${3:?}; OUTDIR=${4:?}
lib=$ADDON/_internal/llama_cpp/lib
[ -f "$lib/libggml-cuda.so" ] || { echo "build-addon: $lib/libggml-cuda.so missing" >&2; exit 1; }
for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
  [ -f "$lib/$so" ] || { echo "build-addon: $lib/$so missing (scripts/build-bundle.sh puts NVIDIA's runtime there)" >&2
                         exit 1; }
done
if ls "$lib" | grep -qE '^libcuda\.so'; then
  echo "build-addon: $lib holds the driver's libcuda: it must come from the user's driver" >&2; exit 1
fi
command -v dpkg-deb >/dev/null || { echo "build-addon: dpkg-deb is needed" >&2; exit 1; }
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
mkdir -p "$OUTDIR"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# the tarball: the same relative paths as the main tarball's folder
mkdir -p "$stage/tar/spec-o3/_internal/llama_cpp"
cp -a "$lib" "$stage/tar/spec-o3/_internal/llama_cpp/lib"
tarball=$OUTDIR/spec-o3-cuda-addon-${VERSION}-linux-$(uname -m)-${LABEL}.tar.gz
tar -C "$stage/tar" -czf "$tarball" spec-o3

root=$stage/deb
mkdir -p "$root/DEBIAN" "$root/opt/spec-o3/_internal/llama_cpp" "$root/usr/share/doc/spec-o3-cuda"
cp -a "$lib" "$root/opt/spec-o3/_internal/llama_cpp/lib"
cat >"$root/usr/share/doc/spec-o3-cuda/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: spec-o3-desktop (CUDA add-on)
Comment: llama.cpp's CUDA backend module (MIT) and NVIDIA's CUDA runtime libraries libcudart, libcublas and
 libcublasLt, redistributed under the NVIDIA CUDA Toolkit EULA (Attachment A, redistributable software), as
 shipped in NVIDIA's nvidia-cuda-runtime and nvidia-cublas wheels. The NVIDIA driver (libcuda) is not included.
EOF
find "$root" -type d -exec chmod 755 {} +
installed_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: spec-o3-cuda
Version: $VERSION+$LABEL
Architecture: $arch
Maintainer: Spec-o3 Desktop contributors <spec-o3@localhost>
Installed-Size: $installed_kib
Depends: spec-o3 (= $VERSION+$LABEL)
Section: science
Priority: optional
Homepage: https://github.com/spec-o3/spec-o3-desktop
Description: NVIDIA CUDA backend for Spec-o3 Desktop
 llama.cpp's CUDA module for Spec-o3 Desktop's $LABEL build, with the CUDA 13
 runtime it needs (cudart, cuBLAS, cuBLASLt). It needs the NVIDIA driver
 (libcuda, 580 or newer for CUDA 13), which this package does not carry. Without
 a GPU or driver the app says why CUDA is unused and runs on Vulkan or the CPU.
EOF
deb=$OUTDIR/spec-o3-cuda_${VERSION}+${LABEL}_${arch}.deb
dpkg-deb --root-owner-group -Zgzip --build "$root" "$deb" >/dev/null
echo "$deb"
echo "$tarball"

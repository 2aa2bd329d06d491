#!/bin/sh
# Spec-o3 Desktop's Linux launcher (the bundle's spec-o3-desktop; spec-o3 is a link to it). Before any native code
# of the bundle is loaded it checks what the bundle was built to need, and says what is missing instead of a loader
# error ("GLIBC_2.34 not found") or an illegal-instruction crash:
#   * the C library: glibc @GLIBC@ or newer (the newest GLIBC_ symbol version any bundled library asks for);
#   * the processor: the instruction sets the bundled code was compiled for (@CPU_FLAGS@ as /proc/cpuinfo names them).
# Then it runs the PyInstaller executable (spec-o3-desktop.bin): the command line when started as spec-o3, else the
# app. POSIX sh only: this must run where nothing else of the bundle can.
#
# Test inputs (the real ones otherwise): SPECO3_CHECK_GLIBC (a version such as 2.31, or "none": not glibc),
# SPECO3_CHECK_CPUINFO (a file in /proc/cpuinfo's format). SPECO3_SKIP_CHECKS=1 skips both.
need_glibc="@GLIBC@"
need_flags="@CPU_FLAGS@"
build_label="@LABEL@"

self=$(readlink -f "$0")
here=${self%/*}
case "${0##*/}" in
  spec-o3|spec-o3.*) entry=cli ;;
  *) entry=app ;;
esac

fail() {
  printf 'spec-o3: this %s build of Spec-o3 Desktop cannot run on this machine: %s\n' "$build_label" "$1" >&2
  exit 70
}

version_lt() {  # version_lt A B: true when A < B (dotted numbers)
  [ "$1" = "$2" ] && return 1
  lowest=$(printf '%s\n%s\n' "$1" "$2" | sort -t. -k1,1n -k2,2n -k3,3n | head -n 1)
  [ "$lowest" = "$1" ]
}

if [ "${SPECO3_SKIP_CHECKS:-0}" != 1 ]; then
  have=${SPECO3_CHECK_GLIBC:-}
  if [ -z "$have" ]; then
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed -n 's/^glibc \([0-9.]*\).*/\1/p')
    [ -n "$have" ] || have=$(ldd --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9]*\.[0-9][0-9]*\)$/\1/p')
    [ -n "$have" ] || have=none
  fi
  if [ "$have" = none ]; then
    fail "it needs the GNU C library (glibc) $need_glibc or newer, and none was found (a musl system such as Alpine?). Use a glibc distribution, or run Spec-o3 from a source checkout (see its README)."
  elif version_lt "$have" "$need_glibc"; then
    fail "it needs glibc $need_glibc or newer, and this system has glibc $have. Use a newer distribution, or run Spec-o3 from a source checkout (see its README)."
  fi
  cpuinfo=${SPECO3_CHECK_CPUINFO:-/proc/cpuinfo}
  if [ -n "$need_flags" ] && [ -r "$cpuinfo" ]; then
    flags=" $(sed -n 's/^flags[[:space:]]*:[[:space:]]*//p' "$cpuinfo" | head -n 1) "
    if [ "$flags" != "  " ]; then
      missing=""
      for f in $need_flags; do
        case "$flags" in *" $f "*) ;; *) missing="$missing $f" ;; esac
      done
      [ -z "$missing" ] || fail "its processor lacks the instruction set(s)${missing} (this build's code is compiled for: $need_flags)."
    fi
  fi
fi

SPECO3_LAUNCH_AS=$entry
export SPECO3_LAUNCH_AS
exec "$here/spec-o3-desktop.bin" "$@"

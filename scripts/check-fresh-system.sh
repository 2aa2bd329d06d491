#!/usr/bin/env bash
# Opt-in proof that the README's two commands work on a fresh Debian 12 machine: in a clean root made by
# `debootstrap --variant=minbase bookworm`, clone the repository (its committed HEAD) and run
#   demo:  bash scripts/run-demo.sh   under Xvfb; a screenshot of the X screen once the window is shown
#   tests: bash scripts/test.sh       (with --tests; 20+ minutes on 2 cores)
# in two variants: "bare" (only the README's prerequisites: python3, git, a compiler, cmake, plus Xvfb and the
# screenshot tools) and "seven" (bare + libEGL, libGL, libxkbcommon(-x11), libxcb-cursor, libfontconfig, libdbus:
# the machine on which the old setup skipped apt and Qt aborted).
#
# Usage (root, Debian/Ubuntu host with network to the Debian registry):
#   scripts/check-fresh-system.sh [--variant bare|seven|both] [--tests] [--work DIR] [--repo PATH] [--keep]
# (--keep: leave the roots in DIR for a look afterwards; each run makes new ones.)
# Results in DIR/results (default DIR: /var/tmp/speco3-fresh): demo-VARIANT.png, demo-VARIANT.log,
# test-VARIANT.log and summary.txt (one line per run with its wall time). Exit status 0 when every run passed.
#
# What the host lends the root, so that nothing is compiled twice and the registry proxy is trusted: its CA bundle
# ($PIP_CERT, copied under another name after the root's ca-certificates is installed), its pip settings (pip config
# files and the local index/wheel folders they name, read-only) and pip's cache (llama-cpp-python's wheel), and
# ~/.cache/speco3 (the llama.cpp tools that scripts/build-llama-tools.sh builds). /proc, /sys and /dev are mounted
# into the root and unmounted on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
variant=both; tests=0; work=/var/tmp/speco3-fresh; repo=$here; keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant=$2; shift 2 ;;
    --tests) tests=1; shift ;;
    --work) work=$2; shift 2 ;;
    --repo) repo=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--variant bare|seven|both] [--tests] [--work DIR] [--repo PATH] [--keep]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "check-fresh-system: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null 2>&1 || apt-get install -y -qq debootstrap >/dev/null
commit=$(git -C "$repo" rev-parse HEAD)
results=$work/results
mkdir -p "$results"

# The Debian mirror of this machine: the first URIs: line of a deb822 sources file (not the security archive),
# else the first `deb` line of sources.list.
mirror=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1)
[ -n "$mirror" ] || mirror=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
pip_cache=$(python3 -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")
tools_cache=${XDG_CACHE_HOME:-$HOME/.cache}/speco3
mkdir -p "$pip_cache" "$tools_cache"

mounts=()
cleanup() {
  local i
  for ((i=${#mounts[@]}-1; i>=0; i--)); do umount -R "${mounts[$i]}" 2>/dev/null || umount -l "${mounts[$i]}" 2>/dev/null || true; done
  mounts=()
}
trap cleanup EXIT
bind() {  # bind [ro] SRC DEST
  local ro=""; [ "$1" = ro ] && { ro=1; shift; }
  mkdir -p "$2"
  mount --rbind "$1" "$2"; mounts+=("$2")
  [ -n "$ro" ] && mount -o remount,bind,ro "$2"
  return 0
}

# Everything pip's configuration names on this machine (config files, local indexes, find-links, constraints).
pip_paths() {
  python3 -m pip config list 2>/dev/null | grep -oE "(file://)?/[^' ]+" | sed -e 's|^file://||' -e 's|/simple/*$||' |
    sort -u   # an index folder .../simple: its parent, which holds the files the index links to
  python3 -m pip config debug 2>/dev/null | awk '/^  [^ ].*, exists: True/ {sub(",", "", $1); print $1}'
}

make_root() {  # make_root VARIANT ROOT: a new minbase Debian 12 every run (a root that ran setup is not fresh)
  local v=$1 root=$2
  if grep -qF " $root/" /proc/mounts; then echo "check-fresh-system: $root has mounts; stop" >&2; exit 1; fi
  rm -rf "$root"
  echo "check-fresh-system: debootstrap bookworm from $mirror into $root" >&2
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$results/debootstrap-$v.log" 2>&1
}

provision() {  # provision VARIANT ROOT: the README's prerequisites (the root is mounted)
  local v=$1 root=$2 p
  # Only apt's network settings (Acquire::...), not the host's hooks.
  grep -l '^Acquire::' /etc/apt/apt.conf.d/* 2>/dev/null | while read -r f; do cp "$f" "$root/etc/apt/apt.conf.d/"; done || true
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  in_root "$root" apt-get update -qq
  in_root "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates >/dev/null
  cp "$ca" "$root/usr/local/share/host-registry-ca.pem"   # after ca-certificates (it rewrites its own bundle)
  # The README's prerequisites, and what this check needs to show and photograph the window.
  in_root "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3 python3-venv python3-dev git build-essential cmake xvfb xauth x11-utils imagemagick >/dev/null
  if [ "$v" = seven ]; then
    in_root "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libegl1 libgl1 libxkbcommon0 libxkbcommon-x11-0 libxcb-cursor0 libfontconfig1 libdbus-1-3 >/dev/null
  fi
  for p in /etc/pip.conf /etc/xdg/pip "$HOME/.config/pip" "$HOME/.pip"; do
    [ -e "$p" ] && mkdir -p "$root$(dirname "$p")" && cp -a "$p" "$root$(dirname "$p")/"
  done
  return 0
}

in_root() {  # in_root ROOT CMD... (with the registry CA and pip's environment of the host)
  local root=$1; shift
  local cert=/usr/local/share/host-registry-ca.pem envs=() v
  [ -e "$root$cert" ] && envs+=(PIP_CERT=$cert SSL_CERT_FILE=$cert REQUESTS_CA_BUNDLE=$cert)
  for v in $(env | grep -oE '^PIP_[A-Z_]+' | grep -v '^PIP_CERT$'); do envs+=("$v=${!v}"); done
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb ${envs[@]+"${envs[@]}"} "$@"
}

mount_root() {  # /proc, /sys, /dev, the host's caches and pip's local indexes
  local root=$1 p
  mkdir -p "$root/proc"; mount -t proc proc "$root/proc"; mounts+=("$root/proc")
  bind /sys "$root/sys"
  bind /dev "$root/dev"
  bind "$pip_cache" "$root/root/.cache/pip"
  bind "$tools_cache" "$root/root/.cache/speco3"
  while read -r p; do
    case "$p" in /etc/*|"$HOME"/*|"$root"*) continue ;; esac
    if [ -d "$p" ]; then bind ro "$p" "$root$p"
    elif [ -f "$p" ]; then mkdir -p "$root$(dirname "$p")"; cp "$p" "$root$p"; fi
  done < <(pip_paths)
}

run_demo() {  # run_demo VARIANT ROOT: the README's demo command under Xvfb; screenshot once the window is up
  local v=$1 root=$2 t0 rc
  t0=$(date +%s)
  cat >"$root/root/demo-under-xvfb.sh" <<'EOF'
#!/bin/bash
# Inside the root: start the README's demo command, wait for its window, photograph the screen, close the app.
cd /root/spec-o3
bash scripts/run-demo.sh >/root/demo.log 2>&1 &
pid=$!
shown=0
for _ in $(seq 1 900); do   # setup (pip, apt) first: up to 15 minutes
  if xwininfo -root -tree 2>/dev/null | grep -q 'Spec-o3'; then shown=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
if [ "$shown" = 1 ]; then
  sleep 8   # the demo archive opens and the first spectrum is drawn
  import -window root /root/demo.png
  xwininfo -root -tree | grep 'Spec-o3' | head -3
  kill "$pid"; wait "$pid" 2>/dev/null
  exit 0
fi
wait "$pid"; rc=$?
echo "the demo command ended (status $rc) before a window was shown"
exit 1
EOF
  chmod +x "$root/root/demo-under-xvfb.sh"
  set +e
  in_root "$root" xvfb-run -a -s "-screen 0 1600x1000x24" /root/demo-under-xvfb.sh >"$results/demo-$v.out" 2>&1
  rc=$?
  set -e
  cp "$root/root/demo.log" "$results/demo-$v.log" 2>/dev/null || true
  cp "$root/root/demo.png" "$results/demo-$v.png" 2>/dev/null || true
  echo "demo  $v: $([ $rc = 0 ] && echo PASS || echo FAIL) in $(( $(date +%s) - t0 )) s (window shown: $([ -s "$results/demo-$v.png" ] && echo yes || echo no); commit $commit)" | tee -a "$results/summary.txt"
  return $rc
}

run_tests() {  # run_tests VARIANT ROOT: the README's test command
  local v=$1 root=$2 t0 rc
  t0=$(date +%s)
  set +e
  in_root "$root" bash -c 'cd /root/spec-o3 && bash scripts/test.sh -q -p no:cacheprovider' >"$results/test-$v.log" 2>&1
  rc=$?
  set -e
  echo "tests $v: $([ $rc = 0 ] && echo PASS || echo FAIL) in $(( $(date +%s) - t0 )) s: $(grep -E '(passed|failed|error)' "$results/test-$v.log" | tail -1)" | tee -a "$results/summary.txt"
  return $rc
}

status=0
case "$variant" in both) variants="bare seven" ;; bare|seven) variants=$variant ;; *) echo "unknown variant $variant" >&2; exit 2 ;; esac
for v in $variants; do
  root=$work/root-$v
  make_root "$v" "$root"
  mount_root "$root"
  provision "$v" "$root"
  rm -rf "$root/root/spec-o3"
  git clone -q "$repo" "$root/root/spec-o3"
  git -C "$root/root/spec-o3" checkout -q --detach "$commit"
  echo "check-fresh-system: $v root, commit $commit; before setup: $(in_root "$root" dpkg-query -W -f='${Package}=${db:Status-Abbrev} ' \
    libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libegl1 2>/dev/null || true)" | tee -a "$results/summary.txt"
  run_demo "$v" "$root" || status=1
  if [ "$tests" = 1 ]; then run_tests "$v" "$root" || status=1; fi
  cleanup
  if grep -qF " $root/" /proc/mounts; then   # never delete through a mount that is still there
    echo "check-fresh-system: mounts left under $root; not deleting it" >&2; status=1
  elif [ "$keep" != 1 ]; then
    rm -rf "$root"
  fi
done
exit $status

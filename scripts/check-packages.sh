#!/usr/bin/env bash
# Opt-in proof that the Linux packages run on bare machines: debootstrap --variant=minbase roots of Debian 12
# (bookworm) and 13 (trixie): no compiler, no Python, no X libraries. Per suite, two roots:
#
#   deb  `apt-get install ./spec-o3_*.deb` and nothing else by hand (apt brings the Depends); then, as a plain user:
#        `spec-o3 self-test`; the demo window under Xvfb at 1366x768 (screenshot; time from the start of apt-get to
#        the first window); the tiny random-weight pair imported and `spec-o3 inspect` on a demo spectrum (the CPU,
#        and for a build with every backend as a module: the one-line notice without a Vulkan driver, Vulkan0 with
#        lavapipe installed and named by GGML_VK_VISIBLE_DEVICES=0); a Qt system library removed behind dpkg's back
#        (the app names it and the command); `apt-get purge spec-o3`: nothing of the package left, the user's data
#        kept and named.
#   tar  the portable tarball unpacked in a plain user's home and run from there, no root: the app names the system
#        libraries a bare root lacks and the install command; after that command (run as root), self-test, window
#        and inspect as above.
# In the deb root also: the installed launcher told it runs on glibc 2.35 (Ubuntu 22.04's; SPECO3_CHECK_GLIBC)
# refuses with the glibc the package needs named. With the CUDA add-on (--addon-deb, --addon-tarball: a build with
# every backend as a module): `apt-get install ./spec-o3-cuda_*.deb` on top, inspect on a machine without an NVIDIA
# GPU or driver (the CPU, and Vulkan0 once lavapipe is there, with the line that says why CUDA is unused), the
# add-on's purge; in the tar root the add-on tarball unpacked over the main one, inspect as above.
#
# Xvfb, xauth, x11-utils and x11-apps (xwd) are test tools: they are installed into a root only after the package
# was installed and checked (so they cannot hide a missing dependency), and they are not the package's.
# The cold start of the installed app (first window after the page cache was dropped) is measured in the same run
# against the source checkout's venv (--source-venv) under the host's Xvfb.
#
# Usage (root; Debian/Ubuntu host with debootstrap, Xvfb and ImageMagick, network to the Debian mirror):
#   scripts/check-packages.sh --deb FILE --tarball FILE --tiny DIR [--suites "bookworm trixie"] [--work DIR]
#                             [--source-venv DIR] [--keep] [--addon-deb FILE --addon-tarball FILE]
# --tiny DIR holds text.gguf and mmproj.gguf (the tests' tiny pair: speco3_testkit.tinymodel + spec-o3 convert).
# Results in WORK/results (default WORK /var/tmp/speco3-packages): summary.txt (one PASS/FAIL line per check),
# figures.json, window-<root>.png, logs. Exit status 0 when every check passed. Debootstrap bases are kept in WORK
# (base-<suite>) and copied for each run; the roots are deleted unless --keep.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deb=""; tarball=""; tiny=""; suites="bookworm trixie"; work=/var/tmp/speco3-packages; keep=0
addon_deb=""; addon_tarball=""
source_venv=$here/.venv
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb=$(readlink -f "$2"); shift 2 ;;
    --tarball) tarball=$(readlink -f "$2"); shift 2 ;;
    --tiny) tiny=$(readlink -f "$2"); shift 2 ;;
    --suites) suites=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --source-venv) source_venv=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --addon-deb) addon_deb=$(readlink -f "$2"); shift 2 ;;
    --addon-tarball) addon_tarball=$(readlink -f "$2"); shift 2 ;;
    *) sed -n '2,36p' "$0" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "check-packages: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
[ -f "$deb" ] && [ -f "$tarball" ] && [ -f "$tiny/text.gguf" ] && [ -f "$tiny/mmproj.gguf" ] ||
  { echo "check-packages: --deb, --tarball and --tiny DIR (text.gguf, mmproj.gguf) are needed" >&2; exit 2; }
for tool in debootstrap Xvfb xwininfo convert; do
  command -v $tool >/dev/null || { echo "check-packages: $tool is needed on the host" >&2; exit 2; }
done
mkdir -p "$work"
work=$(cd "$work" && pwd)
results=$work/results
rm -rf "$results"; mkdir -p "$results"
label=$(dpkg-deb --field "$deb" Version | sed 's/.*+//')
mirror=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1)
[ -n "$mirror" ] || mirror=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
status=0
EXTRA_ENV=()
ROOT=""
last_window_s=0
figures=$results/figures.jsonl
: >"$figures"

pass() { echo "PASS $*" | tee -a "$results/summary.txt"; }
failed() { echo "FAIL $*" | tee -a "$results/summary.txt"; status=1; }
check() {  # check NAME DETAIL CONDITION-COMMAND...
  local name=$1 detail=$2; shift 2
  if "$@"; then pass "$name: $detail"; else failed "$name: $detail"; fi
}
figure() { echo "{\"root\": \"$1\", \"$2\": $3}" >>"$figures"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

mounts=()
cleanup() {
  local i
  for ((i=${#mounts[@]}-1; i>=0; i--)); do umount -R "${mounts[$i]}" 2>/dev/null || umount -l "${mounts[$i]}" 2>/dev/null || true; done
  mounts=()
}
trap cleanup EXIT

base_root() {  # the debootstrap base of a suite, made once and kept
  local suite=$1 base=$work/base-$1
  if [ ! -f "$base/.complete" ]; then
    rm -rf "$base"
    echo "check-packages: debootstrap --variant=minbase $suite from $mirror" >&2
    debootstrap --variant=minbase "$suite" "$base" "$mirror" >"$results/debootstrap-$suite.log" 2>&1
    touch "$base/.complete"
  fi
  echo "$base"
}

new_root() {  # new_root SUITE NAME: ROOT= a fresh copy of the base, mounted, with apt's lists and a plain user "obs"
  local suite=$1 root=$work/root-$2 base
  if grep -qF " $root/" /proc/mounts; then echo "check-packages: $root has mounts; stop" >&2; exit 1; fi
  rm -rf "$root"
  base=$(base_root "$suite")
  cp -a "$base" "$root"
  mkdir -p "$root/proc"; mount -t proc proc "$root/proc"; mounts+=("$root/proc")
  mount --rbind /sys "$root/sys"; mounts+=("$root/sys")
  mount --rbind /dev "$root/dev"; mounts+=("$root/dev")
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  grep -l '^Acquire::' /etc/apt/apt.conf.d/* 2>/dev/null | while read -r f; do cp "$f" "$root/etc/apt/apt.conf.d/"; done || true
  in_root "$root" apt-get update -qq >/dev/null
  in_root "$root" useradd -m -u 1000 -s /bin/bash obs
  ROOT=$root
}

in_root() {  # in_root ROOT CMD...: as root inside
  local root=$1; shift
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

as_obs() {  # as_obs ROOT CMD...: as the plain user, in its home, with a display when Xvfb runs
  local root=$1; shift
  chroot --userspec=1000:1000 "$root" /usr/bin/env -i HOME=/home/obs USER=obs LANG=C.UTF-8 \
    PATH=/home/obs/bin:/usr/local/bin:/usr/bin:/bin DISPLAY="${DISPLAY_IN_ROOT:-}" \
    ${EXTRA_ENV[@]+"${EXTRA_ENV[@]}"} /bin/sh -c 'cd /home/obs && exec "$@"' sh "$@"
}

test_tools() {  # Xvfb and screenshot tools, installed after the package was checked
  in_root "$1" apt-get install -y -qq --no-install-recommends xvfb xauth x11-utils x11-apps >/dev/null
}

start_xvfb() {  # start_xvfb ROOT DISPLAY
  chroot "$1" /usr/bin/env -i PATH=/usr/bin:/bin Xvfb "$2" -screen 0 1366x768x24 -nolisten tcp \
    >"$results/xvfb-$(basename "$1").log" 2>&1 &
  xvfb_pid=$!
  for _ in $(seq 1 50); do in_root "$1" xdpyinfo -display "$2" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "Xvfb did not start" >&2; return 1
}

window_run() {  # window_run ROOT NAME APP...: start the app as obs, time the first window, screenshot, close
  local root=$1 name=$2 t0 pid shown=0 waited; shift 2
  DISPLAY_IN_ROOT=:7
  start_xvfb "$root" :7
  sync; echo 3 >/proc/sys/vm/drop_caches || true   # a cold start: nothing of the app in the page cache
  t0=$(now)
  DISPLAY_IN_ROOT=:7 as_obs "$root" "$@" >"$results/window-$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    if in_root "$root" xwininfo -display :7 -root -tree 2>/dev/null | grep -q '"Spec-o3'; then shown=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  waited=$(since "$t0")
  last_window_s=$waited
  if [ $shown = 1 ]; then
    figure "$name" first_window_s "$waited"
    for _ in $(seq 1 120); do grep -q "20 spectra in" "$results/window-$name.log" && break; sleep 0.5; done
    sleep 3   # the first spectrum is drawn
    in_root "$root" xwd -display :7 -root -silent -out /tmp/window.xwd
    convert "xwd:$root/tmp/window.xwd" "$results/window-$name.png"
  fi
  kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
  kill $xvfb_pid 2>/dev/null || true; wait $xvfb_pid 2>/dev/null || true
  DISPLAY_IN_ROOT=""
  check "$name window" "first window after ${waited} s (cold page cache), screenshot window-$name.png" [ $shown = 1 ]
}

inspect_run() {  # inspect_run ROOT NAME WHAT: the tiny pair imported once, inspect on a demo spectrum
  local root=$1 name=$2 what=$3 spectrum out
  mkdir -p "$root/home/obs/tiny"
  cp "$tiny/text.gguf" "$tiny/mmproj.gguf" "$root/home/obs/tiny/"
  chown -R 1000:1000 "$root/home/obs/tiny"
  as_obs "$root" spec-o3 models list 2>/dev/null | grep -q tiny-test ||
    as_obs "$root" spec-o3 models import tiny/text.gguf tiny/mmproj.gguf --name tiny-test --default \
      >"$results/import-$name.log" 2>&1 || true
  spectrum=$(cd "$root" && ls home/obs/.local/share/spec-o3/demo/*.fits* 2>/dev/null | head -1)
  out=$(as_obs "$root" spec-o3 inspect "/$spectrum" --task cv --max-turns 2 --max-tokens-per-turn 16 \
        --out "/tmp/trace-$what" 2>&1) && rc=0 || rc=$?
  printf '%s\n' "$out" >"$results/inspect-$name-$what.log"
  # what the engine said about its device: stderr notice and the log file
  grep -hiE "running on|Vulkan0|offload|backend|device" "$root/home/obs/.local/state/spec-o3/log/spec-o3.log" \
    2>/dev/null | tail -6 >>"$results/inspect-$name-$what.log" || true
  # the random-weight model's answer is noise ("No verdict: format_error", a non-zero status): the check is that
  # the model loaded, the agent ran and the trace was written
  echo "exit status $rc" >>"$results/inspect-$name-$what.log"
  grep -q "^loaded tiny-test" "$results/inspect-$name-$what.log" && grep -q "^trace: " "$results/inspect-$name-$what.log"
}

# -- the .deb on a bare root ---------------------------------------------------------------------------------------
deb_root() {
  local suite=$1 name=deb-$1 root t0 before after
  new_root "$suite" "$name"; root=$ROOT
  cp "$deb" "$root/tmp/"
  before=$(in_root "$root" dpkg-query -W -f='${Package}\n' | wc -l)
  t0=$(now)
  in_root "$root" sh -c "cd /tmp && apt-get install -y ./$(basename "$deb")" >"$results/apt-$name.log" 2>&1 && rc=0 || rc=$?
  local apt_s; apt_s=$(since "$t0")
  after=$(in_root "$root" dpkg-query -W -f='${Package}\n' | wc -l)
  check "$name apt-get install ./$(basename "$deb")" "$((after - before)) packages (the .deb and its Depends) in ${apt_s} s" [ $rc = 0 ]
  figure "$name" apt_install_s "$apt_s"
  figure "$name" packages_added "$((after - before))"
  figure "$name" installed_kib "$(du -sk "$root/opt/spec-o3" | cut -f1)"
  as_obs "$root" spec-o3 --version >"$results/version-$name.log" 2>&1 && rc=0 || rc=$?
  check "$name spec-o3 --version" "$(head -1 "$results/version-$name.log")" [ $rc = 0 ]
  as_obs "$root" spec-o3 self-test >"$results/selftest-$name.log" 2>&1 && rc=0 || rc=$?
  check "$name spec-o3 self-test" "$(grep -c PASS "$results/selftest-$name.log") PASS lines, $(grep -c FAIL "$results/selftest-$name.log") FAIL" [ $rc = 0 ]
  # Ubuntu 22.04's glibc (2.35), as the installed launcher would read it: refused, naming the glibc needed
  local need_glibc
  need_glibc=$(dpkg-deb --field "$deb" Depends | grep -o 'libc6 (>= [0-9.]*)' | grep -o '[0-9][0-9.]*')
  EXTRA_ENV=(SPECO3_CHECK_GLIBC=2.35)
  as_obs "$root" spec-o3 --version >"$results/old-glibc-$name.log" 2>&1 && rc=0 || rc=$?
  EXTRA_ENV=()
  check "$name glibc 2.35 refused" "exit $rc: $(head -1 "$results/old-glibc-$name.log" | cut -c1-160)" \
    sh -c "[ $rc = 70 ] && grep -q 'needs glibc $need_glibc or newer, and this system has glibc 2.35' '$results/old-glibc-$name.log'"
  test_tools "$root"
  window_run "$root" "$name" spec-o3-desktop --demo
  figure "$name" apt_plus_first_window_s "$(awk -v a="$apt_s" -v b="$last_window_s" 'BEGIN { print a + b }')"
  inspect_run "$root" "$name" cpu && rc=0 || rc=$?
  check "$name inspect (no GPU driver)" "$(grep -m1 -E '^loaded tiny-test' "$results/inspect-$name-cpu.log" | cut -c1-90); $(grep -m1 -oE '^trace: .*' "$results/inspect-$name-cpu.log")" [ $rc = 0 ]
  if [ "$label" = dl ]; then
    grep -q "no GPU device initialised, running on the CPU" "$results/inspect-$name-cpu.log" &&
      pass "$name CPU notice: $(grep -m1 -o 'no GPU device initialised.*' "$results/inspect-$name-cpu.log" | cut -c1-160)" ||
      failed "$name CPU notice: missing"
    if [ -n "$addon_deb" ]; then  # the CUDA add-on on a machine without an NVIDIA GPU or driver
      cp "$addon_deb" "$root/tmp/"
      in_root "$root" sh -c "cd /tmp && apt-get install -y ./$(basename "$addon_deb")" >"$results/apt-$name-cuda.log" 2>&1 && rc=0 || rc=$?
      check "$name apt-get install ./$(basename "$addon_deb")" "$(du -sk "$root/opt/spec-o3/_internal/llama_cpp/lib" | cut -f1) KiB in llama_cpp/lib now; no libcuda: $(ls "$root/opt/spec-o3/_internal/llama_cpp/lib" | grep -c '^libcuda\.' || true) files" \
        sh -c "[ $rc = 0 ] && [ -f '$root/opt/spec-o3/_internal/llama_cpp/lib/libcublasLt.so.13' ] && ! ls '$root/opt/spec-o3/_internal/llama_cpp/lib' | grep -q '^libcuda\.'"
      inspect_run "$root" "$name" cuda-cpu && rc=0 || rc=$?
      check "$name inspect with the CUDA add-on, no NVIDIA driver" "$(grep -m1 -o 'no GPU device initialised.*' "$results/inspect-$name-cuda-cpu.log" | cut -c1-200)" \
        sh -c "[ $rc = 0 ] && grep 'no GPU device initialised' '$results/inspect-$name-cuda-cpu.log' | grep -q 'cuda: '"
    fi
    in_root "$root" apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers >/dev/null
    EXTRA_ENV=(GGML_VK_VISIBLE_DEVICES=0)
    as_obs "$root" spec-o3 self-test >"$results/selftest-$name-vulkan.log" 2>&1 || true
    inspect_run "$root" "$name" vulkan && rc=0 || rc=$?
    EXTRA_ENV=()
    check "$name inspect on lavapipe" "$(grep -m1 -E '^loaded tiny-test' "$results/inspect-$name-vulkan.log" | cut -c1-120)" \
      sh -c "[ $rc = 0 ] && grep -q '^loaded tiny-test (Vulkan0 ' '$results/inspect-$name-vulkan.log'"
    if [ -n "$addon_deb" ]; then
      check "$name CUDA unused beside Vulkan0, and why" "$(grep -m1 -o 'running on vulkan; unused: .*' "$results/inspect-$name-vulkan.log" | cut -c1-160)" \
        grep -q 'running on vulkan; unused: cuda: ' "$results/inspect-$name-vulkan.log"
      in_root "$root" dpkg -L spec-o3-cuda >"$results/files-$name-cuda.txt"
      in_root "$root" apt-get purge -y spec-o3-cuda >"$results/purge-$name-cuda.log" 2>&1 && rc=0 || rc=$?
      local left_cuda
      left_cuda=$(while read -r f; do [ -e "$root$f" ] && [ ! -d "$root$f" ] && echo "$f"; done <"$results/files-$name-cuda.txt" || true)
      check "$name apt-get purge spec-o3-cuda" "left behind: ${left_cuda:-nothing}" sh -c "[ $rc = 0 ] && [ -z '$left_cuda' ]"
    fi
  fi
  # a Qt system library removed behind dpkg's back: the app names it instead of Qt's abort. The first of these
  # that the package depends on (PyInstaller bundles the ones the build machine has installed)
  local gone="" soname="" pair
  for pair in libxcb-icccm4:libxcb-icccm.so.4 libxcb-keysyms1:libxcb-keysyms.so.1 libegl1:libEGL.so.1; do
    if dpkg-deb --field "$deb" Depends | tr ',' '\n' | grep -qx " *${pair%%:*}"; then gone=${pair%%:*}; soname=${pair#*:}; break; fi
  done
  in_root "$root" dpkg --remove --force-depends "$gone" >/dev/null 2>&1
  DISPLAY_IN_ROOT=:9 as_obs "$root" spec-o3-desktop --demo >"$results/missing-lib-$name.log" 2>&1 && rc=0 || rc=$?
  check "$name missing Qt library named ($gone removed)" "$(grep -m1 -o 'lacks [^.]*' "$results/missing-lib-$name.log")" \
    sh -c "[ $rc = 1 ] && grep -q '$soname' '$results/missing-lib-$name.log' && grep -q 'apt-get install $gone' '$results/missing-lib-$name.log'"
  in_root "$root" apt-get install -y -qq "$gone" >/dev/null
  # uninstall: nothing of the package stays, the user's data does and is named
  in_root "$root" dpkg -L spec-o3 >"$results/files-$name.txt"
  in_root "$root" apt-get purge -y spec-o3 >"$results/purge-$name.log" 2>&1
  local left
  left=$(while read -r f; do [ -e "$root$f" ] && [ ! -d "$root$f" ] && echo "$f"; done <"$results/files-$name.txt"
         find "$root" -xdev \( -path "$root/home/obs" -o -path "$root/proc" -o -path "$root/tmp" \) -prune -o \
           \( -name '*spec-o3*' -o -name '*x-fits-gzip*' \) -print | sed "s|^$root||")
  grep -q "x-fits-gzip" "$root/usr/share/mime/types" 2>/dev/null && left="$left mime-database-still-has-x-fits-gzip"
  check "$name apt-get purge" "left behind: ${left:-nothing}; kept and named: $(grep -o '/home/obs/[^ ]*' "$results/purge-$name.log" | tr '\n' ' ')" \
    sh -c "[ -z '$left' ] && [ -d '$root/home/obs/.local/share/spec-o3' ] && grep -q '/home/obs/.local/share/spec-o3' '$results/purge-$name.log'"
  cleanup
  [ "$keep" = 1 ] || rm -rf "$root"
}

# -- the tarball in a plain user's home ----------------------------------------------------------------------------
tar_root() {
  local suite=$1 name=tar-$1 root cmd
  new_root "$suite" "$name"; root=$ROOT
  mkdir -p "$root/home/obs/Downloads"
  cp "$tarball" "$root/home/obs/Downloads/"
  chown -R 1000:1000 "$root/home/obs/Downloads"
  as_obs "$root" tar -C Downloads -xzf "Downloads/$(basename "$tarball")"
  mkdir -p "$root/home/obs/bin"
  ln -sf /home/obs/Downloads/spec-o3/spec-o3 "$root/home/obs/bin/spec-o3"
  ln -sf /home/obs/Downloads/spec-o3/spec-o3-desktop "$root/home/obs/bin/spec-o3-desktop"
  chown -R 1000:1000 "$root/home/obs/bin"
  as_obs "$root" spec-o3 --version >"$results/version-$name.log" 2>&1 && rc=0 || rc=$?
  check "$name spec-o3 --version (from ~/Downloads, no root)" "$(head -1 "$results/version-$name.log")" [ $rc = 0 ]
  as_obs "$root" spec-o3-desktop --demo >"$results/bare-$name.log" 2>&1 && rc=0 || rc=$?
  cmd=$(grep -o 'apt-get install .*' "$results/bare-$name.log" | head -1)
  check "$name bare root: the app names what is missing" "exit $rc; $(grep -m1 -o 'lacks [^.]*' "$results/bare-$name.log" | cut -c1-120)…" \
    sh -c "[ $rc = 1 ] && [ -n '$cmd' ]"
  in_root "$root" sh -c "$cmd -y -qq" >"$results/syslibs-$name.log" 2>&1 && rc=0 || rc=$?
  check "$name the named command (as root)" "$cmd" [ $rc = 0 ]
  as_obs "$root" spec-o3 self-test >"$results/selftest-$name.log" 2>&1 && rc=0 || rc=$?
  check "$name spec-o3 self-test" "$(grep -c PASS "$results/selftest-$name.log") PASS lines, $(grep -c FAIL "$results/selftest-$name.log") FAIL" [ $rc = 0 ]
  test_tools "$root"
  window_run "$root" "$name" /home/obs/Downloads/spec-o3/spec-o3-desktop --demo
  inspect_run "$root" "$name" cpu && rc=0 || rc=$?
  check "$name inspect" "$(grep -m1 -E '^loaded tiny-test' "$results/inspect-$name-cpu.log" | cut -c1-90); $(grep -m1 -oE '^trace: .*' "$results/inspect-$name-cpu.log")" [ $rc = 0 ]
  if [ -n "$addon_tarball" ]; then  # the add-on unpacked over the main tarball, as a plain user
    cp "$addon_tarball" "$root/home/obs/Downloads/"
    chown 1000:1000 "$root/home/obs/Downloads/$(basename "$addon_tarball")"
    local tar_rc  # inspect_run sets rc (the inspect command's status)
    as_obs "$root" tar -C Downloads -xzf "Downloads/$(basename "$addon_tarball")" && tar_rc=0 || tar_rc=$?
    inspect_run "$root" "$name" cuda-cpu && rc2=0 || rc2=$?
    check "$name inspect with the CUDA add-on tarball, no NVIDIA driver" "$(grep -m1 -o 'no GPU device initialised.*' "$results/inspect-$name-cuda-cpu.log" | cut -c1-200)" \
      sh -c "[ $tar_rc = 0 ] && [ $rc2 = 0 ] && grep 'no GPU device initialised' '$results/inspect-$name-cuda-cpu.log' | grep -q 'cuda: '"
  fi
  cleanup
  [ "$keep" = 1 ] || rm -rf "$root"
}

# -- the source checkout's venv on the host, same measurement -----------------------------------------------------
source_start() {
  [ -x "$source_venv/bin/spec-o3-desktop" ] || { echo "no $source_venv: source start not measured" >&2; return 0; }
  local home t0 pid shown=0 waited
  home=$(mktemp -d)
  Xvfb :77 -screen 0 1366x768x24 -nolisten tcp >/dev/null 2>&1 &
  local xp=$!
  sleep 1
  sync; echo 3 >/proc/sys/vm/drop_caches || true
  t0=$(now)
  env -i HOME="$home" PATH=/usr/bin:/bin DISPLAY=:77 "$source_venv/bin/spec-o3-desktop" --demo >"$results/window-source.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    if xwininfo -display :77 -root -tree 2>/dev/null | grep -q '"Spec-o3'; then shown=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  waited=$(since "$t0")
  kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
  kill $xp 2>/dev/null || true; wait $xp 2>/dev/null || true
  rm -rf "$home"
  [ $shown = 1 ] && figure source-venv first_window_s "$waited"
  check "source checkout's venv window" "first window after ${waited} s (cold page cache; host, $source_venv)" [ $shown = 1 ]
}

figure package deb_bytes "$(stat -c %s "$deb")"
figure package tarball_bytes "$(stat -c %s "$tarball")"
[ -z "$addon_deb" ] || figure package cuda_addon_deb_bytes "$(stat -c %s "$addon_deb")"
[ -z "$addon_tarball" ] || figure package cuda_addon_tarball_bytes "$(stat -c %s "$addon_tarball")"
for suite in $suites; do
  deb_root "$suite"
  tar_root "$suite"
done
source_start
python3 - "$figures" "$results/figures.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = {}
for r in rows:
    root = r.pop("root")
    out.setdefault(root, {}).update(r)
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(json.dumps(out, indent=1))
EOF
echo "check-packages: $(grep -c ^PASS "$results/summary.txt") passed, $(grep -c ^FAIL "$results/summary.txt" || true) failed"
exit $status

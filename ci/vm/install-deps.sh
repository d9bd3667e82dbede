#!/usr/bin/env bash
# Installs what the VM lane needs on a Debian/Ubuntu host (QEMU, qemu-img, mmdebstrap, e2fsprogs),
# checks that every tool the lane runs works, then builds the lane's image into the cache unless
# it is up to date. Idempotent. Says `skipped: …` and exits 77 when this host cannot have them
# (no apt, not root); exits 1 naming the tool when an install that should have worked did not.
set -euo pipefail
cd "$(dirname "$0")"

# Each tool the lane runs, the Debian package that has it, and how to ask it to run.
tools=(qemu-system-x86_64 qemu-img mmdebstrap mkfs.ext4)
declare -A package=([qemu-system-x86_64]=qemu-system-x86 [qemu-img]=qemu-utils
  [mmdebstrap]=mmdebstrap [mkfs.ext4]=e2fsprogs)
declare -A probe=([qemu-system-x86_64]=--version [qemu-img]=--version
  [mmdebstrap]=--version [mkfs.ext4]=-V)
works() { "$1" "${probe[$1]}" >/dev/null 2>&1; }

need=()
for t in "${tools[@]}"; do works "$t" || need+=("${package[$t]}"); done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "skipped: the VM lane needs ${need[*]}, and this host cannot install them (needs root and apt-get)"
    exit 77
  fi
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  apt-get update -q >"$log" 2>&1 || { cat "$log"; echo "install-deps.sh: apt-get update failed" >&2; exit 1; }
  # QEMU's packages must come from one release: qemu-utils 8.0 and later Breaks the
  # qemu-system-common of 7.x, so a machine with a newer (backported) qemu-utils and no source
  # for a matching qemu-system would have apt remove qemu-img to install qemu-system-x86. Both
  # are pinned to the qemu-system-x86 apt can install (or the one installed), a newer qemu-utils
  # is downgraded to it, and --no-remove makes apt fail rather than remove anything.
  args=()
  for p in "${need[@]}"; do
    case $p in qemu-system-x86 | qemu-utils) ;; *) args+=("$p") ;; esac
  done
  if [[ " ${need[*]} " == *" qemu-system-x86 "* || " ${need[*]} " == *" qemu-utils "* ]]; then
    qemu=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || true)
    [ -n "$qemu" ] || qemu=$(apt-cache policy qemu-system-x86 | sed -n 's/^ *Candidate: //p')
    if [ -z "$qemu" ] || [ "$qemu" = "(none)" ]; then
      echo "install-deps.sh: apt has no qemu-system-x86 to install (apt-cache policy qemu-system-x86)" >&2
      exit 1
    fi
    args+=("qemu-system-x86=$qemu" "qemu-utils=$qemu")
  fi
  echo "installing for the VM lane: ${args[*]}"
  if ! apt-get install -y -q --no-install-recommends --no-remove --allow-downgrades "${args[@]}" >"$log" 2>&1; then
    tail -n 20 "$log"
    echo "install-deps.sh: apt-get install ${args[*]} failed" >&2
    exit 1
  fi
fi
# Never assume: an install that "succeeded" may still have left a tool out (or removed one).
for t in "${tools[@]}"; do
  if ! works "$t"; then
    echo "install-deps.sh: $t is missing or does not run ($t ${probe[$t]} failed; Debian package ${package[$t]})" >&2
    exit 1
  fi
done
echo "VM lane tools: $(qemu-system-x86_64 --version | head -n 1); $(qemu-img --version | head -n 1); mmdebstrap $(mmdebstrap --version | awk '{print $2}'); $(mkfs.ext4 -V 2>&1 | head -n 1)"
if [ "$(id -u)" = 0 ]; then
  ./build-image.sh
else
  echo "note: building the VM image needs root; ci/vm/run.sh skips without it"
fi

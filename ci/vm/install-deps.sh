#!/usr/bin/env bash
# Installs what the VM lane needs on a Debian/Ubuntu host (QEMU, qemu-img, mmdebstrap, e2fsprogs),
# then builds the lane's image into the cache unless it is up to date. Idempotent. Says
# `skipped: …` and exits 77 when this host cannot have them (no apt, not root).
set -euo pipefail
cd "$(dirname "$0")"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "skipped: the VM lane needs ${need[*]}, and this host cannot install them (needs root and apt-get)"
    exit 77
  fi
  echo "installing for the VM lane: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$(id -u)" = 0 ]; then
  ./build-image.sh
else
  echo "note: building the VM image needs root; ci/vm/run.sh skips without it"
fi

#!/usr/bin/env bash
# Builds the npm packages of reaper-process (bindings/node) into OUT, as esbuild ships its
# binaries: the package `reaper-process` (JavaScript and types) and one package per platform
# carrying the addon, the cdylib of the crate reaper-node built in the `dist` profile:
#   OUT/reaper-process-VERSION.tgz
#   OUT/reaper-process-linux-x64-gnu-VERSION.tgz     (reaper.linux-x64-gnu.node)
# Each addon is loaded by this Node before it is packed, and its size and build time printed.
#
#   ci/dist-node.sh OUT VERSION
#
# $REAPER_NODE_PLATFORMS: the platforms to build (default linux-x64-gnu, the host's, which CI
# builds, loads and tests). The others (linux-arm64-gnu, linux-x64-musl, linux-arm64-musl) are
# built on demand, not in CI's run (see docs/node.md).
# ci/dist.sh calls it; ci/dist-test.sh installs and tests what it wrote (ci/dist-test-node.sh).
set -euo pipefail
trap 'echo "ci/dist-node.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
die() { echo "ci/dist-node.sh: $*" >&2; exit 1; }
[ $# = 2 ] || die "usage: ci/dist-node.sh OUT VERSION"
out=$(mkdir -p "$1" && cd "$1" && pwd)
version=$2
target=${CARGO_TARGET_DIR:-target}
read -r -a platforms <<<"${REAPER_NODE_PLATFORMS:-linux-x64-gnu}"
command -v npm >/dev/null || die "npm is missing (Debian nodejs/npm)"

triple() {
  case $1 in
    linux-x64-gnu) echo x86_64-unknown-linux-gnu ;;
    linux-arm64-gnu) echo aarch64-unknown-linux-gnu ;;
    linux-x64-musl) echo x86_64-unknown-linux-musl ;;
    linux-arm64-musl) echo aarch64-unknown-linux-musl ;;
    *) die "unknown platform $1 (linux-x64-gnu, linux-arm64-gnu, linux-x64-musl, linux-arm64-musl)" ;;
  esac
}
host=$(rustc -vV | sed -n 's/^host: //p')

# Every addon is linked by zig through cargo-zigbuild (PyPI cargo-zigbuild and ziglang, in
# $REAPER_CI_CACHE/dist-venv): the glibc ones against glibc 2.17's symbols, as the Python wheel
# is, so that they load on any distribution of the last decade, not only the build host's.
venv=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}/dist-venv
export PATH=$venv/bin:$PATH
command -v cargo-zigbuild >/dev/null ||
  die "cargo-zigbuild is missing from $venv (PyPI cargo-zigbuild and ziglang; ci/install-deps.sh installs them)"
for p in "${platforms[@]}"; do
  t=$(triple "$p")
  rustup target list --installed | grep -qx "$t" || die "the Rust target $t is missing (rustup target add $t)"
  s=$SECONDS
  zt=$t
  case $t in *gnu) zt=$t.2.17 ;; esac
  # musl: a shared library needs the C runtime linked dynamically (musl's default is static).
  case $t in *musl) export "CARGO_TARGET_$(echo "$t" | tr 'a-z-' 'A-Z_')_RUSTFLAGS=-C target-feature=-crt-static" ;; esac
  # A target directory of its own: zig's linker is part of each crate's fingerprint, so sharing
  # the wheel's or the static binaries' would rebuild theirs next time.
  CARGO_TARGET_DIR=$target/node-zig cargo zigbuild --locked --quiet --profile dist -p reaper-node --target "$zt"
  lib=$target/node-zig/$t/dist/libreaper_node.so
  echo "addon $p: built in $((SECONDS - s)) s, $(du -k "$lib" | cut -f1) KiB"
  case $t in
    *gnu)
      # The newest glibc symbol version it needs: the oldest glibc it loads with.
      glibc=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
      echo "addon $p: needs $glibc"
      [ "$(printf '%s\n' "$glibc" GLIBC_2.17 | sort -V | tail -n 1)" = GLIBC_2.17 ] ||
        die "$lib needs $glibc: zig was to link it against glibc 2.17"
      ;;
  esac
  if [ "$t" = "$host" ]; then
    REAPER_NODE_ADDON=$lib node -e 'const n = require("./bindings/node/native.js").native; if (typeof n.spawn !== "function") process.exit(1)' ||
      die "this Node cannot load $lib"
  fi
  name=reaper-process-$p
  pkg=$out/$name
  rm -rf "$pkg" && mkdir -p "$pkg"
  cp "$lib" "$pkg/reaper.$p.node"
  libc=glibc
  case $p in *musl) libc=musl ;; esac
  cat >"$pkg/package.json" <<JSON
{
  "name": "$name",
  "version": "$version",
  "description": "The reaper-process addon for Linux ${p#linux-}; installed by the package reaper-process",
  "license": "MIT OR Apache-2.0",
  "os": ["linux"],
  "cpu": ["$(echo "$p" | cut -d- -f2)"],
  "libc": ["$libc"],
  "main": "reaper.$p.node",
  "files": ["reaper.$p.node"]
}
JSON
  # shellcheck disable=SC2016 # backquotes are markdown
  printf '# %s\n\nThe addon of `reaper-process` for Linux %s. Install `reaper-process`, which depends on this package.\n' \
    "$name" "${p#linux-}" >"$pkg/README.md"
  (cd "$pkg" && npm pack --loglevel=error --pack-destination "$out" >/dev/null)
  rm -rf "$pkg"
done

pkg=$out/reaper-process
rm -rf "$pkg" && mkdir -p "$pkg"
files=$(node -p 'require("./bindings/node/package.json").files.join("\n")')
for f in $files package.json; do cp "bindings/node/$f" "$pkg/"; done
(
  cd "$pkg"
  npm pkg set "version=$version"
  for p in linux-x64-gnu linux-arm64-gnu linux-x64-musl linux-arm64-musl; do
    npm pkg set "optionalDependencies.reaper-process-$p=$version"
  done
  npm pack --loglevel=error --pack-destination "$out" >/dev/null
)
rm -rf "$pkg"
for f in "$out"/reaper-process-*.tgz; do echo "$(basename "$f"): $(du -k "$f" | cut -f1) KiB"; done

#!/usr/bin/env bash
# What containment costs and how fast the tree dies, side by side in one run: spawn cost of
# /bin/true under every way of containing it, teardown of hostile trees and a fork storm, and
# `reaper mcp` over stdio. Prints a markdown report and puts it into docs/BENCHMARKS.md
# (between its `bench:begin`/`bench:end` markers; the notes around them are kept).
#
#   ci/bench.sh           release build, full run (a few minutes), writes docs/BENCHMARKS.md
#   ci/bench.sh --quick   smoke run on the debug build (seconds), prints only; ci/test.sh runs it
# Then ci/bench-python.sh: the Python binding's reaper.run against subprocess.run, as a ratio.
#
# Needs Linux with pidfds; the cgroup rows need a writable cgroup2 directory, the PID 1 rows
# `unshare --pid` (root) and tini/dumb-init (installed by the full run; else they say n/a).
# Nothing is asserted: the goals are reported in the table. The benchmark kills and removes
# everything it started (processes by pidfd, its own `reaper-bench-*` cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "ci/bench.sh: unknown argument $arg (usage: ci/bench.sh [--quick])" >&2; exit 2 ;;
  esac
done

# reaper, and the fixture, fake codex, MCP floor and benchmark of the testkit package (testkit/),
# in one invocation as ci/test.sh builds them, so the smoke run reuses that build (built alone,
# testkit would get its tokio and rmcp with other features, compiled again).
build() {
  cargo build --quiet "$@" -p reaper-cli -p reaper-testkit --bins
}
target=${CARGO_TARGET_DIR:-target}
if [ -n "$quick" ]; then
  # The smoke run only proves the benchmark still works; the debug build is already there
  # after `cargo test`, and its figures are not for quoting.
  build
  dir=$target/debug
else
  build --release
  dir=$target/release
fi

# The PID 1 rows compare reaper with the inits containers use, from Debian's packages. The full
# run installs them when it can (root with apt-get); without them their rows say "not installed".
if [ -z "$quick" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  for pkg in tini dumb-init; do
    command -v "$pkg" >/dev/null ||
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg" >/dev/null ||
      echo "ci/bench.sh: could not install $pkg; its PID 1 row says so" >&2
  done
fi

REAPER_BENCH_COMMIT=$(git describe --always --dirty 2>/dev/null || echo unknown)
REAPER_BENCH_RUSTC=$(rustc --version 2>/dev/null || echo "rustc unknown")
REAPER_BENCH_DATE=$(date -u +%Y-%m-%dT%H:%MZ)
export REAPER_BENCH_COMMIT REAPER_BENCH_RUSTC REAPER_BENCH_DATE

# The full run also measures the start of the binary the release artifacts ship: the same
# source, static (musl, ci/dist.sh's `dist` profile, whose build it shares). Skipped, with a
# note, where the rustup target is missing.
static=()
if [ -z "$quick" ] && [ "$(uname -m)" = x86_64 ]; then
  if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    cargo build --quiet --profile dist --target x86_64-unknown-linux-musl -p reaper-cli --bin reaper
    static=(--static-reaper "$target/x86_64-unknown-linux-musl/dist/reaper")
  else
    echo "ci/bench.sh: no x86_64-unknown-linux-musl target (rustup target add it); no static rows" >&2
  fi
fi

if [ -n "$quick" ]; then
  "$dir/reaper-bench" --quick --bin-dir "$dir"
else
  mkdir -p docs
  "$dir/reaper-bench" --bin-dir "$dir" "${static[@]}" --out docs/BENCHMARKS.md
fi

# Node: reaper-process's spawn('/bin/true') against child_process.spawn (ci/bench-node.mjs), the
# addon as the quick or full run builds it.
if command -v node >/dev/null; then
  if [ -n "$quick" ]; then
    cargo build --quiet -p reaper-node
    REAPER_NODE_ADDON=$target/debug/libreaper_node.so node ci/bench-node.mjs --quick
  else
    cargo build --quiet --profile dist -p reaper-node
    REAPER_NODE_ADDON=$target/dist/libreaper_node.so node ci/bench-node.mjs --out docs/BENCHMARKS.md
  fi
else
  echo "ci/bench.sh: no node; no reaper-process rows" >&2
fi

# Python: reaper.run(['/bin/true']) against subprocess.run (ci/bench-python.sh).
ci/bench-python.sh ${quick:+--quick}

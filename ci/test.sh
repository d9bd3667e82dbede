#!/usr/bin/env bash
# The project's test command: what the README tells a new user to run and what .ci/run runs.
# Formatting, lints, the unit and integration tests (both containment backends, hostile
# fixtures), then the interop tests with real MCP clients when their SDKs are installed.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test"
cargo test --workspace

for extra in ci/interop.sh ci/bench.sh; do
  if [ -x "$extra" ]; then
    case "$extra" in
      *bench.sh) step "$extra --quick"; "$extra" --quick ;;
      *) step "$extra"; "$extra" ;;
    esac
  fi
done

step "no reaper cgroups or fixture processes left behind"
ci/leftovers.sh

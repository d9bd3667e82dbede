#!/usr/bin/env bash
# The project's test command: what the README tells a new user to run and what .ci/run runs.
# Installs the test dependencies (cached outside the checkout), then formatting, lints, the
# unit and integration tests (both containment backends, hostile fixtures), the interop tests
# with real MCP clients, a smoke run of the benchmark, and a final check that nothing was left
# behind.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "install test dependencies"
ci/install-deps.sh

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test"
cargo test --workspace

step "interop tests with real MCP clients"
ci/interop.sh

if [ -x ci/bench.sh ]; then
  step "ci/bench.sh --quick"
  ci/bench.sh --quick
fi

step "nothing left behind"
ci/leftovers.sh

#!/usr/bin/env bash
# The project's test command: what the README tells a new user to run and what .ci/run runs.
# Installs the test dependencies (cached outside the checkout), then formatting, lints, the
# unit and integration tests (both containment backends, hostile fixtures), the interop tests
# with real MCP clients, the packages (static binaries, wheels, npm) built and installed as a user
# would, the VM lane, a smoke run of the benchmark, and a final check that nothing was left
# behind.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> [%ds] %s\n' "$SECONDS" "$*"; }
# Waits for a job started in the background (its pid in the variable named $1, cleared once
# reaped, so the EXIT trap never signals a pid that may be reused), prints its log, and fails
# with its status.
finish_background() {
  local -n job=$1
  local status=0
  wait "$job" || status=$?
  job=
  cat "$2"
  if [ "$status" != 0 ]; then
    echo "$3 failed (exit $status)"
    exit "$status"
  fi
}

step "install test dependencies"
ci/install-deps.sh

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "layering: no new import circle nor binary word in the library (ci/layering.py)"
# None is left: any finding fails (ci/layering-allowed.txt, the ratchet's list, is gone).
python3 ci/test_layering.py
python3 ci/layering.py

step "cargo doc: every public item documented, no broken link"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p reaper -p reaper-platform

step "public API: as listed in ci/public-api.txt (ci/public_api.py --check)"
# Every change of the library's API is deliberate: a diff here is recorded with --update.
python3 ci/public_api.py --check

step "macOS build: cargo clippy --target x86_64-apple-darwin"
# The pgid backend is macOS's; its platform code is compiled here, never run. No linker needed.
# Clippy checks reaper-platform too, as a member of the workspace.
if rustup target list --installed 2>/dev/null | grep -qx x86_64-apple-darwin; then
  cargo clippy --target x86_64-apple-darwin -p reaper -p reaper-cli --lib --bins --examples -- -D warnings
  cargo clippy --target x86_64-apple-darwin -p reaper-testkit --bin reaper-fixture --bin fake-codex -- -D warnings
else
  echo "skipped: the x86_64-apple-darwin target is not installed (rustup target add x86_64-apple-darwin)"
fi

step "what this machine has: a test that needs it must not skip here"
# A test that needs a backend or tool the machine lacks says `skipped: TEST: WHY`; where the
# machine has it, the same skip would be a vacuous pass, so REAPER_REQUIRE turns it into a
# failure (cli/tests/common: `have`).
# With the tests' helper binaries (testkit/): the tests would build them on first use, this does
# it up front so that a build failure shows here, once. One invocation: built alone, testkit
# would get dependencies of its own (tokio, rmcp) with other features, compiled a second time.
cargo build --quiet -p reaper-cli -p reaper-testkit --bins
require=()
if "${CARGO_TARGET_DIR:-target}/debug/reaper" doctor --json | grep -q '"cgroup_writable": true'; then require+=(cgroup); fi
if unshare --pid --fork --mount-proc true 2>/dev/null; then require+=(pidns); fi
if command -v script >/dev/null 2>&1; then require+=(script); fi
if command -v python3 >/dev/null 2>&1; then require+=(python3); fi
if tini --version >/dev/null 2>&1; then require+=(tini); fi
if [ "$(id -u)" = 0 ]; then require+=(root); fi
# GNU coreutils 9.1's timeout (Debian 12), which the timeout face's tests compare with.
if LC_ALL=C /usr/bin/timeout --version 2>/dev/null | head -n 1 | grep -qx 'timeout (GNU coreutils) 9.1'; then require+=(gnu-timeout-9.1); fi
if command -v localedef >/dev/null 2>&1 && [ -f /usr/share/i18n/locales/de_DE ]; then require+=(locales); fi
# A cgroup v1 freezer hierarchy (hybrid hosts), where root may freeze a test's process.
if [ "$(id -u)" = 0 ] && grep -qE ' - cgroup [^ ]+ ([^ ]*,)?freezer(,|$)' /proc/self/mountinfo; then require+=(freezer); fi
if "${REAPER_REAL_CODEX:-$HOME/.cache/reaper-ci/codex/node_modules/.bin/codex}" --version >/dev/null 2>&1; then require+=(codex); fi
export REAPER_REQUIRE="${require[*]}"
echo "required here: ${REAPER_REQUIRE:-(nothing)}"
skips=$(mktemp)
trap 'rm -f "$skips"' EXIT
export REAPER_TEST_SKIPS=$skips

# The packages' release builds (two targets from scratch, ~6 min of both cores) run beside the
# tests, which mostly wait (for grace periods, timeouts, clients): contained by the reaper just
# built, so that a failing step ends the build's whole tree with this script.
read -r -a dist_arches <<<"${REAPER_DIST_ARCHES:-amd64 arm64}"
dist_log=$(mktemp)
# A copy: the tests' build may link a new target/debug/reaper meanwhile.
ci_reaper=${CARGO_TARGET_DIR:-target}/ci-reaper
install -m 755 "${CARGO_TARGET_DIR:-target}/debug/reaper" "$ci_reaper"
"$ci_reaper" run -q --grace 1s -- ci/dist.sh "${dist_arches[@]}" >"$dist_log" 2>&1 &
dist_pid=$!
# Killed (with the VM lane's, below) only while they are this script's unreaped children: their
# pids cannot have been reused. The script's own status is kept: `wait` on the killed job would
# make every failure a 143.
vm_pid= vm_log=$(mktemp)
trap 'rc=$?; for p in $dist_pid $vm_pid; do { kill "$p"; wait "$p" || :; } 2>/dev/null; done; rm -f "$skips" "$dist_log" "$vm_log"; exit $rc' EXIT
echo "ci/dist.sh ${dist_arches[*]} started beside the tests (reaper pid $dist_pid)"

step "cargo test"
cargo test --workspace
if [ -s "$skips" ]; then
  echo "tests skipped (this machine lacks what they need):"
  sort -u "$skips"
else
  echo "no test skipped"
fi

step "the library alone, embedded: tests/embed (default-features = false)"
# What an agent that embeds reaper compiles: none of the binary's dependencies (the package
# reaper-cli's), with its default features (systemd: zbus) or without (tests/embed: not even zbus).
tree=$(cargo tree -p reaper -e normal --prefix none)
for dep in clap rmcp tracing-subscriber tokio-util; do
  if grep -q "^$dep v" <<<"$tree"; then
    echo "the reaper package pulls in $dep: the library must not need it"
    exit 1
  fi
done
tree=$(cargo tree --manifest-path tests/embed/Cargo.toml -e normal --prefix none)
for dep in clap rmcp zbus tracing-subscriber tokio-util; do
  if grep -q "^$dep v" <<<"$tree"; then
    echo "tests/embed pulls in $dep: the library must not need it"
    exit 1
  fi
done
echo "no clap, rmcp, tracing-subscriber or tokio-util in the library's tree; no zbus without its default features"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/embed" cargo test --manifest-path tests/embed/Cargo.toml

step "packaging: the static binaries, wheels and npm packages (ci/dist.sh, built beside the tests)"
# REAPER_DIST_ARCHES=amd64 leaves out arm64 (and says so).
case " ${dist_arches[*]} " in *" arm64 "*) ;; *) echo "skipped: the arm64 build (REAPER_DIST_ARCHES=${dist_arches[*]})" ;; esac
finish_background dist_pid "$dist_log" "ci/dist.sh"

# The VM lane (QEMU, host shapes this machine is not: ci/vm/README.md) needs the static binary
# just built; it runs beside the interop and package tests, which mostly wait on their clients,
# and reports at its own step. Exit 77 means this host cannot run the lane; that is a failure
# unless REAPER_SKIP_VM=1 asks to do without it.
if [ "${REAPER_SKIP_VM:-}" != 1 ]; then
  cargo build --quiet --workspace --bins
  artifacts=${REAPER_DIST_DIR:-${CARGO_TARGET_DIR:-target}/artifacts}
  # The Python wheel for scenarios/bindings.sh, when dist.sh wrote it: without it that scenario
  # fails, saying so.
  python_wheel=()
  for w in "$artifacts"/reaper_process-*manylinux_2_17_x86_64.whl; do [ -f "$w" ] && python_wheel=("$w"); done
  REAPER_BIN="${CARGO_TARGET_DIR:-target}/debug/reaper" ci/vm/run.sh ci/vm/scenarios/*.sh \
    -- "${CARGO_TARGET_DIR:-target}/debug/fake-codex" "${CARGO_TARGET_DIR:-target}/debug/reaper-fixture" \
    "$artifacts/reaper-linux-amd64" Containerfile "${python_wheel[@]}" >"$vm_log" 2>&1 &
  vm_pid=$!
  echo "the VM lane started beside the next steps (pid $vm_pid)"
fi

step "interop tests with real MCP clients"
ci/interop.sh

step "packaging: the packages installed and driven by MCP clients (ci/dist-test.sh)"
ci/dist-test.sh

step "VM lane: systemd, pure cgroup v2, a normal user, podman, in QEMU (ci/vm)"
if [ -z "$vm_pid" ]; then
  echo "skipped: REAPER_SKIP_VM=1"
else
  finish_background vm_pid "$vm_log" "the VM lane"
fi

if [ -x ci/bench.sh ]; then
  step "ci/bench.sh --quick"
  ci/bench.sh --quick
fi

step "nothing left behind"
ci/leftovers.sh

#!/usr/bin/env bash
# Installs the npm packages of reaper-process that ci/dist.sh built (ci/dist-node.sh) as a user
# would — `npm install` of the files into a fresh directory, no registry, a fresh cache — and
# runs bindings/node's `node --test` suites there against the installed package (the addon from
# its per-platform package), with reaper's hostile fixture and the MCP TypeScript SDK.
#
#   ci/dist-test-node.sh DIST      (DIST: ci/dist.sh's output, with npm/reaper-process-*.tgz)
#
# Needs target/debug/reaper-fixture (ci/dist-test.sh builds it) and the SDK in
# $REAPER_CI_CACHE/node (ci/install-deps.sh).
set -euo pipefail
trap 'echo "ci/dist-test-node.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
die() { echo "ci/dist-test-node.sh: $*" >&2; exit 1; }
[ $# = 1 ] || die "usage: ci/dist-test-node.sh DIST"
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
dist=$(cd "$1" && pwd)
fixture=$(cd "${CARGO_TARGET_DIR:-target}/debug" && pwd)/reaper-fixture
[ -x "$fixture" ] || die "no $fixture (cargo build -p reaper-testkit --bins)"
main=$(ls "$dist"/npm/reaper-process-[0-9]*.tgz) || die "no reaper-process package in $dist/npm (ci/dist.sh)"
platform=$(ls "$dist"/npm/reaper-process-linux-x64-gnu-*.tgz) || die "no reaper-process-linux-x64-gnu package in $dist/npm"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/reaper-dist-test-node.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
app=$tmp/app
mkdir -p "$app/test"
printf '{ "name": "app", "version": "1.0.0", "private": true }\n' >"$app/package.json"
s=$SECONDS
# The other platforms' optional dependencies are not in any registry yet: npm skips them.
(cd "$app" && npm install --offline --silent --no-audit --no-fund \
  --cache "$tmp/npm-cache" "$platform" "$main")
echo "npm install: $((SECONDS - s)) s"
addon=$(cd "$app" && node -p 'require.resolve("reaper-process-linux-x64-gnu")')
echo "ok: the addon is the per-platform package's: ${addon#"$app"/}"
cp bindings/node/test/*.mjs "$app/test/"
# The suites import `reaper-process` and `reaper-process/mcp` as a user's code does.
(
  cd "$app"
  unset REAPER_NODE_ADDON
  REAPER_PROCESS_MODULE=reaper-process REAPER_FIXTURE=$fixture MCP_SDK_DIR=$cache/node/node_modules \
    node --test --test-timeout 120000 test/*.test.mjs
) | tee "$tmp/tap" | grep -E '^# (tests|pass|fail|skipped)|^not ok|measurement:|skipped:' || true
grep -q '^# fail 0' "$tmp/tap" || { cat "$tmp/tap"; die "node --test failed"; }
# This host has the fixture and the SDKs (checked above and by ci/install-deps.sh): a skip is a fault.
grep -q '^# skipped 0' "$tmp/tap" || { grep 'skipped:' "$tmp/tap"; die "tests skipped on a host that has what they need"; }
echo "ok: the installed reaper-process passed its suites"

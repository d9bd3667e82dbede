#!/usr/bin/env bash
# Interop tests with real MCP clients, both protocol eras: the official Python SDK (pytest) and
# TypeScript SDK v1 (2025-11-25, `initialize`), and the TypeScript v2 client with the tasks
# extension's client (2026-07-28, `server/discover`, tasks), and the Inspector's CLI, under
# node's test runner, against
# `reaper run`-wrapped servers and `reaper mcp`. Also the tests with the real Codex CLI when it
# is installed. Needs ci/install-deps.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
export REAPER_CI_CACHE=$cache
export NODE_PATH="$cache/node/node_modules"
# The v2 packages are ES modules, which NODE_PATH does not reach: the test imports from here.
export REAPER_TS_V2_MODULES="$cache/node-v2/node_modules"
export REAPER_INSPECTOR="$cache/inspector/node_modules/.bin/mcp-inspector"
if "$cache/codex/node_modules/.bin/codex" --version >/dev/null 2>&1; then
  export REAPER_REAL_CODEX="$cache/codex/node_modules/.bin/codex"
fi

cargo build --quiet -p reaper-cli -p reaper-testkit --bins  # reaper (cli/), and reaper-fixture and fake-codex (testkit/)

"$cache/venv/bin/python" -m pytest -q -p no:cacheprovider tests/interop

shopt -s nullglob
js_tests=(tests/interop/*.test.cjs tests/interop/*.test.mjs)
if [ ${#js_tests[@]} -gt 0 ]; then
  node --test "${js_tests[@]}"
fi

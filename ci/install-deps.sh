#!/usr/bin/env bash
# Installs what the tests need that a fresh machine lacks, into a cache outside the checkout
# ($REAPER_CI_CACHE, default ~/.cache/reaper-ci). Idempotent: a second run is a no-op.
#   venv/   the official MCP Python SDK (`mcp`) and pytest, for the interop tests
#   node/   the official MCP TypeScript SDK v1 (`@modelcontextprotocol/sdk`, 2025-11-25)
#   node-v2/ its v2 client (`@modelcontextprotocol/client`, 2026-07-28) and the tasks
#           extension's client (`@modelcontextprotocol/ext-tasks`), ESM-only, kept apart from v1
#   inspector/ the MCP Inspector (`@modelcontextprotocol/inspector`), whose CLI drives tasks
#   codex/  the real Codex CLI (`@openai/codex`, ~420 MB); optional: tests that need it say
#           "skipped" when it is missing
# Every step checks afterwards that what it installed is there and runs: a required one that is
# not fails here, naming it; an optional one says `note:` or `warning:` and what is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
mkdir -p "$cache"
fail() { echo "install-deps.sh: $*" >&2; exit 1; }

# ci/test.sh runs both.
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --version >/dev/null 2>&1 || fail "rustfmt is missing (rustup component add rustfmt)"
cargo clippy --version >/dev/null 2>&1 || fail "clippy is missing (rustup component add clippy)"
# For the macOS `cargo check` in ci/test.sh (which skips it without the target).
mac=x86_64-apple-darwin
if ! rustup target list --installed 2>/dev/null | grep -qx "$mac"; then
  out=$(timeout 300 rustup target add "$mac" 2>&1) || true
  if ! rustup target list --installed 2>/dev/null | grep -qx "$mac"; then
    echo "note: cannot add the $mac target, so the macOS check will be skipped: $(printf '%s' "$out" | tail -n 1)"
  fi
fi

MCP_PY=2.3.0
PYTEST=8.3.4
MCP_TS=1.32.2
MCP_TS_V2=2.4.0
EXT_TASKS=0.2.2
INSPECTOR=2.12.0
CODEX=0.171.0

python_sdk() {
  "$cache/venv/bin/python" -c "import mcp, pytest, importlib.metadata as m; assert (m.version('mcp'), m.version('pytest')) == ('$MCP_PY', '$PYTEST')" 2>/dev/null
}
if ! python_sdk; then
  echo "installing the MCP Python SDK $MCP_PY and pytest $PYTEST into $cache/venv"
  python3 -m venv "$cache/venv" ||
    fail "cannot make a Python venv at $cache/venv (python3 -m venv; Debian: apt-get install python3-venv)"
  "$cache/venv/bin/pip" install -q "mcp==$MCP_PY" "pytest==$PYTEST" ||
    fail "pip could not install mcp==$MCP_PY pytest==$PYTEST into $cache/venv"
  python_sdk || fail "mcp $MCP_PY and pytest $PYTEST are not importable from $cache/venv/bin/python after installing them"
fi

# ci/interop.sh runs the TypeScript client with node's own test runner.
node --version >/dev/null 2>&1 || fail "node is missing (the TypeScript interop tests run under node >= 18)"
ts_sdk() {
  grep -q "\"version\": \"$MCP_TS\"" "$cache/node/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null
}
if ! ts_sdk; then
  echo "installing the MCP TypeScript SDK $MCP_TS into $cache/node"
  command -v npm >/dev/null || fail "npm is missing (needed to install @modelcontextprotocol/sdk)"
  mkdir -p "$cache/node"
  (cd "$cache/node" && npm install --silent --no-audit --no-fund "@modelcontextprotocol/sdk@$MCP_TS" >/dev/null) ||
    fail "npm could not install @modelcontextprotocol/sdk@$MCP_TS into $cache/node"
  ts_sdk || fail "@modelcontextprotocol/sdk $MCP_TS is not in $cache/node/node_modules after installing it"
fi

# The v2 client and ext-tasks: installed, and importable by node (they are ES modules only).
ts_v2() {
  (cd "$cache/node-v2" 2>/dev/null && node --input-type=module -e "
    import { createRequire } from 'node:module';
    const req = createRequire(process.cwd() + '/');
    const v = (p) => req('./node_modules/' + p + '/package.json').version;
    if (v('@modelcontextprotocol/client') !== '$MCP_TS_V2' || v('@modelcontextprotocol/ext-tasks') !== '$EXT_TASKS') process.exit(1);
    await import('@modelcontextprotocol/client');
    await import('@modelcontextprotocol/client/stdio');
    await import('@modelcontextprotocol/ext-tasks/client');
  ") >/dev/null 2>&1
}
if ! ts_v2; then
  echo "installing the MCP TypeScript client v2 $MCP_TS_V2 and ext-tasks $EXT_TASKS into $cache/node-v2"
  command -v npm >/dev/null || fail "npm is missing (needed to install @modelcontextprotocol/client)"
  mkdir -p "$cache/node-v2"
  (cd "$cache/node-v2" && npm install --silent --no-audit --no-fund \
    "@modelcontextprotocol/client@$MCP_TS_V2" "@modelcontextprotocol/ext-tasks@$EXT_TASKS" >/dev/null) ||
    fail "npm could not install @modelcontextprotocol/client@$MCP_TS_V2 and @modelcontextprotocol/ext-tasks@$EXT_TASKS into $cache/node-v2"
  ts_v2 || fail "@modelcontextprotocol/client $MCP_TS_V2 or ext-tasks $EXT_TASKS is not importable from $cache/node-v2 after installing them (node >= 20 needed: $(node --version))"
fi

# The Inspector counts only if its CLI runs and says its version.
inspector() {
  [ "$("$cache/inspector/node_modules/.bin/mcp-inspector" --cli --version 2>/dev/null)" = "$INSPECTOR" ]
}
if ! inspector; then
  echo "installing the MCP Inspector $INSPECTOR into $cache/inspector"
  mkdir -p "$cache/inspector"
  (cd "$cache/inspector" && npm install --silent --no-audit --no-fund "@modelcontextprotocol/inspector@$INSPECTOR" >/dev/null) ||
    fail "npm could not install @modelcontextprotocol/inspector@$INSPECTOR into $cache/inspector"
  inspector || fail "the MCP Inspector $INSPECTOR does not run from $cache/inspector after installing it ($cache/inspector/node_modules/.bin/mcp-inspector --cli --version)"
fi

# The Codex CLI counts only if it runs (what ci/test.sh and ci/interop.sh check too).
codex=$cache/codex/node_modules/.bin/codex
if [ "${REAPER_SKIP_CODEX:-}" != 1 ] && ! "$codex" --version >/dev/null 2>&1; then
  echo "installing the Codex CLI $CODEX into $cache/codex (large; REAPER_SKIP_CODEX=1 skips it)"
  mkdir -p "$cache/codex"
  (cd "$cache/codex" && npm install --silent --no-audit --no-fund "@openai/codex@$CODEX" >/dev/null) || true
  if ! "$codex" --version >/dev/null 2>&1; then
    echo "warning: could not install @openai/codex $CODEX ($codex --version fails); the real-codex tests will be skipped"
  fi
fi

# tini, for the negative control of cli/tests/init.rs (reaper as PID 1 beside tini); optional: the
# test says "skipped" without it.
if ! tini --version >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  # Package lists as shipped may be stale (a version the mirror no longer has): update, retry.
  apt-get install -y -q --no-remove tini >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-remove tini >/dev/null 2>&1; } || true
  if ! tini --version >/dev/null 2>&1; then
    echo "note: cannot install tini (Debian package tini); the tini control in cli/tests/init.rs will be skipped"
  fi
fi

# The VM lane (ci/vm): QEMU, mmdebstrap, and its Debian image (cached under $cache/vm, rebuilt
# only when its recipe changes). ci/test.sh fails if the lane cannot run here, unless
# REAPER_SKIP_VM=1 says to do without it.
if [ "${REAPER_SKIP_VM:-}" != 1 ]; then
  ci/vm/install-deps.sh
fi

# ---- Packaging: what ci/dist.sh and ci/dist-test.sh need (the static musl binaries for amd64
# and arm64, the wheels, the npm packages, and installing them as a user would). Self-contained:
# installed from the image as shipped, then verified; whatever is still missing stops the run
# here, named.
dist_missing() { echo "ci/install-deps.sh: packaging: $*" >&2; exit 1; }
for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$t"; then
    echo "adding the Rust target $t (static binaries)"
    timeout 300 rustup target add "$t" >/dev/null 2>&1 || true
  fi
  rustup target list --installed 2>/dev/null | grep -qx "$t" ||
    dist_missing "the Rust target $t is missing and 'rustup target add $t' failed"
done

# maturin builds the wheels (with zig for the Python library's manylinux2014 ones: glibc 2.17),
# cargo-zigbuild the Node addons (zig too); uv and pipx install them (PyPI), in a venv of their own.
MATURIN=1.16.0
UV=0.13.8
PIPX=1.18.4
ZIGLANG=0.13.0
CARGO_ZIGBUILD=0.24.0
dist_venv=$cache/dist-venv
dist_venv_ok() {
  "$dist_venv/bin/python" - "$MATURIN" "$UV" "$PIPX" "$ZIGLANG" "$CARGO_ZIGBUILD" 2>/dev/null <<'PY'
import importlib.metadata as m, sys
sys.exit(0 if [m.version(p) for p in ("maturin", "uv", "pipx", "ziglang", "cargo-zigbuild")] == sys.argv[1:] else 1)
PY
}
if ! dist_venv_ok; then
  echo "installing maturin $MATURIN, uv $UV, pipx $PIPX, ziglang $ZIGLANG and cargo-zigbuild $CARGO_ZIGBUILD into $dist_venv"
  python3 -m venv "$dist_venv"
  "$dist_venv/bin/pip" install -q "maturin==$MATURIN" "uv==$UV" "pipx==$PIPX" "ziglang==$ZIGLANG" \
    "cargo-zigbuild==$CARGO_ZIGBUILD" ||
    dist_missing "pip could not install maturin, uv, pipx, ziglang and cargo-zigbuild (PyPI)"
fi
dist_venv_ok ||
  dist_missing "$dist_venv lacks maturin $MATURIN, uv $UV, pipx $PIPX, ziglang $ZIGLANG or cargo-zigbuild $CARGO_ZIGBUILD"
[ "$("$dist_venv/bin/python" -m ziglang version 2>/dev/null)" = "$ZIGLANG" ] ||
  dist_missing "$dist_venv's zig does not run or is not $ZIGLANG (python -m ziglang version)"
for tool in maturin uv uvx pipx cargo-zigbuild; do
  "$dist_venv/bin/$tool" --version >/dev/null 2>&1 || dist_missing "$dist_venv/bin/$tool does not run"
done

# Debian: a static busybox (the empty root's only commands) and qemu-aarch64 (runs the arm64
# binary; qemu-user, a quarter of qemu-user-static's 380 MB, which also does). One apt
# transaction that may not remove anything the image ships.
static_busybox() {
  command -v busybox >/dev/null && ! readelf -lW "$(command -v busybox)" 2>/dev/null | grep -q 'program interpreter'
}
dist_apt=()
static_busybox || dist_apt+=(busybox-static)
dist_qemu() { command -v qemu-aarch64 || command -v qemu-aarch64-static; }
dist_qemu >/dev/null || dist_apt+=(qemu-user)
if [ ${#dist_apt[@]} -gt 0 ]; then
  { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } ||
    dist_missing "${dist_apt[*]} (Debian) are missing, and installing them needs root and apt-get"
  echo "installing for the packaging checks: ${dist_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || true
  apt-get install -y -q --no-install-recommends --no-remove "${dist_apt[@]}" >/dev/null ||
    dist_missing "apt-get could not install ${dist_apt[*]} without removing a package"
fi
static_busybox || dist_missing "no static busybox on PATH (Debian busybox-static)"
{ q=$(dist_qemu) && "$q" --version >/dev/null 2>&1; } || dist_missing "qemu-aarch64 does not run (Debian qemu-user)"
for tool in npm npx node readelf unshare; do
  command -v "$tool" >/dev/null || dist_missing "$tool is missing"
done

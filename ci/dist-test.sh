#!/usr/bin/env bash
# Installs what ci/dist.sh built as a user would, from the files alone (no registry), and drives
# each installed `reaper mcp` with an official MCP client (the interop suites of tests/interop):
#   static `reaper check --suite` from reaper-linux-amd64 alone in an empty root, only busybox
#          beside it (ci/suite-empty-root.sh; its skip, 77, fails here as root on Linux)
#   wheel  uv pip install into a fresh venv: the Python SDK suite against venv/bin/reaper;
#          uvx --from WHEEL reaper: the same suite, through uvx; a client signalling uvx
#          mid-call (tests/interop/launcher_signals.py), as for each launcher below;
#          uv tool install WHEEL and pipx install WHEEL: --version, doctor, and the suite's
#          list-tools and call tests through the installed command
#   npm    npx -p PLATFORM.tgz -p reaper-cli.tgz reaper: the TypeScript SDK suite, through npx;
#          npm install -g of both: the Python suite's list-tools and call tests; npx with
#          install scripts off (the JavaScript launcher stays between): list tools and a call
# Everything goes into a temporary directory (fresh uv, pipx and npm caches), removed at the end;
# no registry is asked, but pipx fetches a current pip for itself.
# Needs ci/dist.sh's output (target/artifacts) and ci/install-deps.sh (uv, pipx, the MCP SDKs).
set -euo pipefail
trap 'echo "ci/dist-test.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
dist=${REAPER_DIST_DIR:-${CARGO_TARGET_DIR:-target}/artifacts}
dist=$(cd "$dist" && pwd)

die() { echo "ci/dist-test.sh: $*" >&2; exit 1; }
step() { printf '\n--- %s\n' "$*"; }
for tool in "$cache/dist-venv/bin/uv" "$cache/dist-venv/bin/pipx" "$cache/venv/bin/python"; do
  [ -x "$tool" ] || die "$tool is missing (ci/install-deps.sh installs it)"
done
[ -d "$cache/node/node_modules/@modelcontextprotocol/sdk" ] || die "the MCP TypeScript SDK is missing (ci/install-deps.sh)"
command -v npx >/dev/null || die "npx is missing (Debian npm)"
uv=$cache/dist-venv/bin/uv
version=$("$dist/reaper-linux-amd64" --version) || die "no $dist/reaper-linux-amd64: run ci/dist.sh"
version=${version#reaper }
wheel=$(ls "$dist"/reaper_cli-"$version"-*x86_64*.whl) || die "no x86_64 wheel in $dist"
npm_main=$dist/npm/reaper-cli-$version.tgz npm_platform=$dist/npm/reaper-cli-linux-x64-$version.tgz
{ [ -f "$npm_main" ] && [ -f "$npm_platform" ]; } || die "no npm packages in $dist/npm"

step "static: reaper check --suite in an empty root (ci/suite-empty-root.sh)"
rc=0
ci/suite-empty-root.sh "$dist/reaper-linux-amd64" || rc=$?
if [ "$rc" = 77 ] && [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ]; then
  die "ci/suite-empty-root.sh skipped, yet this host (Linux, root) can run it"
fi
[ "$rc" = 0 ] || [ "$rc" = 77 ] || die "ci/suite-empty-root.sh failed (exit $rc)"

# The interop suites' helpers (fake codex, the fixture), built with reaper as ci/test.sh builds them.
cargo build --quiet -p reaper-cli -p reaper-testkit --bins
tmp=$(mktemp -d "${TMPDIR:-/tmp}/reaper-dist-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export UV_CACHE_DIR=$tmp/uv-cache UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1
export npm_config_cache=$tmp/npm-cache npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export NODE_PATH=$cache/node/node_modules
pysuite() {  # [PYTEST ARGS...]: the Python SDK suite against $REAPER_BIN or $REAPER_COMMAND
  "$cache/venv/bin/python" -m pytest -q -p no:cacheprovider tests/interop/test_mcp_python.py "$@"
}
expect_version() {  # WHAT CMD...
  local got
  got=$("${@:2}" --version) || die "$1: --version failed"
  [ "$got" = "reaper $version" ] || die "$1: --version says \"$got\", not \"reaper $version\""
  echo "ok: $1: $got"
}
timed() { local s=$SECONDS; "$@"; echo "($((SECONDS - s)) s)"; }
# A client ends `LAUNCHER mcp` mid-call (SIGTERM, SIGKILL, SIGKILL of its group, stdin closed):
# neither the call's tree nor reaper may outlive it.
launcher_signals() {  # LAUNCHER...
  REAPER_COMMAND=$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@") \
    FAKE_CODEX=${CARGO_TARGET_DIR:-target}/debug/fake-codex timed python3 tests/interop/launcher_signals.py
}

step "wheel: uv pip install $(basename "$wheel") into a fresh venv"
"$uv" venv -q "$tmp/venv"
"$uv" pip install -q --offline --python "$tmp/venv/bin/python" "$wheel"
expect_version "venv/bin/reaper" "$tmp/venv/bin/reaper"
cmp -s "$tmp/venv/bin/reaper" "$dist/reaper-linux-amd64" || die "the venv's reaper is not the static binary"
echo "ok: venv/bin/reaper is the static binary itself (no Python launcher)"
REAPER_BIN=$tmp/venv/bin/reaper timed pysuite

step "wheel: uvx --from $(basename "$wheel") reaper"
uvx=("$cache/dist-venv/bin/uvx" --offline --from "$wheel" reaper)
expect_version "uvx --from WHEEL reaper" "${uvx[@]}"
REAPER_COMMAND=$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${uvx[@]}") timed pysuite
launcher_signals "${uvx[@]}"

step "wheel: uv tool install"
export UV_TOOL_DIR=$tmp/uv-tools UV_TOOL_BIN_DIR=$tmp/uv-bin
"$uv" tool install -q --offline "$wheel"
expect_version "uv tool install: reaper" "$tmp/uv-bin/reaper"
"$tmp/uv-bin/reaper" doctor >/dev/null || die "uv tool install: reaper doctor failed"
REAPER_BIN=$tmp/uv-bin/reaper timed pysuite -k "list or call"

step "wheel: pipx install"
# pip, as most pipx users have it (pipx would pick the uv beside it). pipx first fetches a
# current pip for itself from PyPI; the wheel comes from the file.
PIPX_HOME=$tmp/pipx PIPX_BIN_DIR=$tmp/pipx-bin PIPX_MAN_DIR=$tmp/pipx-man \
  "$cache/dist-venv/bin/pipx" install --quiet --backend pip "$wheel" >/dev/null
expect_version "pipx install: reaper" "$tmp/pipx-bin/reaper"
"$tmp/pipx-bin/reaper" doctor >/dev/null || die "pipx install: reaper doctor failed"
REAPER_BIN=$tmp/pipx-bin/reaper timed pysuite -k "list or call"

step "npm: npx -p $(basename "$npm_platform") -p $(basename "$npm_main") reaper"
npx=(npx --yes --offline -p "$npm_platform" -p "$npm_main" reaper)
expect_version "npx … reaper" "${npx[@]}"
# The postinstall step put the binary itself in place of the launcher.
launcher=$(find "$npm_config_cache/_npx" -path '*/node_modules/reaper-cli/bin/reaper' | head -n 1)
cmp -s "$launcher" "$dist/reaper-linux-amd64" || die "npx: bin/reaper is still the JavaScript launcher ($launcher)"
echo "ok: npx runs the binary itself (bin/reaper replaced at install)"
REAPER_COMMAND=$(node -e 'console.log(JSON.stringify(process.argv.slice(1)))' -- "${npx[@]}") \
  timed node --test tests/interop/mcp_ts.test.cjs
launcher_signals "${npx[@]}"

step "npm: npm install -g of both files"
npm install -g --silent --offline --prefix "$tmp/npm-global" "$npm_platform" "$npm_main"
expect_version "npm install -g: reaper" "$tmp/npm-global/bin/reaper"
cmp -s "$(readlink -f "$tmp/npm-global/bin/reaper")" "$dist/reaper-linux-amd64" ||
  die "npm install -g: bin/reaper is still the JavaScript launcher"
REAPER_BIN=$tmp/npm-global/bin/reaper timed pysuite -k "list or call"

step "npm: the same without install scripts (the JavaScript launcher runs reaper)"
export npm_config_cache=$tmp/npm-cache-noscripts npm_config_ignore_scripts=true
expect_version "npx … reaper (launcher)" "${npx[@]}"
launcher=$(find "$npm_config_cache/_npx" -path '*/node_modules/reaper-cli/bin/reaper' | head -n 1)
head -c 2 "$launcher" | grep -q '#!' || die "npx without scripts: bin/reaper is not the launcher"
REAPER_COMMAND=$(node -e 'console.log(JSON.stringify(process.argv.slice(1)))' -- "${npx[@]}") \
  timed node --test --test-name-pattern "lists|returns" tests/interop/mcp_ts.test.cjs
launcher_signals "${npx[@]}"

step "PyPI: reaper-process (Python bindings) installed and tested (ci/dist-test-python.sh)" && ci/dist-test-python.sh "$dist"
step "npm: reaper-process (Node bindings) installed and tested (ci/dist-test-node.sh)" && ci/dist-test-node.sh "$dist"
echo
echo "every channel installed reaper $version from its file and served the MCP clients"

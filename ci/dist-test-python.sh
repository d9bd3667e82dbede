#!/usr/bin/env bash
# Installs the Python library's x86_64 wheel (reaper_process, from ci/dist-python.sh) as a user
# would — `uv pip install 'WHEEL[mcp]'` into a fresh venv, the mcp extra and pytest from PyPI
# (pinned as ci/install-deps.sh pins them) — and runs its pytest suite (bindings/python/tests)
# there against the installed package, the hostile trees from testkit's reaper-fixture.
#
#   ci/dist-test-python.sh DIST
set -euo pipefail
trap 'echo "ci/dist-test-python.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
die() { echo "ci/dist-test-python.sh: $*" >&2; exit 1; }
dist=${1:?usage: ci/dist-test-python.sh DIST}
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
uv=$cache/dist-venv/bin/uv
[ -x "$uv" ] || die "uv is missing at $uv (ci/install-deps.sh)"
wheel=$(ls "$dist"/reaper_process-*manylinux_2_17_x86_64*.whl 2>/dev/null | head -n 1) || true
[ -n "$wheel" ] || die "no reaper_process manylinux x86_64 wheel in $dist (ci/dist-python.sh)"
target=${CARGO_TARGET_DIR:-target}
# As ci/dist-test.sh builds the testkit (the same features: nothing built twice).
cargo build --quiet -p reaper-cli -p reaper-testkit --bins
fixture=$(cd "$target/debug" && pwd)/reaper-fixture

tmp=$(mktemp -d "${TMPDIR:-/tmp}/reaper-dist-test-python.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export UV_CACHE_DIR=$tmp/uv-cache UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1
printf '\n--- Python library: uv pip install %s[mcp] into a fresh venv\n' "$(basename "$wheel")"
s=$SECONDS
"$uv" venv -q --python python3 "$tmp/venv"
"$uv" pip install -q --python "$tmp/venv/bin/python" "$wheel[mcp]" "mcp==2.3.0" "pytest==8.3.4"
echo "installed in $((SECONDS - s)) s"
# The suite imports the installed package, not the checkout's sources.
where=$("$tmp/venv/bin/python" -c 'import reaper; print(reaper.__file__)')
case $where in "$tmp/venv/"*) echo "ok: import reaper -> $where" ;; *) die "import reaper found $where, not the venv's" ;; esac
s=$SECONDS
(cd bindings/python/tests && REAPER_FIXTURE_BIN=$fixture "$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider .)
echo "the Python suite passed against the installed wheel ($((SECONDS - s)) s)"

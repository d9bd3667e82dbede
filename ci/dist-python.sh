#!/usr/bin/env bash
# Builds the Python library's wheels (reaper_process, bindings/python: `import reaper`) into OUT,
# beside ci/dist.sh's artifacts, and checks each: its tag, the glibc its native module needs, its
# contents. Prints each build's seconds and each wheel's size.
#   reaper_process-VERSION-cp39-abi3-manylinux_2_17_x86_64.whl   always (CI installs and tests it:
#                                                                ci/dist-test-python.sh)
#   …manylinux_2_17_aarch64, …musllinux_1_2_{x86_64,aarch64}      with REAPER_DIST_PYTHON_ALL=1
#                                                                (each a full release build of
#                                                                its own: too slow for CI's budget)
# glibc 2.17 through `maturin build --zig` (ziglang from PyPI in $REAPER_CI_CACHE/dist-venv, as
# maturin; ci/install-deps.sh installs both and checks their versions).
#
#   ci/dist-python.sh OUT
set -euo pipefail
trap 'echo "ci/dist-python.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
die() { echo "ci/dist-python.sh: $*" >&2; exit 1; }
out=${1:?usage: ci/dist-python.sh OUT}
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
venv=$cache/dist-venv
[ -x "$venv/bin/maturin" ] || die "maturin is missing at $venv/bin/maturin (ci/install-deps.sh)"
"$venv/bin/python" -m ziglang version >/dev/null 2>&1 || die "zig is missing from $venv (PyPI ziglang; ci/install-deps.sh)"
# maturin finds zig as `python -m ziglang` of the interpreter on PATH.
export PATH=$venv/bin:$PATH
# A native module built in place for development must not go into a wheel.
rm -f bindings/python/python/reaper/_native*.so

wheels=("x86_64-unknown-linux-gnu manylinux2014")
if [ "${REAPER_DIST_PYTHON_ALL:-}" = 1 ]; then
  wheels+=("aarch64-unknown-linux-gnu manylinux2014" "x86_64-unknown-linux-musl musllinux_1_2" "aarch64-unknown-linux-musl musllinux_1_2")
fi
for w in "${wheels[@]}"; do
  read -r triple compat <<<"$w"
  rustup target list --installed | grep -qx "$triple" || die "the Rust target $triple is missing (rustup target add $triple)"
  printf '\n--- Python wheel for %s (%s)\n' "$triple" "$compat"
  s=$SECONDS
  maturin build --quiet --locked -m bindings/python/Cargo.toml --target "$triple" --zig \
    --compatibility "$compat" --out "$out" 2>&1 | grep -v '^\(🔗\|📡\|📦\|🍹\|🐍\|🛠\)' || true
  arch=${triple%%-*}
  case $compat in manylinux2014) tag=manylinux_2_17_$arch ;; *) tag=${compat}_$arch ;; esac
  wheel=$(ls "$out"/reaper_process-*-cp39-abi3-*"$tag"*.whl 2>/dev/null | head -n 1) || true
  [ -n "$wheel" ] || die "maturin wrote no $tag wheel for $triple into $out"
  python3 - "$wheel" "$compat" <<'PY' || die "the wheel $wheel is not as it should be"
import re, subprocess, sys, tempfile, zipfile
wheel, compat = sys.argv[1:]
z = zipfile.ZipFile(wheel)
names = set(z.namelist())
need = {"reaper/__init__.py", "reaper/_native.abi3.so", "reaper/asyncio.py", "reaper/mcp.py", "reaper/py.typed", "reaper/__init__.pyi"}
missing = need - names
assert not missing, f"missing {missing}"
meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
assert "Provides-Extra: mcp" in meta, "no mcp extra"
if compat == "manylinux2014":
    with tempfile.NamedTemporaryFile() as f:
        f.write(z.read("reaper/_native.abi3.so")); f.flush()
        syms = subprocess.run(["readelf", "-VW", f.name], capture_output=True, text=True).stdout
    vers = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", syms)}
    assert vers and max(vers) <= (2, 17), f"needs glibc {max(vers)}"
PY
  echo "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB, built in $((SECONDS - s)) s"
done

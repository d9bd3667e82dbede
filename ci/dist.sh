#!/usr/bin/env bash
# Builds what reaper ships, into target/artifacts/ ($REAPER_DIST_DIR), and checks each static
# binary where it has to run:
#   reaper-linux-amd64, reaper-linux-arm64      static binaries (musl): the download, the
#                                               Containerfile's input, the packages' payload
#   reaper_cli-VERSION-py3-none-….whl           wheels putting `reaper` on PATH (maturin's
#                                               binary layout, tagged manylinux + musllinux)
#   npm/reaper-cli-VERSION.tgz                  the npm package (its `bin` is reaper) and the
#   npm/reaper-cli-linux-{x64,arm64}-VERSION.tgz  per-platform packages carrying the binary
#   SHA256SUMS
# amd64 runs `--version`, `doctor`, `run` and `timeout` in an otherwise empty root (only reaper
# and a static busybox; /proc, /dev/null and the cgroup2 mount, as a container runtime gives
# them), as a plain process and as PID 1; arm64 runs `--version` and `doctor` under qemu-aarch64
# user emulation. The wheels and npm packages are installed and driven by ci/dist-test.sh.
#
#   ci/dist.sh [amd64|arm64]...      (default: both)
#
# Needs the rustup targets, maturin (in $REAPER_CI_CACHE/dist-venv), npm, busybox-static,
# qemu-user (or qemu-user-static) and root (namespaces): ci/install-deps.sh installs them. A
# missing one fails
# the script, naming it.
set -euo pipefail
trap 'echo "ci/dist.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
out=${REAPER_DIST_DIR:-${CARGO_TARGET_DIR:-target}/artifacts}
target=${CARGO_TARGET_DIR:-target}
maturin=${MATURIN:-$cache/dist-venv/bin/maturin}
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(amd64 arm64)

die() { echo "ci/dist.sh: $*" >&2; exit 1; }
step() { printf '\n--- %s\n' "$*"; }
need() {  # TOOL WHAT-PROVIDES-IT
  command -v "$1" >/dev/null || die "$1 is missing ($2; ci/install-deps.sh installs it)"
}
[ -x "$maturin" ] || die "maturin is missing at $maturin (PyPI maturin; ci/install-deps.sh installs it)"
need npm "Debian nodejs/npm"
need readelf "Debian binutils"
triple() { case $1 in amd64) echo x86_64-unknown-linux-musl ;; arm64) echo aarch64-unknown-linux-musl ;; *) die "unknown arch $1 (amd64, arm64)" ;; esac; }
node_arch() { case $1 in amd64) echo x64 ;; arm64) echo arm64 ;; esac; }
for arch in "${arches[@]}"; do
  rustup target list --installed | grep -qx "$(triple "$arch")" ||
    die "the Rust target $(triple "$arch") is missing (rustup target add $(triple "$arch"))"
done
case " ${arches[*]} " in *" amd64 "*) need busybox "Debian busybox-static"; need unshare "Debian util-linux" ;; esac
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
case " ${arches[*]} " in *" arm64 "*) [ -n "$qemu" ] || die "qemu-aarch64 is missing (Debian qemu-user; ci/install-deps.sh installs it)" ;; esac

rm -rf "$out"
mkdir -p "$out/npm"
out=$(cd "$out" && pwd)
t0=$SECONDS

# Every target in one cargo build, in the `dist` profile: their crates compile side by side,
# where one target alone leaves a core idle through its long final crate. maturin then finds each
# up to date and only packs it (checked below: the wheel must carry the very binary tested here).
targets=()
for arch in "${arches[@]}"; do targets+=(--target "$(triple "$arch")"); done
step "build ${arches[*]}"
s=$SECONDS
cargo build --locked --quiet --profile dist -p reaper-cli --bin reaper "${targets[@]}"
echo "built in $((SECONDS - s)) s"
for arch in "${arches[@]}"; do
  t=$(triple "$arch")
  bin=$target/$t/dist/reaper
  # Static: no program interpreter, no shared libraries.
  if readelf -lW "$bin" | grep -q 'program interpreter' || readelf -dW "$bin" | grep -q NEEDED; then
    die "$bin is not static: $(readelf -dW "$bin" | grep NEEDED | tr -s ' ')"
  fi
  cp "$bin" "$out/reaper-linux-$arch"
  echo "reaper-linux-$arch: $(du -k "$out/reaper-linux-$arch" | cut -f1) KiB, static"

  step "wheel for $t"
  "$maturin" build --quiet --locked --target "$t" --compatibility manylinux2014 musllinux_1_1 --out "$out" 2>&1 |
    grep -v '^\(🔗\|📡\|📦\)' || true
  wheel=
  for w in "$out"/reaper_cli-*"${t%%-*}".whl; do [ -f "$w" ] && wheel=$w; done
  [ -n "$wheel" ] || die "maturin wrote no wheel for $t"
  python3 - "$wheel" "$bin" <<'EOF' || die "the wheel's reaper is not the binary cargo built ($wheel)"
import sys, zipfile
wheel, bin = sys.argv[1:]
z = zipfile.ZipFile(wheel)
names = [n for n in z.namelist() if n.endswith(".data/scripts/reaper")]
sys.exit(0 if len(names) == 1 and z.read(names[0]) == open(bin, "rb").read() else 1)
EOF
  echo "$(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
done

version=$("$target/$(triple "${arches[0]}")/dist/reaper" --version 2>/dev/null || "$qemu" "$target/$(triple "${arches[0]}")/dist/reaper" --version)
version=${version#reaper }

step "npm packages $version"
for arch in "${arches[@]}"; do
  name=reaper-cli-linux-$(node_arch "$arch")
  pkg=$out/npm/$name
  mkdir -p "$pkg/bin"
  cp "$out/reaper-linux-$arch" "$pkg/bin/reaper"
  cat >"$pkg/package.json" <<EOF
{
  "name": "$name",
  "version": "$version",
  "description": "The reaper binary for Linux $(node_arch "$arch") (static); installed by the package reaper-cli",
  "license": "MIT OR Apache-2.0",
  "os": ["linux"],
  "cpu": ["$(node_arch "$arch")"],
  "files": ["bin/reaper"],
  "preferUnplugged": true
}
EOF
  # shellcheck disable=SC2016 # backquotes are markdown
  printf '# %s\n\nThe `reaper` binary for Linux %s, static. Install `reaper-cli`, which depends on this package.\n' \
    "$name" "$(node_arch "$arch")" >"$pkg/README.md"
  (cd "$pkg" && npm pack --loglevel=error --pack-destination "$out/npm" >/dev/null)
done
cp -r npm/reaper-cli "$out/npm/reaper-cli"
(
  cd "$out/npm/reaper-cli"
  npm pkg set "version=$version" \
    "optionalDependencies.reaper-cli-linux-x64=$version" "optionalDependencies.reaper-cli-linux-arm64=$version"
  npm pack --loglevel=error --pack-destination .. >/dev/null
)
rm -rf "${out:?}/npm/reaper-cli" "$out/npm/reaper-cli-linux-"{x64,arm64}
ls -l "$out/npm"
step "npm packages of reaper-process (Node bindings; ci/dist-node.sh)" && ci/dist-node.sh "$out/npm" "$version"

# Runs reaper in ROOT, an otherwise empty directory, in a mount namespace of its own (the
# host's mounts are not touched): /proc, /dev/null and the cgroup2 mount bound in, as a
# container runtime gives them. `inroot pid1 …` makes it PID 1 of a new PID namespace too.
inroot() {
  local pid1=()
  [ "$1" = pid1 ] && { pid1=(unshare --pid --fork --mount-proc=/proc --root="$root" --wd=/); shift; }
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare --mount --propagation private -- sh -c '
    root=$1; cg=$2; shift 2
    mkdir -p "$root/proc" "$root/dev" "$root/tmp" "$root$cg" && : >"$root/dev/null"
    mount --bind /dev/null "$root/dev/null" && mount --rbind "$cg" "$root$cg" || exit 125
    if [ "$1" = unshare ]; then exec "$@"; fi
    mount -t proc proc "$root/proc" && exec chroot "$root" "$@"' sh "$root" "$cg2" "${pid1[@]}" "$@"
}
check() {  # WHAT EXPECTED-STATUS CMD...
  local what=$1 want=$2 got=0; shift 2
  "$@" >"$root.out" 2>&1 || got=$?
  if [ "$got" != "$want" ]; then
    cat "$root.out"
    die "empty root: $what: exit $got, expected $want"
  fi
  echo "ok: $what (exit $got)"
}

case " ${arches[*]} " in *" amd64 "*)
  step "the static binary in an empty root (reaper and busybox only)"
  cg2=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
  [ -n "$cg2" ] || die "no cgroup2 mount on this host"
  root=$(mktemp -d "${TMPDIR:-/tmp}/reaper-emptyroot.XXXXXX")
  trap 'rm -rf "$root" "$root.out"' EXIT
  mkdir -p "$root/bin"
  cp "$out/reaper-linux-amd64" "$root/bin/reaper"
  cp "$(command -v busybox)" "$root/bin/busybox"
  for applet in sh sleep setsid true cat; do ln -s busybox "$root/bin/$applet"; done
  # Negative control: a dynamically linked program cannot start there (no libc, no loader).
  cp /bin/true "$root/bin/glibc-true"
  check "a glibc program cannot start (no libc)" 127 inroot /bin/glibc-true
  check "reaper --version" 0 inroot /bin/reaper --version
  check "reaper doctor" 0 inroot /bin/reaper doctor
  grep -q '^auto backend  *cgroup' "$root.out" || { cat "$root.out"; die "empty root: doctor finds no cgroup backend"; }
  leak='setsid sh -c "trap \"\" TERM; sleep 600" & sleep 600'
  check "reaper run --timeout: the setsid'd TERM-ignoring sleep is stopped too" 124 \
    inroot /bin/reaper run --timeout 1s --grace 500ms --report /tmp/report.json -- sh -c "$leak"
  python3 - "$root/tmp/report.json" <<'EOF' || die "empty root: the run's report: $(cat "$root/tmp/report.json")"
import json, sys
r = json.load(open(sys.argv[1]))
# Both sleeps (busybox's sh execs a -c script's last command); the setsid'd one ignores TERM, so
# the teardown took the grace.
ok = r["backend"] == "cgroup" and r["killed"] == 2 and not r["survivors"] and r["teardown_ms"] >= 500
sys.exit(0 if ok else 1)
EOF
  echo "ok: report: cgroup backend, both sleeps killed (the TERM-ignoring one after the grace), no survivor"
  check "reaper timeout (GNU timeout's command line)" 124 inroot /bin/reaper timeout -s INT 0.5 sleep 10
  check "reaper timeout passes the status on" 3 inroot /bin/reaper timeout 10 sh -c 'exit 3'
  check "as PID 1, INIT -- CMD: the leader's status" 7 inroot pid1 /bin/reaper -- sh -c 'exit 7'
  check "as PID 1: doctor" 0 inroot pid1 /bin/reaper doctor
  grep -q '^container  *PID 1' "$root.out" || { cat "$root.out"; die "empty root: doctor as PID 1 does not see it"; }
  # Whatever ran in the root is gone: no process has it as its root directory.
  left=$(for p in /proc/[0-9]*; do [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"; done || true)
  [ -z "$left" ] || die "empty root: processes left running in it: $left"
  echo "ok: nothing left running in the root"
  ;;
esac

case " ${arches[*]} " in *" arm64 "*)
  step "the arm64 binary under qemu-aarch64 (user emulation)"
  "$qemu" "$out/reaper-linux-arm64" --version
  # Under emulation some probes fail (qemu-user has no clone3, no child subreaper): doctor must
  # still run to its end and name a working backend.
  doctor=$("$qemu" "$out/reaper-linux-arm64" doctor) || die "arm64: doctor failed: $doctor"
  grep '^auto backend' <<<"$doctor" || die "arm64: doctor names no backend: $doctor"
  ;;
esac

ci/dist-python.sh "$out"  # the Python library's wheels (reaper_process), beside the rest
step "artifacts in $out ($((SECONDS - t0)) s)"
sums=$(cd "$out" && find . -type f | sort | xargs sha256sum)
printf '%s\n' "$sums" >"$out/SHA256SUMS"
find "$out" -type f ! -name SHA256SUMS -printf '%8k KiB  %P\n' | sort -k3

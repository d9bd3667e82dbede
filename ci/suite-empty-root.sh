#!/usr/bin/env bash
# `reaper check --suite` from the static binary alone: a root holding only reaper and a static
# busybox (its applets linked), with /proc, /dev/null, /tmp and the cgroup2 mount, as a
# container runtime gives them; the suite runs there in a PID namespace of its own, under a
# busybox sh as PID 1. It must find its fixtures in its own binary and score
#   reaper run --die-with-parent --on-stdin-eof 1s --timeout {timeout} -- {}
#     clean in every cell of the setsid and daemon cases (exit 0, every tree recorded itself),
#   busybox's timeout {timeout} {}
#     leaking both cases at its timeout (exit 1, the trees' escapees named),
# and leave nothing running in the root. The environment there is empty but PATH=/bin.
#
#   ci/suite-empty-root.sh [BINARY]      (default: target/artifacts/reaper-linux-amd64, ci/dist.sh's)
#
# Needs Linux, root (mount and PID namespaces), unshare and chroot (util-linux, coreutils), a
# statically linked busybox (Debian busybox-static), readelf (binutils) and python3. Exits 77,
# saying `skipped: …`, where this host cannot run it. Mounts live in a mount namespace of the
# run's own (the host's are never touched); the root is removed at the end.
set -euo pipefail
trap 'echo "ci/suite-empty-root.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
bin=${1:-${REAPER_DIST_DIR:-${CARGO_TARGET_DIR:-target}/artifacts}/reaper-linux-amd64}

die() { echo "ci/suite-empty-root.sh: $*" >&2; exit 1; }
skip() { echo "skipped: suite in an empty root: $*"; exit 77; }
[ "$(uname -s)" = Linux ] || skip "not Linux"
[ "$(id -u)" = 0 ] || skip "not root (mount and PID namespaces, chroot)"
for tool in unshare chroot readelf python3 busybox; do
  command -v "$tool" >/dev/null || skip "$tool is missing (ci/install-deps.sh installs it)"
done
[ -x "$bin" ] || die "no reaper binary at $bin (run ci/dist.sh amd64, or name one)"
static() { ! readelf -lW "$1" | grep -q 'program interpreter' && ! readelf -dW "$1" | grep -q NEEDED; }
static "$bin" || die "$bin is not static: $(readelf -dW "$bin" | grep NEEDED | tr -s ' ')"
busybox=$(command -v busybox)
static "$busybox" || skip "$busybox is dynamically linked (install Debian busybox-static)"
unshare --mount --propagation private --pid --fork true 2>/dev/null || skip "unshare --mount --pid is refused here"
cg2=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
[ -n "$cg2" ] || skip "no cgroup2 mount on this host"

root=$(mktemp -d "${TMPDIR:-/tmp}/reaper-suite-root.XXXXXX")
# The mounts were the namespace's, gone with its last process: a mount still under the root
# (which rm would descend into) is refused rather than removed through.
cleanup() {
  if awk -v r="$root" 'index($5, r) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    echo "ci/suite-empty-root.sh: something is still mounted under $root; not removing it" >&2
    return
  fi
  rm -rf --one-file-system "$root"
  rm -f "$root.clean.json" "$root.leak.json"
}
trap cleanup EXIT
mkdir -p "$root/bin" "$root/tmp" "$root/proc" "$root/dev" "$root$cg2"
chmod 1777 "$root/tmp"
cp "$bin" "$root/bin/reaper"
cp "$busybox" "$root/bin/busybox"
for applet in sh env sleep kill setsid timeout true cat; do ln -s busybox "$root/bin/$applet"; done
: >"$root/dev/null"

# inroot OUT CMD...: CMD in the root, its stdout into OUT (on the host), its exit status as
# ours; a busybox sh is PID 1 of the namespace and lists in $root/tmp/left what is still
# running once CMD returned (none but itself).
inroot() {
  local out=$1; shift
  local got=0
  # shellcheck disable=SC2016 # expanded by the inner shells
  unshare --mount --propagation private --pid --fork -- sh -c '
    root=$1; cg=$2; shift 2
    mount --bind /dev/null "$root/dev/null" && mount --rbind "$cg" "$root$cg" &&
      mount -t proc proc "$root/proc" || exit 125
    exec chroot "$root" /bin/env -i PATH=/bin /bin/sh -c "
      \"\$@\" >/tmp/stdout 2>/tmp/stderr; rc=\$?
      left=
      for p in /proc/[0-9]*; do [ \"\${p#/proc/}\" = 1 ] || left=\"\$left \${p#/proc/}:\$(cat \$p/comm)\"; done
      echo \"\$left\" >/tmp/left
      exit \$rc" sh "$@"' sh "$root" "$cg2" "$@" || got=$?
  cp "$root/tmp/stdout" "$out" 2>/dev/null || : >"$out"
  cat "$root/tmp/stderr" >&2 2>/dev/null || true
  left=$(cat "$root/tmp/left" 2>/dev/null || echo "(not written)")
  [ -z "${left// /}" ] || die "left running in the root after $*:$left"
  return "$got"
}
# expect_cells JSON WANT-RESULT EXPECTED-CELL-COUNT: every cell has WANT-RESULT and ran every
# trial (no did-not-run); leaked cells name their escapees.
expect_cells() {
  python3 - "$@" <<'EOF'
import json, sys
path, want, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = json.load(open(path))
cells = r["cells"]
bad = []
for c in cells:
    line = f'  {c["case"]}:{c["end"]} {c["result"]}'
    for t in c["trials"]:
        if t["survivors"]:
            line += "  (" + ", ".join(f'{s["role"]} {",".join(s["escaped_by"])}' for s in t["survivors"]) + ")"
        if t["note"]:
            line += f'  note: {t["note"]}'
    print(line)
    ran = all(t["result"] != "did-not-run" for t in c["trials"]) and c["runs"] > 0
    named = want != "leaked" or all(t["survivors"] for t in c["trials"])
    if c["result"] != want or not ran or not named:
        bad.append(f'{c["case"]}:{c["end"]}')
if len(cells) != count:
    bad.append(f"{len(cells)} cells, expected {count}")
if bad:
    sys.exit(f"not {want}: {', '.join(bad)}")
EOF
}

echo "reaper $("$bin" --version | cut -d' ' -f2) ($bin), busybox $("$busybox" | head -n 1 | cut -d' ' -f2), cgroup2 at $cg2"
s=$SECONDS
got=0
inroot "$root.clean.json" reaper check --suite --json --settle 500ms --only setsid,daemon -- \
  reaper run --die-with-parent --on-stdin-eof 1s --timeout '{timeout}' -- '{}' || got=$?
[ "$got" = 0 ] || { cat "$root.clean.json"; die "reaper run under the suite: exit $got, expected 0"; }
expect_cells "$root.clean.json" clean 14 || die "reaper run under the suite: $(cat "$root.clean.json")"
echo "ok: reaper run holds setsid and daemon at every end, from the binary alone (exit 0, $((SECONDS - s)) s)"

s=$SECONDS
got=0
inroot "$root.leak.json" reaper check --suite --json --settle 500ms --only setsid:timeout,daemon:timeout -- \
  timeout '{timeout}' '{}' || got=$?
[ "$got" = 1 ] || { cat "$root.leak.json"; die "busybox timeout under the suite: exit $got, expected 1"; }
expect_cells "$root.leak.json" leaked 2 || die "busybox timeout under the suite: $(cat "$root.leak.json")"
echo "ok: busybox timeout leaks setsid and daemon at its timeout (exit 1, $((SECONDS - s)) s)"
echo "ok: nothing left running in the root"

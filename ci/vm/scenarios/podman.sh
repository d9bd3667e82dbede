#!/bin/bash
# reaper as the init of a real container engine: podman (Debian's, rootful, crun, systemd cgroup
# manager) runs an image built by the repository's Containerfile from the static binary, with
# reaper as PID 1 two ways — the image's entry point (`reaper run -- CMD`) and podman's
# `--init --init-path` (podman starts it as `INIT -- CMD`) — beside catatonit (podman's default
# `--init`) and tini under the same engine. For each: an app whose main process, background
# child and setsid'd grandchild trap SIGTERM to exit cleanly, plus orphans that exit under PID 1;
# `podman stop` (SIGTERM, then SIGKILL after 10 s). Checked for reaper, measured for all: which
# processes exited gracefully, zombies left, time to stop, exit status, and nothing left on the
# host (the container's cgroup, reaper-* cgroups). Needs the static binary and the Containerfile
# in the payload (ci/test.sh passes them: ci/dist.sh builds the binary).
# shellcheck disable=SC2015 # `check && pass || fail`: pass never fails
# shellcheck disable=SC2016 # APP and STUBBORN are expanded by the container's shell
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

runs=2  # per init; each costs a podman run, stop and rm (5-10 s under TCG)
static=$(command -v reaper-linux-amd64) || { fail "no reaper-linux-amd64 in the payload (ci/dist.sh builds it)"; finish; }
containerfile=$(command -v Containerfile || echo "$REAPER_VM_PAYLOAD/bin/Containerfile")
[ -f "$containerfile" ] || { fail "no Containerfile in the payload"; finish; }
pm() { podman --log-level=error "$@"; }

say "podman"
pm version --format '{{.Client.Version}}' | sed 's/^/podman /'
pm info --format 'runtime {{.Host.OCIRuntime.Name}}, cgroups {{.Host.CgroupsVersion}} via {{.Host.CgroupManager}}, storage {{.Store.GraphDriverName}}'
for init in /usr/libexec/podman/catatonit /usr/bin/tini-static; do
  [ -x "$init" ] && pass "$init is installed" || fail "$init is missing (build-image.sh installs catatonit, tini)"
done

say "the Containerfile: an image of the static binary alone (no network)"
ctx=$PWD/ctx
mkdir -p "$ctx"
cp "$static" "$ctx/reaper-linux-amd64"
if pm build --network none -q -t localhost/reaper -f "$containerfile" "$ctx" >/dev/null; then
  pass "podman build of the Containerfile"
else
  fail "podman build of the Containerfile"; finish
fi
doctor=$(pm run --rm --network none localhost/reaper 2>&1)
status=$?
printf '%s\n' "$doctor"
[ "$status" = 0 ] && grep -q '^container .*PID 1' <<<"$doctor" &&
  pass "podman run reaper: doctor sees PID 1 of a container (exit 0)" || fail "doctor in the container (exit $status)"

# The test image: reaper's image plus a static busybox, its shell as the entry point.
mkdir -p rootfs/bin rootfs/out
cp /bin/busybox rootfs/bin/busybox
for applet in sh sleep setsid cat tr; do ln -s busybox "rootfs/bin/$applet"; done
printf 'FROM localhost/reaper\nCOPY rootfs/ /\nENTRYPOINT ["/bin/sh", "-c"]\nCMD ["true"]\n' >Containerfile.test
pm build --network none -q -t localhost/reaper-app -f Containerfile.test . >/dev/null ||
  { fail "podman build of the test image"; finish; }

# The app: "ready NAME" once its trap is set, "graceful NAME" from the trap; main also notes PID
# 1's command line and the zombies left 2 s after five orphans exited under PID 1.
APP='
trap "echo graceful main >> \$OUT; exit 0" TERM
part="trap \"echo graceful \$0 >> \\\$OUT; exit 0\" TERM; echo ready \$0 >> \$OUT; while :; do sleep 600 & wait \$!; done"
sh -c "$part" child &
setsid sh -c "$part" grandchild &
echo "pid1 $(tr "\000" " " </proc/1/cmdline)" >> $OUT
for i in 1 2 3 4 5; do (sleep 0.1 &); done
sleep 2
z=0
for s in /proc/[0-9]*/stat; do read -r _ _ st _ <"$s" 2>/dev/null && [ "$st" = Z ] && z=$((z + 1)); done
echo "zombies $z" >> $OUT
echo ready main >> $OUT
while :; do sleep 600 & wait $!; done'
# Main ignores SIGTERM: only a kill ends it.
STUBBORN='trap "" TERM; echo ready main >> $OUT; while :; do sleep 600 & wait $!; done'

inits=(reaper-run reaper-init-path catatonit tini)
declare -A how=(
  [reaper-run]="entry point: reaper run -- sh -c APP"
  [reaper-init-path]="--init --init-path reaper (podman: INIT -- sh -c APP)"
  [catatonit]="--init (podman's default, catatonit)"
  [tini]="--init --init-path tini-static"
)
# opts_for INIT: sets opts, the podman run options that make INIT the container's PID 1.
opts_for() {
  case $1 in
    reaper-run) opts=('--entrypoint=["/usr/local/bin/reaper","run","--","/bin/sh","-c"]') ;;
    reaper-init-path) opts=(--init --init-path "$static") ;;
    catatonit) opts=(--init) ;;
    tini) opts=(--init --init-path /usr/bin/tini-static) ;;
  esac
}
out=$PWD/out
mkdir -p "$out"
now() { date +%s.%N; }
leftover_cgroups() {  # ID: the container's cgroups and any reaper-* one still there
  find /sys/fs/cgroup -type d \( -name "*$1*" -o -name 'reaper-*' \) ! -name reaper-vm.service 2>/dev/null
}

declare -A graceful zombies stop_s codes pid1
# run_app INIT KIND N: starts the app (KIND: APP or STUBBORN), stops it with podman stop, records.
run_app() {
  local init=$1 kind=$2 n=$3 f cid t0 t1 code left opts
  f=$out/$init.$kind.$n
  : >"$f"
  opts_for "$init"
  cid=$(pm run -d --network none -v "$out:/out" -e "OUT=/out/${f##*/}" "${opts[@]}" \
    localhost/reaper-app "${!kind}") || { fail "$init: podman run failed"; return; }
  for _ in $(seq 600); do grep -qx 'ready main' "$f" && break; sleep 0.1; done
  [ "$kind" = STUBBORN ] || for _ in $(seq 200); do
    [ "$(grep -c '^ready' "$f")" = 3 ] && break; sleep 0.1
  done
  grep -qx 'ready main' "$f" || fail "$init: the app never got ready: $(cat "$f")"
  t0=$(now)
  pm stop -t 10 "$cid" >/dev/null
  t1=$(now)
  code=$(pm inspect -f '{{.State.ExitCode}}' "$cid")
  pm rm -f "$cid" >/dev/null
  left=$(leftover_cgroups "$cid")
  [ -z "$left" ] && pass "$init/$kind $n: nothing left on the host" ||
    fail "$init/$kind $n: cgroups left after podman rm: $left"
  stop_s[$init.$kind]+=" $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"
  codes[$init.$kind]+=" $code"
  [ "$kind" = APP ] || return 0
  pid1[$init]=$(sed -n 's/^pid1 //p' "$f")
  zombies[$init]+=" $(sed -n 's/^zombies //p' "$f")"
  for who in main child grandchild; do
    grep -qx "graceful $who" "$f" && graceful[$init.$who]=$((${graceful[$init.$who]:-0} + 1))
  done
}

for init in "${inits[@]}"; do
  say "$init: ${how[$init]}, $runs runs, then one whose main ignores SIGTERM"
  for n in $(seq "$runs"); do run_app "$init" APP "$n"; done
  run_app "$init" STUBBORN 1
  echo "PID 1's command line: ${pid1[$init]}"
done

say "checks for reaper"
for init in reaper-run reaper-init-path; do
  for who in main child grandchild; do
    [ "${graceful[$init.$who]:-0}" = "$runs" ] && pass "$init: $who exited by its trap in every run" ||
      fail "$init: $who exited by its trap in ${graceful[$init.$who]:-0} of $runs runs"
  done
  [ "$(echo "${zombies[$init]}" | tr -d ' 0')" = "" ] && pass "$init: every orphan reaped (zombies:${zombies[$init]})" ||
    fail "$init: zombies left:${zombies[$init]}"
  [ "$(echo "${codes[$init.APP]}" | tr -d ' 0')" = "" ] && pass "$init: podman stop: exit 0, main's" ||
    fail "$init: exit statuses after podman stop:${codes[$init.APP]}"
  # The kill after the grace (2 s): well before podman's own SIGKILL at 10 s.
  s=${stop_s[$init.STUBBORN]# }
  [ "${codes[$init.STUBBORN]# }" = 137 ] && awk -v s="$s" 'BEGIN { exit !(s < 8) }' &&
    pass "$init: a main that ignores SIGTERM is killed after the grace (${s} s, exit 137)" ||
    fail "$init: stubborn main: stopped after $s s, exit ${codes[$init.STUBBORN]}"
done
case ${pid1[reaper-init-path]} in
  "/run/podman-init -- /bin/sh -c "*) pass "podman starts --init-path as INIT -- CMD, and reaper takes it" ;;
  *) fail "--init-path: PID 1's command line: ${pid1[reaper-init-path]}" ;;
esac
for init in reaper-run reaper-init-path; do
  opts_for "$init"
  pm run --rm --network none "${opts[@]}" localhost/reaper-app 'exit 7'
  status=$?
  [ "$status" = 7 ] && pass "$init: the exit status passes through (7)" || fail "$init: exit $status, expected 7"
done

say "measured (podman $(pm version --format '{{.Client.Version}}'), under QEMU TCG; $runs runs each)"
# "median (min-max)" of the numbers on stdin
spread() {
  tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END {
    printf "%.1f", a[int((NR + 1) / 2)]; if (NR > 1) printf " (%.1f–%.1f)", a[1], a[NR] }'
}
echo "| PID 1 | graceful exits of $runs: main, background child, setsid'd grandchild | zombies | podman stop (s) | main ignores TERM: stop (s), exit |"
echo "|---|---|---|---|---|"
for init in "${inits[@]}"; do
  echo "| ${how[$init]} | ${graceful[$init.main]:-0}, ${graceful[$init.child]:-0}, ${graceful[$init.grandchild]:-0} | $(echo "${zombies[$init]}" | tr ' ' '\n' | grep . | sort -n | tail -n 1) | $(echo "${stop_s[$init.APP]}" | spread) | $(echo "${stop_s[$init.STUBBORN]}" | spread), ${codes[$init.STUBBORN]# } |"
done

say "clean up"
pm rmi -f localhost/reaper-app localhost/reaper >/dev/null
[ -z "$(pm ps -aq)" ] && pass "no container left" || fail "containers left: $(pm ps -a)"
left=$(find /sys/fs/cgroup -type d \( -name 'libpod-*' -o -name 'reaper-*' \) ! -name reaper-vm.service)
[ -z "$left" ] && pass "no libpod or reaper cgroup left" || fail "cgroups left: $left"
finish

#!/usr/bin/env bash
# The VM lane: boots the cached Debian 12 image (systemd, pure cgroup v2, a lingering normal user)
# under QEMU, runs scenario scripts in it as root, and reports each one's status.
#
#   ci/vm/run.sh [--timeout SECONDS] SCRIPT... [-- FILE...]
#
# All SCRIPTs run in ONE boot, in order, each under its own timeout (REAPER_VM_SCENARIO_TIMEOUT,
# default 300 s). FILEs (fixture binaries, …) are copied next to reaper into the guest's PATH.
# The reaper binary is $REAPER_BIN, else the newer of target/release/reaper and
# target/debug/reaper. The image is built on first use (ci/vm/build-image.sh).
#
# Exit status: 0 every scenario passed; otherwise the status of the first scenario that failed;
# 124 the guest did not finish within --timeout (default $REAPER_VM_TIMEOUT, else 240 s plus each
# scenario's timeout) or did not reach the scenarios within $REAPER_VM_BOOT_TIMEOUT (240 s) and was
# killed; 125 the lane itself failed (image, guest crash, no results); 77 this host cannot run the
# lane (prints `skipped: …`); 2 usage error.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
repo=$(cd "$vm_dir/../.." && pwd)

timeout=${REAPER_VM_TIMEOUT:-}
scenario_timeout=${REAPER_VM_SCENARIO_TIMEOUT:-300}
scripts=() files=()
while [ $# -gt 0 ]; do
  case $1 in
    --timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
    --) shift; files=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) scripts+=("$1"); shift ;;
  esac
done
[ ${#scripts[@]} -gt 0 ] || { echo "usage: ci/vm/run.sh [--timeout SECONDS] SCRIPT... [-- FILE...]" >&2; exit 2; }
for f in "${scripts[@]}" "${files[@]}"; do
  [ -f "$f" ] || { echo "run.sh: no such file: $f" >&2; exit 2; }
done
# Boot and poweroff take under a minute under TCG on a loaded 2-core machine; allow four.
timeout=${timeout:-$((240 + ${#scripts[@]} * (scenario_timeout + 10)))}
names=()
for s in "${scripts[@]}"; do
  n=$(basename "$s")
  case " ${names[*]} " in *" $n "*) echo "run.sh: two scenarios named $n" >&2; exit 2 ;; esac
  names+=("$n")
done

skip() { echo "skipped: $*"; exit 77; }
[ "$(uname -sm)" = "Linux x86_64" ] || skip "the VM lane needs a Linux x86_64 host"
for tool in qemu-system-x86_64 qemu-img mkfs.ext4; do
  command -v "$tool" >/dev/null || skip "$tool is missing (ci/vm/install-deps.sh installs it)"
done

reaper=${REAPER_BIN:-}
if [ -z "$reaper" ]; then
  for candidate in "$repo/target/release/reaper" "$repo/target/debug/reaper"; do
    [ -x "$candidate" ] && { [ -z "$reaper" ] || [ "$candidate" -nt "$reaper" ]; } && reaper=$candidate
  done
fi
[ -n "$reaper" ] && [ -x "$reaper" ] ||
  { echo "run.sh: no reaper binary: build it (cargo build -p reaper-cli) or set REAPER_BIN" >&2; exit 125; }

image=$(vm_image_dir)
if [ ! -f "$image/root.img" ]; then
  [ "$(id -u)" = 0 ] || skip "no cached VM image at $image, and building one needs root"
  command -v mmdebstrap >/dev/null || skip "no cached VM image at $image, and mmdebstrap is missing (ci/vm/install-deps.sh)"
  "$vm_dir/build-image.sh" || { echo "run.sh: building the VM image failed" >&2; exit 125; }
fi

touch "$image/last-used"

work=$(mktemp -d "${TMPDIR:-/tmp}/reaper-vm.XXXXXX")
qemu_pid=
cleanup() {
  # Never leave a guest running: we started it, we end it, by its pid.
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill -KILL "$qemu_pid" 2>/dev/null
    wait "$qemu_pid" 2>/dev/null
  fi
  if [ -n "${REAPER_VM_KEEP:-}" ]; then echo "vm: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The payload disk: guest/ (init.sh, lib.sh), the scenarios, reaper and FILEs.
payload=$work/payload
mkdir -p "$payload/bin" "$payload/scenarios"
cp "$vm_dir/guest/"* "$payload/"
cp "$reaper" "$payload/bin/reaper"
for f in "${files[@]}"; do cp "$f" "$payload/bin/"; done
for i in "${!scripts[@]}"; do
  cp "${scripts[$i]}" "$payload/scenarios/${names[$i]}"
  echo "${names[$i]}" >>"$payload/scenarios.list"
done
echo "$scenario_timeout" >"$payload/scenario-timeout"
# Debug builds carry ~100 MB of debug info the guest never reads.
if command -v strip >/dev/null; then
  for b in "$payload/bin/"*; do strip --strip-debug "$b" 2>/dev/null || true; done
fi
chmod -R a+rX "$payload"
# ext4's own metadata (inode tables, journal) grows with the disk: a fifth more, plus slack.
payload_mb=$(( $(du -sm "$payload" | cut -f1) * 6 / 5 + 32 ))
truncate -s "${payload_mb}M" "$work/payload.img"
mkfs.ext4 -q -F -L reaper-payload -d "$payload" "$work/payload.img" ||
  { echo "run.sh: cannot make the payload disk" >&2; exit 125; }

# A throw-away copy-on-write layer over the cached image: the base stays clean.
qemu-img create -q -f qcow2 -b "$image/root.img" -F raw "$work/overlay.qcow2" ||
  { echo "run.sh: cannot create the overlay disk" >&2; exit 125; }

out=$work/out.log console=$work/console.log
: >"$out"
echo "vm: booting $image with $(basename "$reaper") from $reaper; scenarios: ${names[*]}"
start=$(date +%s)
# KVM does not work on the CI machine (guests hang), so TCG. ttyS0: kernel console (kept for
# diagnosis); ttyS1: the payload's output, streamed below.
# setpriv --pdeathsig: should this script be SIGKILLed, the kernel kills the guest with it.
pdeath=()
setpriv --help 2>/dev/null | grep -q -- --pdeathsig && pdeath=(setpriv --pdeathsig KILL --)
"${pdeath[@]}" qemu-system-x86_64 -accel tcg -smp 2 -m 1024 -display none -monitor none -nic none -no-reboot \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 panic=-1 loglevel=4 systemd.show_status=true" \
  -drive file="$work/overlay.qcow2",format=qcow2,if=virtio \
  -drive file="$work/payload.img",format=raw,if=virtio,readonly=on \
  -serial file:"$console" -serial file:"$out" </dev/null >"$work/qemu.log" 2>&1 &
qemu_pid=$!

tail -n +1 -F --pid="$qemu_pid" "$out" 2>/dev/null | sed -u -e 's/\r$//' -e '/^@@reaper-vm \(boot\|done\)/d' \
  -e 's/^@@reaper-vm begin \(.*\)/==> vm scenario \1/' -e 's/^@@reaper-vm end \([^ ]*\) status \([^ ]*\) seconds \(.*\)/<== \1: exit \2 after \3 s/' &
tail_pid=$!

# Two deadlines: reaching the payload (a boot that hangs fails fast), and the whole run.
boot_timeout=${REAPER_VM_BOOT_TIMEOUT:-240}
timed_out=
while kill -0 "$qemu_pid" 2>/dev/null; do
  now=$(( $(date +%s) - start ))
  if [ "$now" -ge "$timeout" ]; then
    timed_out="did not power off within ${timeout}s"
  elif [ "$now" -ge "$boot_timeout" ] && ! grep -q '^@@reaper-vm boot' "$out"; then
    timed_out="did not reach the payload within ${boot_timeout}s"
  fi
  if [ -n "$timed_out" ]; then
    kill -KILL "$qemu_pid" 2>/dev/null
    break
  fi
  sleep 1
done
wait "$qemu_pid" 2>/dev/null
qemu_status=$?
qemu_pid=
wait "$tail_pid" 2>/dev/null
elapsed=$(( $(date +%s) - start ))

tr -d '\r' <"$out" >"$out.clean"
marker() { sed -n "s/^@@reaper-vm $1//p" "$out.clean"; }
echo
echo "==> vm lane summary (${elapsed} s from qemu start to poweroff)"
boot=$(marker 'boot ' | head -n 1)
[ -n "$boot" ] && echo "guest reached the payload after ${boot} s of guest uptime"
status=0
for n in "${names[@]}"; do
  line=$(marker "end $n status " | head -n 1)
  if [ -n "$line" ]; then
    s=${line%% *}
    echo "  $n: $([ "$s" = 0 ] && echo passed || echo "FAILED (exit $s)") in ${line##* } s"
    [ "$s" = 0 ] || [ "$status" != 0 ] || status=$s
  else
    echo "  $n: did not finish"
    [ "$status" != 0 ] || status=125
  fi
done
if [ -n "$timed_out" ]; then
  echo "FAILED: the guest $timed_out and was killed; kernel console tail:"
  tail -n 30 "$console" | tr -d '\r' | sed 's/\x1b\[[0-9;]*m//g'
  exit 124
fi
if [ -z "$(marker 'done')" ]; then
  echo "FAILED: the guest stopped before reporting all scenarios (qemu exit $qemu_status); kernel console and qemu tail:"
  tail -n 30 "$console" | tr -d '\r' | sed 's/\x1b\[[0-9;]*m//g'
  tail -n 5 "$work/qemu.log"
  [ "$status" != 0 ] || status=125
fi
exit "$status"

#!/bin/bash
# The sandbox's root cannot make the kernel, or a root service, run its code outside the run: on
# a stock Debian kernel (modules, sysrq, keys) and systemd, as root, for each route a control
# without the sandbox shows the route works (the guest is thrown away after the lane), then
# `reaper run --sandbox` and `--sandbox=pid` try the same and must fail, and the trigger must
# run nothing of theirs:
#   - kernel.modprobe's program, which request_module() runs (socket(AF_X25));
#   - /sbin/request-key, which request_key(2) runs for a key it cannot find;
#   - a |pipe core_pattern's program, which a crash runs;
#   - /proc/sysrq-trigger, /proc/sys/kernel/modprobe, the orderly poweroff helper;
#   - systemd over D-Bus (systemd-run), a root service that starts what root asks for.
# Needs no FILEs.
#   REAPER_BIN=target/debug/reaper ci/vm/run.sh ci/vm/scenarios/sandbox.sh
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

work=$(mktemp -d /tmp/reaper-sandbox.XXXXXX)
marker=/run/reaper-vm-helper-ran
modes=(--sandbox --sandbox=pid)

# A helper that says it ran, from where (its cgroup), and who its parent is.
fake_helper() {  # FILE
  printf '#!/bin/sh\n{ echo "ran as $(id -u)"; cat /proc/self/cgroup; echo "parent $(cat /proc/$PPID/comm)"; } > %s\n' \
    "$marker" >"$1"
  chmod 755 "$1"
}

# waits up to 5 s for the marker; prints it; true if it appeared.
ran() {
  for _ in $(seq 50); do
    if [ -s "$marker" ]; then cat "$marker"; return 0; fi
    sleep 0.1
  done
  return 1
}

x25='import socket
try:
    socket.socket(9, socket.SOCK_SEQPACKET)
except OSError as e:
    print("socket(AF_X25):", e)'
request_key='import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(249, b"user", b"reaper-vm-test", b"callout", ctypes.c_int(-2))
print("request_key:", r, ctypes.get_errno())'

# sandboxed MODE SCRIPT: the script as root in the sandbox, in the work directory, declared (the
# scenario's own directory is under /tmp, which root's sandbox has a private one of).
sandboxed() {
  (cd "$work" && reaper run -q --timeout 60s "$1" --sandbox-rw "$work" -- sh -c "$2" 2>&1)
}

# --- kernel.modprobe
modprobe=$(readlink -f "$(cat /proc/sys/kernel/modprobe)")
say "kernel.modprobe: $(cat /proc/sys/kernel/modprobe) -> $modprobe"
cp -a "$modprobe" "$work/modprobe.orig"
fake_helper "$work/fake"
rm -f "$marker"
cat "$work/fake" >"$modprobe"
python3 -c "$x25"
if out=$(ran); then
  pass "control: the kernel ran kernel.modprobe's program (a socket of an unloaded family)"
  printf '%s\n' "$out"
  grep -q '^0::/$' <<<"$out" && pass "control: it ran in the root cgroup, outside every run" ||
    fail "control: it ran in another cgroup"
else
  fail "control: the kernel did not run kernel.modprobe's program; the route could not be shown"
fi
cat "$work/modprobe.orig" >"$modprobe"
for mode in "${modes[@]}"; do
  rm -f "$marker"
  out=$(sandboxed "$mode" "cat '$work/fake' > '$modprobe'; echo \"overwrite rc=\$?\"
echo /tmp/x > /proc/sys/kernel/modprobe; echo \"sysctl rc=\$?\"
python3 -c '$x25'")
  printf '%s\n' "$out"
  grep -q 'overwrite rc=[1-9]' <<<"$out" && pass "$mode: kernel.modprobe's program not written" ||
    fail "$mode: the sandbox wrote kernel.modprobe's program"
  grep -q 'sysctl rc=[1-9]' <<<"$out" && pass "$mode: kernel.modprobe not changed" ||
    fail "$mode: the sandbox changed kernel.modprobe"
  cmp -s "$modprobe" "$work/modprobe.orig" && pass "$mode: $modprobe unchanged" ||
    { fail "$mode: $modprobe changed"; cat "$work/modprobe.orig" >"$modprobe"; }
  if ran >/dev/null; then fail "$mode: the sandbox's helper ran"; else pass "$mode: nothing of the sandbox's ran"; fi
done

# --- /sbin/request-key
say "request_key(2) and /sbin/request-key"
rk=/sbin/request-key
had_rk=no
[ -e "$rk" ] && { had_rk=yes; cp -a "$rk" "$work/request-key.orig"; }
rm -f "$marker"
fake_helper "$rk"
python3 -c "$request_key"
if out=$(ran); then
  pass "control: the kernel ran /sbin/request-key"
  printf '%s\n' "$out"
else
  fail "control: the kernel did not run /sbin/request-key; the route could not be shown"
fi
if [ "$had_rk" = yes ]; then cp -a "$work/request-key.orig" "$rk"; else rm -f "$rk"; fi
for mode in "${modes[@]}"; do
  rm -f "$marker"
  out=$(sandboxed "$mode" "cp '$work/fake' $rk; echo \"create rc=\$?\"
python3 -c '$request_key'")
  printf '%s\n' "$out"
  grep -q 'create rc=[1-9]' <<<"$out" && pass "$mode: /sbin/request-key not created" ||
    fail "$mode: the sandbox created /sbin/request-key"
  if [ "$had_rk" = no ] && [ -e "$rk" ]; then fail "$mode: $rk exists"; rm -f "$rk"; fi
  if ran >/dev/null; then fail "$mode: the sandbox's request-key ran"; else pass "$mode: nothing of the sandbox's ran"; fi
done

# --- a |pipe core_pattern
say "core_pattern"
old_pattern=$(cat /proc/sys/kernel/core_pattern)
helper=/usr/local/sbin/reaper-vm-core
printf '#!/bin/sh\necho genuine > %s.core\ncat > /dev/null\n' "$marker" >"$helper"
chmod 755 "$helper"
cp -a "$helper" "$work/core.orig"
echo "|$helper" >/proc/sys/kernel/core_pattern
rm -f "$marker.core"
sh -c 'ulimit -c unlimited; kill -SEGV $$'
for _ in $(seq 50); do [ -s "$marker.core" ] && break; sleep 0.1; done
[ "$(cat "$marker.core" 2>/dev/null)" = genuine ] && pass "control: a crash runs the core_pattern helper" ||
  fail "control: the core_pattern helper did not run"
for mode in "${modes[@]}"; do
  rm -f "$marker.core"
  out=$(sandboxed "$mode" "printf '#!/bin/sh\necho hostile > $marker.core\n' > $helper; echo \"overwrite rc=\$?\"
echo '|/tmp/x' > /proc/sys/kernel/core_pattern; echo \"pattern rc=\$?\"
sh -c 'ulimit -c unlimited; kill -SEGV \$\$'; true")
  printf '%s\n' "$out"
  grep -q 'overwrite rc=[1-9]' <<<"$out" && pass "$mode: the core_pattern helper not written" ||
    fail "$mode: the sandbox wrote the core_pattern helper"
  grep -q 'pattern rc=[1-9]' <<<"$out" && pass "$mode: core_pattern not changed" ||
    fail "$mode: the sandbox changed core_pattern"
  cmp -s "$helper" "$work/core.orig" && pass "$mode: the helper is unchanged" || fail "$mode: the helper changed"
  for _ in $(seq 30); do [ -s "$marker.core" ] && break; sleep 0.1; done
  seen=$(cat "$marker.core" 2>/dev/null)
  [ "$seen" != hostile ] && pass "$mode: a crash inside ran only the host's helper (${seen:-none})" ||
    fail "$mode: a crash inside ran the sandbox's helper"
done
echo "$old_pattern" >/proc/sys/kernel/core_pattern
rm -f "$helper"

# --- /proc/sysrq-trigger ('h' prints the help to the kernel log: harmless)
say "/proc/sysrq-trigger"
echo h >/proc/sysrq-trigger && pass "control: root writes /proc/sysrq-trigger" ||
  fail "control: /proc/sysrq-trigger is not writable here"
for mode in "${modes[@]}"; do
  out=$(sandboxed "$mode" 'echo h > /proc/sysrq-trigger; echo "sysrq rc=$?"
cat /proc/keys | wc -c | sed "s/^/keys bytes=/"; cat /proc/kcore 2>/dev/null | head -c 1 | wc -c | sed "s/^/kcore bytes=/"')
  printf '%s\n' "$out"
  grep -q 'sysrq rc=[1-9]' <<<"$out" && pass "$mode: /proc/sysrq-trigger not written" ||
    fail "$mode: the sandbox wrote /proc/sysrq-trigger"
  grep -q 'keys bytes=0' <<<"$out" && pass "$mode: /proc/keys masked" || fail "$mode: /proc/keys readable"
  grep -q 'kcore bytes=0' <<<"$out" && pass "$mode: /proc/kcore masked" || fail "$mode: /proc/kcore readable"
done

# --- the orderly poweroff helper, and systemd over D-Bus
say "poweroff helper, systemd-run"
for mode in "${modes[@]}"; do
  out=$(sandboxed "$mode" "p=\$(cat /proc/sys/kernel/poweroff_cmd); ( : >> \"\$p\" ); echo \"poweroff rc=\$?\"
systemd-run --quiet --wait --collect -- true; echo \"systemd-run rc=\$?\"")
  printf '%s\n' "$out"
  grep -q 'poweroff rc=[1-9]' <<<"$out" && pass "$mode: the poweroff helper not writable" ||
    fail "$mode: the sandbox may write the poweroff helper"
  grep -q 'systemd-run rc=[1-9]' <<<"$out" && pass "$mode: systemd refuses the sandbox's root" ||
    fail "$mode: systemd started a unit for the sandbox's root"
done
systemd-run --quiet --wait --collect -- true && pass "control: root outside may use systemd-run" ||
  fail "control: systemd-run fails outside the sandbox too"

rm -rf "$work" "$marker" "$marker.core"
finish

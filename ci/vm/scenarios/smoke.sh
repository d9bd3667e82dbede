#!/bin/bash
# Smoke: the host shape is what the lane promises (systemd, pure cgroup v2, a lingering user with
# its user manager); `reaper doctor` as root, as the normal user, and as the normal user inside a
# scope its user manager delegates; the README's leaking example leaves nothing behind, as root
# and as the normal user.
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

say "host shape"
echo "kernel: $(uname -r); PID 1: $(cat /proc/1/comm)"
grep ' /sys/fs/cgroup ' /proc/self/mounts
echo "root controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "root's cgroup: $(cat /proc/self/cgroup)"
echo "user's cgroup (login session): $(as_user cat /proc/self/cgroup)"
echo "user's cgroup (user service): $(as_user_service cat /proc/self/cgroup)"
echo "user's session bus: $(as_user sh -c 'echo "$DBUS_SESSION_BUS_ADDRESS"')"
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && pass "pure cgroup v2 at /sys/fs/cgroup" ||
  fail "/sys/fs/cgroup is not cgroup2 ($(stat -fc %T /sys/fs/cgroup))"
[ "$(cat /proc/1/comm)" = systemd ] && pass "systemd is PID 1" || fail "PID 1 is $(cat /proc/1/comm)"
systemctl is-active --quiet user@1000.service && pass "the user manager user@1000.service runs" ||
  fail "user@1000.service is $(systemctl is-active user@1000.service)"
[ -S /run/user/1000/bus ] && pass "the user's session bus /run/user/1000/bus exists" ||
  fail "no session bus at /run/user/1000/bus"

show "reaper doctor (root, in a system service)" reaper doctor
show "reaper doctor (user $vm_user, login session)" as_user reaper doctor
say "reaper doctor (user $vm_user, in systemd-run --user --scope -p Delegate=yes)"
delegated=$(as_user systemd-run --user --scope --quiet -p Delegate=yes reaper doctor 2>&1)
printf '%s\n' "$delegated"
grep -q '^auto backend *cgroup' <<<"$delegated" &&
  pass "user $vm_user: a delegated user scope gives the cgroup backend" ||
  fail "user $vm_user: no cgroup backend even in a delegated user scope"

leak='setsid sh -c "trap \"\" TERM; sleep 600" & sleep 600'
check_leak() {  # WHO RUNNER...
  local who=$1; shift
  say "README leaking example as $who: reaper run --timeout 2s -- sh -c '$leak'"
  "$@" reaper run --timeout 2s -- sh -c "$leak"
  local status=$?
  [ "$status" -eq 124 ] && pass "$who: reaper run exited 124 (timed out)" ||
    fail "$who: reaper run exited $status, expected 124"
  local left
  left=$(live_named sleep)
  [ -z "$left" ] && pass "$who: no sleep left (ps: no live process named sleep)" ||
    fail "$who: processes left behind:"$'\n'"$left"
}
check_leak root
check_leak "user $vm_user" as_user

finish

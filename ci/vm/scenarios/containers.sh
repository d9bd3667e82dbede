#!/bin/bash
# A container-shaped run on a systemd host (issue 12): reaper as PID 1 of a new PID namespace, in a
# mount namespace where the cgroup file system is read-only (Docker's and Kubernetes' default).
# reaper does not ask systemd for a scope there, falls back with one line, stops the tree itself
# (its report says so before the namespace's end could hide a survivor), and doctor names what it
# sees.
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

container() {  # CMD...: as PID 1 of a new PID namespace, cgroupfs read-only in a new mount ns
  unshare --mount --pid --fork --mount-proc -- sh -c \
    'mount --make-rprivate / && mount -o remount,bind,ro /sys/fs/cgroup && exec "$@"' sh "$@"
}

say "doctor in the container"
container reaper doctor
doc=$(container reaper doctor --json)
printf '%s' "$doc" | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d["container"]
ok = c["pid1"] and c["pid_namespace"] and c["cgroupfs_read_only"] and not d["cgroup_writable"]
ok = ok and d["auto_backend"] == "subreaper" and d["delegation"].startswith("not asked")
sys.exit(0 if ok else 1)' && pass "doctor: PID 1, read-only cgroupfs, no delegation asked, subreaper" ||
  fail "doctor in the container: $doc"

say "the README's leaking shape as the container's PID 1"
leak='setsid sh -c "trap \"\" TERM; sleep 600" & sleep 1'
container reaper run --grace 300ms --report /tmp/c.json -- sh -c "$leak" 2> c.err
status=$?
cat c.err /tmp/c.json
[ "$status" = 0 ] && pass "exit 0 (the leader's)" || fail "exit $status"
[ "$(grep -c warning c.err)" = 1 ] && pass "one warning line" || fail "warnings: $(cat c.err)"
python3 -c 'import json; d = json.load(open("/tmp/c.json")); exit(0 if d["backend"] == "subreaper" and d["killed"] >= 1 and not d["survivors"] else 1)' &&
  pass "reaper stopped the setsid'd sleep itself (report: subreaper, killed >= 1, no survivor)" ||
  fail "the report"
[ -z "$(live_named sleep)" ] && pass "nothing left" || fail "left: $(live_named sleep)"
[ -z "$(systemctl list-units --all --plain --no-legend 'reaper-*.scope')" ] &&
  pass "no scope was started for it" || fail "scopes: $(systemctl list-units --all --plain --no-legend 'reaper-*.scope')"

say "-q says nothing"
container reaper run -q -- true 2> q.err
[ ! -s q.err ] && pass "-q: no line" || fail "-q printed: $(cat q.err)"

finish

#!/bin/bash
# Delegation (issue 12): under systemd, reaper moves itself into a scope of its own with
# Delegate=yes — from the system manager as root, from the user's manager as a normal user — and
# creates its run cgroups there, never inside another unit's cgroup. Checks: where the run cgroups
# live, that the scope goes away with reaper, the README's leaking example as the user, 8
# concurrent 2 s `reaper mcp` calls side by side for the user, the guardian after a SIGKILL inside
# the scope, and `--delegate never` falling back with one clear line.
# Needs the fake codex as a FILE (ci/vm/run.sh … -- target/debug/fake-codex).
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

scopes() { systemctl list-units --all --plain --no-legend 'reaper-*.scope' 2>/dev/null; }
user_scopes() { as_user systemctl --user list-units --all --plain --no-legend 'reaper-*.scope' 2>/dev/null; }
# wait_gone CMD: waits up to 5 s for CMD to print nothing (systemd collects an empty scope).
wait_gone() {
  local i
  for i in $(seq 50); do
    [ -z "$("$@")" ] && return 0
    sleep 0.1
  done
  return 1
}
json_field() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get(sys.argv[1]) or "")' "$1"; }

say "root: doctor"
reaper doctor
doc=$(reaper doctor --json)
case "$(printf '%s' "$doc" | json_field delegation)" in
  "moved into reaper-"*) pass "root: doctor moved into a delegated scope of its own" ;;
  *) fail "root: doctor's delegation: $(printf '%s' "$doc" | json_field delegation)" ;;
esac
[ "$(printf '%s' "$doc" | json_field auto_backend)" = cgroup ] && pass "root: auto is cgroup" ||
  fail "root: auto is $(printf '%s' "$doc" | json_field auto_backend)"

say "root: where a run's cgroup lives"
reaper run --report report.json -- cat /proc/self/cgroup > cg.txt
status=$?
cat cg.txt report.json
[ "$status" = 0 ] && pass "root: reaper run exited 0" || fail "root: reaper run exited $status"
case "$(cat cg.txt)" in
  0::/system.slice/reaper-*.scope/reaper-*) pass "root: the run cgroup is inside reaper's own scope" ;;
  *) fail "root: the run cgroup is $(cat cg.txt)" ;;
esac
case "$(json_field scope < report.json)" in
  reaper-*.scope) pass "root: --report names the scope" ;;
  *) fail "root: --report's scope is '$(json_field scope < report.json)'" ;;
esac
grep -q 'reaper-vm.service/reaper-' cg.txt && fail "root: a run cgroup inside reaper-vm.service"
wait_gone scopes && pass "root: the scope is gone after reaper exited" || fail "root: scopes left: $(scopes)"

say "root: reaper SIGKILLed mid-run; the guardian cleans its scope"
reaper run --report killed.json -- sh -c 'setsid sh -c "trap \"\" TERM; exec sleep 611" & exec sleep 612' &
rp=$!
for _ in $(seq 100); do [ -n "$(live_named sleep)" ] && [ "$(live_named sleep | wc -l)" -ge 2 ] && break; sleep 0.1; done
kill -KILL "$rp"
wait "$rp" 2>/dev/null
for _ in $(seq 50); do [ -z "$(live_named sleep)" ] && break; sleep 0.1; done
[ -z "$(live_named sleep)" ] && pass "root: the guardian killed the tree" || fail "root: left: $(live_named sleep)"
wait_gone scopes && pass "root: the scope is gone" || fail "root: scopes left: $(scopes)"

say "user: doctor (login session)"
as_user reaper doctor
udoc=$(as_user reaper doctor --json)
case "$(printf '%s' "$udoc" | json_field delegation)" in
  "moved into reaper-"*"from the user's service manager") pass "user: doctor moved into a scope of the user's manager" ;;
  *) fail "user: doctor's delegation: $(printf '%s' "$udoc" | json_field delegation)" ;;
esac
[ "$(printf '%s' "$udoc" | json_field auto_backend)" = cgroup ] && pass "user: auto is cgroup" ||
  fail "user: auto is $(printf '%s' "$udoc" | json_field auto_backend)"

say "user: the README's leaking example with the cgroup backend"
leak='setsid sh -c "trap \"\" TERM; sleep 600" & sleep 600'
as_user reaper run --report /tmp/leak.json --timeout 2s -- sh -c "$leak"
status=$?
as_user cat /tmp/leak.json
[ "$status" = 124 ] && pass "user: exit 124" || fail "user: exit $status"
[ "$(as_user sh -c 'python3 -c "import json; print(json.load(open(\"/tmp/leak.json\"))[\"backend\"])"')" = cgroup ] &&
  pass "user: the cgroup backend" || fail "user: not the cgroup backend"
[ -z "$(live_named sleep)" ] && pass "user: nothing left" || fail "user: left: $(live_named sleep)"
wait_gone user_scopes && pass "user: the scope is gone" || fail "user: scopes left: $(user_scopes)"

say "user: 8 concurrent 2 s calls through reaper mcp"
cat > /tmp/client.py <<'PY'
import json, subprocess, sys, time
srv = subprocess.Popen(["reaper", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       env={**__import__("os").environ, "CODEX_CMD": "fake-codex"})
def send(m): srv.stdin.write((json.dumps(m) + "\n").encode()); srv.stdin.flush()
def recv():
    while True:
        m = json.loads(srv.stdout.readline())
        if "id" in m: return m
send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "vm", "version": "0"}}})
recv()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
t0 = time.monotonic()
for i in range(1, 9):
    send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "codex", "arguments": {"prompt": f"thread T{i}\nsleep 2\nsay ok{i}\ndone"}}})
done = {}
while len(done) < 8:
    m = recv(); done[m["id"]] = m
took = time.monotonic() - t0
srv.stdin.close(); srv.wait(timeout=10)
bad = [i for i, m in done.items() if m.get("result", {}).get("isError") is not False]
print(f"8 calls took {took:.2f} s; errors: {bad}")
sys.exit(0 if not bad and took < 6 else 1)
PY
chmod 644 /tmp/client.py
as_user python3 /tmp/client.py
status=$?
[ "$status" = 0 ] && pass "user: 8 calls ran side by side (one at a time would take 16 s)" ||
  fail "user: the concurrent calls (status $status)"

say "user: --delegate never falls back with one line"
as_user reaper run --delegate never -- true 2> never.err
status=$?
cat never.err
[ "$status" = 0 ] && pass "user: --delegate never still runs (exit 0)" || fail "user: exit $status"
[ "$(grep -c 'warning' never.err)" = 1 ] && grep -q 'subreaper' never.err &&
  pass "user: one warning line naming the subreaper fallback" || fail "user: the fallback line"

finish

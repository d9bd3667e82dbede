#!/bin/bash
# reaper ps and reaper audit on a booted systemd host (issue 24). audit's "certain" section must
# be empty on the host as booted, and afterwards hold exactly what this scenario planted (a
# harness SIGKILLed with its runs, as root and as the normal user); the leak GNU timeout leaves
# on the README's example is found among the suspects. The suspects of the booted host are
# printed, counted, and not a failure: that count is the measured false-positive rate. Then
# ps lists runs of every backend (root's and the user's, the user seeing only their own), and
# stop/kill end them from here.
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

count() {  # FILE SECTION: how many trees, and processes in them
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))[sys.argv[2]]; print(len(d), sum(1+len(l["descendants"]) for l in d))' "$1" "$2"
}
pids_of() {  # FILE SECTION: every pid@start listed there
  python3 -c '
import json, sys
for l in json.load(open(sys.argv[1]))[sys.argv[2]]:
    for p in [l["root"]] + l["descendants"]:
        print("%s@%s" % (p["pid"], p["starttime"]))' "$1" "$2"
}
ident() {  # PID: pid@start, from /proc
  echo "$1@$(awk '{print $22}' "/proc/$1/stat" 2>/dev/null)"
}
sleepers() {  # SECONDS: the live `sleep SECONDS` processes, as pid@start
  ps -eo pid=,stat=,args= | awk -v a="sleep $1" '$2 !~ /^Z/ && substr($0, index($0,$3)) == a {print $1}' |
    while read -r p; do ident "$p"; done
}

show "the host as booted" ps -eo pid,ppid,sid,user,cgroup:70,args --sort=start_time
say "audit of the host as booted (systemd, its services, the user's manager)"
reaper audit; echo "(exit $?)"
reaper audit --json > booted.json
read -r trees _ < <(count booted.json certain)
[ "$trees" = 0 ] && pass "nothing certain on the booted host" ||
  fail "certain on a host where nothing was planted: $(pids_of booted.json certain | tr '\n' ' ')"
read -r strees sprocs < <(count booted.json suspect)
echo "measured: $strees suspect tree(s), $sprocs process(es) on the booted host (false positives)"

say "plant: GNU timeout on the README's leaking example"
timeout 1 sh -c 'setsid sh -c "trap \"\" TERM; exec sleep 611" & sleep 600'
[ $? = 124 ] && pass "timeout timed out (124)" || fail "timeout's status"
for _ in $(seq 50); do [ "$(ps -o ppid= -p "$(sleepers 611 | cut -d@ -f1)" 2>/dev/null | tr -d ' ')" = 1 ] && break; sleep 0.1; done
leak=$(sleepers 611)
[ -n "$leak" ] && pass "the setsid'd sleep outlived timeout: $leak" || fail "no leak was planted"

say "plant: a harness SIGKILLed with its runs (root: pgid and cgroup backends; user: cgroup)"
reaper run --no-guardian --containment pgid -- sh -c 'setsid sleep 612 & exec sleep 612' &
r1=$!
reaper run --no-guardian -- sh -c 'setsid sleep 613 & exec sleep 613' &
r2=$!
as_user sh -c 'reaper run --no-guardian -- sh -c "setsid sleep 614 & exec sleep 614" & echo $! > /tmp/r3; wait' &
for _ in $(seq 100); do
  [ "$(sleepers 612 | wc -l)" = 2 ] && [ "$(sleepers 613 | wc -l)" = 2 ] && [ "$(sleepers 614 | wc -l)" = 2 ] && break
  sleep 0.1
done
show "reaper ps (root)" reaper ps
show "reaper ps (user)" as_user reaper ps
kill -KILL "$r1" "$r2" "$(cat /tmp/r3)"
wait "$r1" "$r2" 2>/dev/null
# Each leader dies with its reaper (PR_SET_PDEATHSIG); the setsid'd sleep is left.
for _ in $(seq 50); do
  [ "$(sleepers 612 | wc -l)" = 1 ] && [ "$(sleepers 613 | wc -l)" = 1 ] && [ "$(sleepers 614 | wc -l)" = 1 ] && break
  sleep 0.1
done
planted="$(sleepers 612) $(sleepers 613) $(sleepers 614)"
echo "planted: $planted"
show "reaper ps (root): the stale runs" reaper ps

say "audit after planting"
reaper audit; echo "(exit $?)"
reaper audit --json > planted.json
certain=$(pids_of planted.json certain | sort | tr '\n' ' ')
echo "certain: $certain"
for p in $planted; do
  case " $certain " in *" $p "*) pass "certain: $p" ;; *) fail "$p is not certain" ;; esac
done
for p in $certain; do
  case " $planted " in *" $p "*) ;; *) fail "certain, yet not planted here: $p ($(ps -o args= -p "${p%@*}"))" ;; esac
done
suspects=$(pids_of planted.json suspect | tr '\n' ' ')
case " $suspects " in *" $leak "*) pass "the GNU timeout leak is a suspect" ;; *) fail "the GNU timeout leak $leak is not a suspect" ;; esac
case " $certain " in *" $leak "*) fail "the GNU timeout leak carries no run id, yet is certain" ;; esac
show "reaper audit as the user" as_user reaper audit

say "audit --kill: the certain ones, then the suspect named by pid@start"
reaper audit --kill
reaper audit --kill "$leak"
sleep 0.3
for p in $planted $leak; do
  [ "$(ident "${p%@*}")" = "$p" ] && fail "$p still alive" || pass "$p killed"
done
# The stale runs' cgroups and records: `reaper kill` removes them (owner gone).
for id in $(reaper ps --json | python3 -c 'import json,sys; print(" ".join(r["id"] for r in json.load(sys.stdin) if r["state"]=="stale"))'); do
  reaper kill "$id"
done
for id in $(as_user reaper ps --json | python3 -c 'import json,sys; print(" ".join(r["id"] for r in json.load(sys.stdin) if r["state"]=="stale"))'); do
  as_user reaper kill "$id"
done
[ -z "$(reaper ps --json | python3 -c 'import json,sys; print(json.load(sys.stdin) or "")')" ] &&
  pass "no run left in ps" || fail "runs left: $(reaper ps)"

say "ps: a run of every backend (root), one with a memory limit; the user's own run"
reaper run --containment subreaper -- sleep 621 &
reaper run --containment pgid -- sleep 622 &
reaper run --memory-max 64M -- sh -c 'sleep 623 & exec sleep 623' &
as_user sh -c 'reaper run -- sleep 624 & echo $! > /tmp/r4; wait' &
for _ in $(seq 100); do [ "$(reaper ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 4 ] && break; sleep 0.1; done
show "reaper ps --tree (root)" reaper ps --tree
show "reaper ps (user)" as_user reaper ps
reaper ps --json > runs.json
python3 - runs.json <<'PY' && pass "ps: counts, backends, the limited run's memory from its cgroup" || fail "ps --json: $(cat runs.json)"
import json, sys
runs = json.load(open(sys.argv[1]))
by_cmd = {r["record"]["argv"][-1]: r for r in runs}
assert by_cmd["621"]["record"]["backend"] == "subreaper" and by_cmd["621"]["process_count"] == 1
assert by_cmd["622"]["record"]["backend"] == "pgid" and by_cmd["622"]["process_count"] == 1
limited = [r for r in runs if r["record"]["limits"]][0]
assert limited["process_count"] == 2, limited
assert limited["memory"]["source"] == "cgroup" and limited["memory"]["peak_bytes"], limited
assert by_cmd["624"]["record"]["uid"] == 1000
PY
[ "$(as_user reaper ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] &&
  pass "the user sees only their own run" || fail "the user sees: $(as_user reaper ps)"
for id in $(reaper ps --json | python3 -c 'import json,sys; print(" ".join(r["short_id"] for r in json.load(sys.stdin) if r["record"]["uid"] == 0))'); do
  reaper stop "$id"
done
as_user sh -c 'reaper kill "$(reaper ps --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0][\"id\"])")"'
wait
[ -z "$(reaper ps --json | python3 -c 'import json,sys; print(json.load(sys.stdin) or "")')" ] &&
  pass "every run ended" || fail "runs left: $(reaper ps)"
# The reapers' delegated scopes go once empty (systemd collects them).
scopes() { systemctl list-units --all --plain --no-legend 'reaper-*.scope' 2>/dev/null; as_user systemctl --user list-units --all --plain --no-legend 'reaper-*.scope' 2>/dev/null; }
for _ in $(seq 50); do [ -z "$(scopes)" ] && break; sleep 0.1; done
[ -z "$(scopes)" ] && pass "no reaper scope left" || fail "scopes left: $(scopes)"

finish

#!/bin/bash
# `reaper check --suite` under systemd: systemd-run --scope (a transient scope, systemd's own
# containment) as the wrapper, and reaper run as root in a system service. The cells go to the
# log (docs/check.md quotes them); the assertions: every cell ran (the tree recorded itself),
# and reaper run held every cell.
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

# suite WHAT EXPECT CASES RUNNER... -- WRAPPER...: the suite's table and JSON; EXPECT is `clean`
# (exit 0 and no cell failed) or `any` (whatever leaked, every cell ran).
suite() {
  local what=$1 expect=$2 cases=$3 json status=0
  shift 3
  say "$what, case $cases: ${*}"
  json=$(mktemp)
  "$@" 2>&1 >"$json" || status=$?
  # The report's cells: each must have run.
  python3 - "$json" <<'PY' || fail "$what: the suite's JSON is not what it should be"
import json, sys
r = json.load(open(sys.argv[1]))
cells = [c for c in r["cells"] if c["result"] != "not-applicable"]
for c in cells:
    print(f'{c["case"]:8} {c["end"]:8} {c["result"]}')
bad = [c for c in cells if c["result"] == "did-not-run"]
sys.exit(1 if bad or not cells else 0)
PY
  case $expect in
    clean) [ "$status" -eq 0 ] && pass "$what: every cell held" || fail "$what: exit $status" ;;
    any) { [ "$status" -eq 0 ] || [ "$status" -eq 1 ]; } && pass "$what: every cell ran (exit $status)" ||
      fail "$what: the suite could not run (exit $status)" ;;
  esac
  rm -f "$json"
}

# One case each: the lane's time is CI's (the scoreboard on the host has every case).
suite "systemd-run --scope (root)" any setsid \
  reaper check --suite --json --only setsid -- systemd-run --scope --quiet {}
suite "reaper run (root, system service: a delegated cgroup)" clean setsid \
  reaper check --suite --json --only setsid -- reaper run --die-with-parent --on-stdin-eof 1s --timeout {timeout} -- {}
finish

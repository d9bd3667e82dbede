#!/bin/bash
# Runs in the guest as root (from reaper-vm.service, so inside a system service's cgroup), with
# stdout/stderr on the serial line run.sh reads. Runs each scenario of scenarios.list in order,
# each under a timeout, framing its output with markers run.sh parses:
#   @@reaper-vm begin NAME / @@reaper-vm end NAME status N seconds S / @@reaper-vm done
payload=$(cd "$(dirname "$0")" && pwd)
echo "@@reaper-vm boot $(cut -d' ' -f1 /proc/uptime)"
export PATH=$payload/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export REAPER_VM=1 REAPER_VM_LIB=$payload/lib.sh REAPER_VM_PAYLOAD=$payload
scenario_timeout=$(cat "$payload/scenario-timeout")

# The lingering user's manager is started by logind at boot; wait until it is up (a start job
# for an active unit returns at once), so scenarios find /run/user/1000/bus.
if ! systemctl start user@1000.service; then
  echo "warning: user@1000.service did not start; the normal user has no user manager"
fi

# What a scenario must not leave behind, as ci/leftovers.sh checks on the host: processes in this
# service's cgroup other than init.sh and its parent, and cgroups named reaper-* (other than this
# unit's own). Prints and clears them, so the next scenario starts clean; false if any.
leftovers() {
  local unit cg pids="" dirs clean=0
  unit=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
  while read -r pid; do
    [ "$pid" = $$ ] || [ "$pid" = "$PPID" ] || pids="$pids $pid"
  done < <(find "$unit" -name cgroup.procs -exec cat {} + 2>/dev/null)
  # A pid whose command is gone exited meanwhile: ps prints nothing for it.
  pids=$(echo $pids | tr ' ' ,)
  if [ -n "$pids" ] && [ -n "$(ps -o pid= -p "$pids" 2>/dev/null)" ]; then
    echo "left behind in $unit:"; ps -o pid,ppid,stat,user,cgroup:60,args -p "$pids"
    kill -KILL ${pids//,/ } 2>/dev/null; clean=1
  fi
  # The normal user's processes outside its user manager: what as_user's sessions left.
  pids=$(ps -u 1000 -o pid=,cgroup= | awk '$2 !~ /user@1000\.service/ {print $1}' | paste -sd,)
  if [ -n "$pids" ]; then
    echo "left behind by user 1000:"; ps -o pid,ppid,stat,user,cgroup:60,args -p "$pids"
    kill -KILL ${pids//,/ } 2>/dev/null; clean=1
  fi
  dirs=$(find /sys/fs/cgroup -mindepth 1 -type d -name 'reaper-*' ! -name reaper-vm.service 2>/dev/null)
  if [ -n "$dirs" ]; then
    echo "cgroups left behind:"; echo "$dirs"
    for cg in $dirs; do
      echo 1 >"$cg/cgroup.kill" 2>/dev/null
      # cgroup.kill is asynchronous: wait (bounded) for the cgroup to empty before rmdir.
      for _ in $(seq 50); do grep -qx 'populated 0' "$cg/cgroup.events" 2>/dev/null && break; sleep 0.1; done
    done
    echo "$dirs" | sort -r | while read -r cg; do rmdir "$cg" 2>/dev/null; done
    clean=1
  fi
  return $clean
}

while read -r name; do
  [ -n "$name" ] || continue
  echo "@@reaper-vm begin $name"
  t0=$SECONDS
  work=$(mktemp -d /tmp/scenario.XXXXXX)
  chmod 755 "$work"
  (cd "$work" && exec timeout -k 10 "$scenario_timeout" bash "$payload/scenarios/$name") </dev/null
  status=$?
  [ "$status" -ne 124 ] || echo "scenario $name timed out after ${scenario_timeout}s"
  if ! leftovers; then
    echo "scenario $name left the above behind (now killed/removed)"
    [ "$status" -ne 0 ] || status=1
  fi
  rm -rf "$work"
  echo "@@reaper-vm end $name status $status seconds $((SECONDS - t0))"
done <"$payload/scenarios.list"
echo "@@reaper-vm done $(cut -d' ' -f1 /proc/uptime)"

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

while read -r name; do
  [ -n "$name" ] || continue
  echo "@@reaper-vm begin $name"
  t0=$SECONDS
  work=$(mktemp -d /tmp/scenario.XXXXXX)
  chmod 755 "$work"
  (cd "$work" && exec timeout -k 10 "$scenario_timeout" bash "$payload/scenarios/$name") </dev/null
  status=$?
  [ "$status" -ne 124 ] || echo "scenario $name timed out after ${scenario_timeout}s"
  rm -rf "$work"
  echo "@@reaper-vm end $name status $status seconds $((SECONDS - t0))"
done <"$payload/scenarios.list"
echo "@@reaper-vm done $(cut -d' ' -f1 /proc/uptime)"

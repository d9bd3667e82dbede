#!/usr/bin/env bash
# Fails when a test left a reaper cgroup or a live fixture process behind. Only looks; the
# tests themselves must clean up (a test that leaks is a failing test).
set -uo pipefail
status=0
mnt=$(awk '$9=="cgroup2"{print $5; exit}' /proc/self/mountinfo)
if [ -n "$mnt" ]; then
  left=$(find "$mnt" -mindepth 1 -maxdepth 4 -type d -name 'reaper-*' 2>/dev/null)
  if [ -n "$left" ]; then
    printf 'cgroups left behind:\n%s\n' "$left"
    status=1
  fi
fi
for d in /proc/[0-9]*; do
  st=$(awk '{print $3}' "$d/stat" 2>/dev/null) || continue
  [ "$st" = Z ] && continue
  cmd=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)
  case "$cmd" in
    *reaper-fixture*|*fake-codex*) printf 'left running: %s %s\n' "${d#/proc/}" "$cmd"; status=1 ;;
  esac
done
[ $status = 0 ] && echo "nothing left behind"
exit $status

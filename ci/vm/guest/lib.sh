# shellcheck shell=bash
# Helpers for VM scenarios; a scenario starts with `. "$REAPER_VM_LIB"`. Scenarios run as root
# inside the system service reaper-vm.service, in a fresh working directory, with the payload's
# bin/ (the host-built reaper, and any files given to run.sh) first in PATH.

vm_user=tester      # uid 1000, lingering: its user manager runs from boot
vm_failures=0

# as_user CMD [ARG...]: runs CMD as the normal user in a login session of its own (runuser -l
# goes through pam_systemd: a session-N.scope under user-1000.slice, XDG_RUNTIME_DIR and the
# session bus address set), as a user in a terminal or an ssh session has it.
as_user() {
  runuser -l "$vm_user" -c \
    ': "${XDG_RUNTIME_DIR:=/run/user/$(id -u)}" "${DBUS_SESSION_BUS_ADDRESS:=unix:path=$XDG_RUNTIME_DIR/bus}"; export XDG_RUNTIME_DIR DBUS_SESSION_BUS_ADDRESS; export PATH='"$(printf %q "$PATH")"'; cd /tmp; '"$(printf '%q ' "$@")"
}

# as_user_service CMD [ARG...]: runs CMD as a transient service of the user's manager
# (app.slice/run-….service, inside the user@1000.service subtree systemd delegates to the user),
# output piped back, waiting for it to end.
as_user_service() {
  runuser -u "$vm_user" -- env XDG_RUNTIME_DIR=/run/user/1000 \
    DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus \
    systemd-run --user --quiet --wait --pipe --collect --setenv=PATH="$PATH" -- "$@"
}

say() { printf '\n--- %s\n' "$*"; }
pass() { printf 'ok: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; vm_failures=$((vm_failures + 1)); }

# show TITLE CMD [ARG...]: prints a command's output and status under a title, never fails.
show() {
  local title=$1; shift
  say "$title"
  "$@" 2>&1
  printf '(exit %s)\n' "$?"
}

# Live processes (zombies are dead, whoever reaps them) whose command name is $1.
live_named() {
  ps -eo pid=,stat=,comm=,args= | awk -v n="$1" '$3 == n && $2 !~ /^Z/'
}

# finish: ends the scenario, non-zero when any check failed.
finish() {
  if [ "$vm_failures" -eq 0 ]; then
    printf '\nall checks passed\n'
    exit 0
  fi
  printf '\n%d check(s) failed\n' "$vm_failures"
  exit 1
}

#!/bin/sh
# The classic hand-written tree kill: the command in a session (and group) of its own, and on
# SIGTERM, SIGINT or SIGHUP: SIGTERM to that group, a second, SIGKILL to it.
setsid "$@" &
pid=$!
stop() {
  kill -TERM -- "-$pid" 2>/dev/null
  sleep 1
  kill -KILL -- "-$pid" 2>/dev/null
  exit 143
}
trap stop TERM INT HUP
wait "$pid"

#!/usr/bin/env bash
# The scoreboard of docs/check.md: `reaper check --suite` against the wrappers people kill trees
# with, on this machine. Every number comes from this run; the section between the scoreboard
# markers of docs/check.md is rewritten with the results, the date and the machine.
#   ci/scoreboard.sh            all wrappers (one at a time: about 30 minutes on 2 cores)
#   ci/scoreboard.sh NAME…      only the wrappers whose name contains NAME (docs/check.md untouched)
#   SCOREBOARD_CASES=setsid,daemon ci/scoreboard.sh   only those cases (`--only`), faster
#   SCOREBOARD_JOBS=3 ci/scoreboard.sh   three wrappers' suites at once (11 minutes on 2 cores;
#                                        the load can turn a slow return into `ignored`)
# Installs dumb-init with apt when it is missing; the MCP SDKs and the Codex CLI come from
# ci/install-deps.sh's cache (a wrapper whose program is missing is listed as not measured).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}
cargo build --quiet -p reaper-cli --bin reaper
reaper="$PWD/${CARGO_TARGET_DIR:-target}/debug/reaper"
if ! command -v dumb-init >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -qq dumb-init >/dev/null 2>&1 || apt-get update -qq && apt-get install -y -qq dumb-init >/dev/null || true
fi
codex="$cache/codex/node_modules/.bin/codex"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# name|needs|wrapper command line ({} the case, {timeout} the wrapper's own timeout)
wrappers=(
  "GNU timeout|timeout|timeout {timeout} {}"
  "GNU timeout -k 1|timeout|timeout -k 1 {timeout} {}"
  "timeout --foreground|timeout|timeout --foreground {timeout} {}"
  "tini -s|tini|tini -s -- {}"
  "dumb-init|dumb-init|dumb-init {}"
  "setsid + kill -- -PGID|setsid|ci/scoreboard/kill-group.sh {}"
  "codex sandbox|$codex|$codex sandbox -c sandbox_mode=workspace-write -- {}"
  "MCP TypeScript SDK StdioClientTransport|node|env NODE_PATH=$cache/node/node_modules node ci/scoreboard/mcp_ts_client.cjs {}"
  "MCP Python SDK stdio_client|$cache/venv/bin/python|$cache/venv/bin/python ci/scoreboard/mcp_python_client.py {}"
  "reaper timeout|$reaper|$reaper timeout {timeout} {}"
  "reaper run (no flags)|$reaper|$reaper run --timeout {timeout} -- {}"
  "reaper run --containment cgroup|$reaper|$reaper run --containment cgroup --die-with-parent --on-stdin-eof 1s --timeout {timeout} -- {}"
  "reaper run --containment subreaper|$reaper|$reaper run --containment subreaper --die-with-parent --on-stdin-eof 1s --timeout {timeout} -- {}"
  "reaper run --containment pgid|$reaper|$reaper run --containment pgid --die-with-parent --on-stdin-eof 1s --timeout {timeout} -- {}"
)

i=0
for w in "${wrappers[@]}"; do
  IFS='|' read -r name needs cmd <<<"$w"
  if [ $# -gt 0 ]; then
    keep=
    for pat in "$@"; do case "$name" in *"$pat"*) keep=1 ;; esac; done
    [ -n "$keep" ] || continue
  fi
  i=$((i + 1))
  printf '%s\n' "$name" >"$out/$i.name"
  printf '%s\n' "$cmd" >"$out/$i.cmd"
  if ! command -v "$needs" >/dev/null 2>&1; then
    echo "not measured: $name ($needs is not installed)"
    continue
  fi
  read -ra argv <<<"$cmd"
  # Each wrapper's suite is independent (its own trees, sentinels and groups): up to
  # SCOREBOARD_JOBS of them at once, each mostly waiting on its ends.
  while [ "$(jobs -rp | wc -l)" -ge "${SCOREBOARD_JOBS:-1}" ]; do wait -n || :; done
  echo "==> $name: $cmd"
  (
    status=0
    "$reaper" check --suite --json --settle 500ms ${SCOREBOARD_CASES:+--only "$SCOREBOARD_CASES"} -- "${argv[@]}" >"$out/$i.json" || status=$?
    echo "    $name: exit $status"
  ) &
done
wait

machine="$(uname -srm), $(nproc) CPUs, $(. /etc/os-release && echo "$PRETTY_NAME")"
machine+=", $("$reaper" doctor --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["cgroup_mode"] + " cgroups, auto backend " + d["auto_backend"])' 2>/dev/null || echo '?')"
SCOREBOARD_CASES=${SCOREBOARD_CASES:-} SCOREBOARD_JOBS=${SCOREBOARD_JOBS:-1} python3 ci/scoreboard/render.py "$out" "$(date -u +%Y-%m-%d)" "$machine" "$([ $# -eq 0 ] && echo docs/check.md || echo -)"

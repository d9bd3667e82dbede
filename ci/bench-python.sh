#!/usr/bin/env bash
# The Python binding's overhead: reaper.run(['/bin/true']) against subprocess.run(['/bin/true']),
# in one interpreter, alternating, after a warm-up (the first run starts the runtime and the
# guardian). Prints a markdown table with the median of each and their ratio; the full run also
# puts it into docs/BENCHMARKS.md between its `bench-python:begin`/`end` markers.
#
#   ci/bench-python.sh           release build of the native module, 300 rounds
#   ci/bench-python.sh --quick   20 rounds, prints only (ci/bench.sh --quick): the native module of
#                                the x86_64 wheel ci/dist.sh left in target/artifacts when there
#                                is one (no build), else a debug build
set -euo pipefail
cd "$(dirname "$0")/.."
quick=
[ "${1:-}" = --quick ] && quick=1
target=${CARGO_TARGET_DIR:-target}
wheel=$(ls "${REAPER_DIST_DIR:-$target/artifacts}"/reaper_process-*manylinux_2_17_"$(uname -m)"*.whl 2>/dev/null | head -n 1) || true
if [ -n "$quick" ] && [ -n "$wheel" ]; then
  so=$(mktemp "${TMPDIR:-/tmp}/reaper-bench-python-so.XXXXXX")
  python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("reaper/_native.abi3.so"))' "$wheel" "$so"
  rounds=20 build="wheel's"
elif [ -n "$quick" ]; then
  cargo build --quiet -p reaper-python
  so=$target/debug/lib_native.so rounds=20 build=debug
else
  cargo build --quiet --release -p reaper-python
  so=$target/release/lib_native.so rounds=300 build=release
fi
pkg=$(mktemp -d "${TMPDIR:-/tmp}/reaper-bench-python.XXXXXX")
trap 'rm -rf "$pkg"; case $so in "${TMPDIR:-/tmp}"/reaper-bench-python-so.*) rm -f "$so" ;; esac' EXIT
cp -r bindings/python/python/reaper "$pkg/reaper"
rm -f "$pkg"/reaper/_native*.so
cp "$so" "$pkg/reaper/_native.abi3.so"
table=$(PYTHONPATH=$pkg python3 - "$rounds" "$build" <<'PY'
import statistics, subprocess, sys, time
import reaper
rounds, build = int(sys.argv[1]), sys.argv[2]
for _ in range(3):
    reaper.run(["/bin/true"]); subprocess.run(["/bin/true"])
ours, plain = [], []
for _ in range(rounds):
    t = time.perf_counter(); subprocess.run(["/bin/true"]); plain.append(time.perf_counter() - t)
    t = time.perf_counter(); r = reaper.run(["/bin/true"]); ours.append(time.perf_counter() - t)
backend = r.backend
a, b = statistics.median(ours) * 1e3, statistics.median(plain) * 1e3
print("| Python (%s build, %d rounds, %s backend) | median per call | ratio |" % (build, rounds, backend))
print("|---|---|---|")
print("| `subprocess.run(['/bin/true'])` | %.2f ms | 1.0 |" % b)
print("| `reaper.run(['/bin/true'])` | %.2f ms | %.1f |" % (a, a / b))
PY
)
printf '%s\n' "$table"
if [ -z "$quick" ]; then
  python3 - docs/BENCHMARKS.md "$table" <<'PY'
import sys
path, table = sys.argv[1:]
text = open(path).read()
begin, end = "<!-- bench-python:begin -->", "<!-- bench-python:end -->"
import datetime, subprocess
commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip() or "unknown"
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
block = ("%s\n## The Python binding (`ci/bench-python.sh`)\n\nGenerated on %s from reaper `%s`: "
         "one interpreter, the two calls alternating after a warm-up (the first run starts the "
         "runtime and the guardian), medians.\n\n%s\n%s" % (begin, when, commit, table, end))
if begin in text:
    text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
open(path, "w").write(text)
PY
fi

#!/bin/bash
# The Python binding (the wheel reaper-process, `import reaper`) under systemd on pure cgroup v2,
# as the lingering normal user in a login session (the library asks the user's manager over
# D-Bus for a delegated scope) and as root (the system manager's). Each: an interpreter
# SIGKILLed, and one ended by os._exit, with a tree running (the guardian kills it and removes
# its run cgroup; the interpreter's scope goes too); Popen.terminate(); a `with` block left by an
# exception; reaper.run's timeout. Every run: the cgroup backend in a reaper-*.scope, the whole
# tree dead, its run cgroup removed (by the path the outcome or the run names). The tree is the
# fixture's setsid-grandchild: its grandchild leads a session of its own and ignores SIGTERM;
# each process records its pid and start time, and is proved alive before its absence is.
# Needs FILEs: reaper-fixture (target/debug) and ci/dist.sh's manylinux x86_64 wheel
# (target/artifacts/reaper_process-*manylinux_2_17_x86_64.whl); without the wheel it fails. The
# image has python3 but no pip: the wheel, a zip, is unpacked onto PYTHONPATH.
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
. "$REAPER_VM_LIB"

wheel=$(ls "$REAPER_VM_PAYLOAD"/bin/reaper_process-*manylinux_2_17_x86_64.whl 2>/dev/null | head -n 1)
if [ -z "$wheel" ]; then
  fail "no reaper_process-*manylinux_2_17_x86_64.whl among the lane's files (ci/dist.sh or ci/dist-python.sh builds it into target/artifacts/)"
  finish
fi
command -v reaper-fixture >/dev/null || { fail "no reaper-fixture among the lane's files"; finish; }
say "the wheel $(basename "$wheel"), unpacked for $(python3 --version)"
site=$PWD/site
python3 -m zipfile -e "$wheel" "$site" && chmod -R a+rX "$site" ||
  { fail "cannot unpack $wheel"; finish; }
echo "(unpacked after $SECONDS s)"

# The checks, run once per identity; each prints `ok: …` or `FAIL: …` lines (turned into pass
# and fail below) and its own timings.
cat >check.py <<'PY'
import fcntl, json, os, pathlib, signal, shutil, subprocess, sys, tempfile, threading, time
import reaper

WHO = sys.argv[1]
WITHIN = 30          # bound on waits for what should happen promptly; never a measured duration
CG = "/sys/fs/cgroup"
base = pathlib.Path(tempfile.mkdtemp(prefix="reaper-bindings-"))
trees = []
t0 = time.monotonic()


def check(cond, what, why=""):
    print("%s: %s: %s%s" % ("ok" if cond else "FAIL", WHO, what, "" if cond or not why else ": %s" % why),
          flush=True)
    return cond


def step(title):
    print("\n[%5.1f s] %s" % (time.monotonic() - t0, title), flush=True)


def stat(pid):
    try:
        text = pathlib.Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[19])


def alive(pid, start):
    s = stat(pid)
    return s is not None and s[1] == start and s[0] not in ("Z", "X")


def until(pred):
    deadline = time.monotonic() + WITHIN
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def cgroup_dir(path):
    return path if path.startswith(CG + "/") else CG + "/" + path.lstrip("/")


class Tree:
    """The fixture's setsid-grandchild: leader, child, and a grandchild in a session of its own
    that ignores SIGTERM; each records `PID STARTTIME ROLE PGID SID`; the oracle's lock is held
    while any of them lives."""

    def __init__(self, name):
        self.name = name
        self.dir = base / name
        self.dir.mkdir()
        self.oracle, self.pids, self.ready = self.dir / "oracle", self.dir / "pids", self.dir / "ready"
        self.oracle.touch()
        self.grandchild = None
        self.born = time.monotonic()
        trees.append(self)

    def argv(self):
        return ["reaper-fixture", "--oracle", str(self.oracle), "--pids", str(self.pids),
                "--ready", str(self.ready), "setsid-grandchild"]

    def recorded(self):
        if not self.pids.exists():
            return []
        return [(int(f[0]), int(f[1]), f[2], int(f[4])) for f in
                (line.split() for line in self.pids.read_text().splitlines()) if len(f) >= 5]

    def prove_running(self):
        """Waits for the tree; True when its grandchild is alive now, in a session of its own
        and ignoring SIGTERM (read from /proc)."""
        if not until(self.ready.exists):
            return check(False, "%s: the tree ran" % self.name, "never ready; recorded: %s" % self.recorded())
        print("%s: the tree was built %.2f s after its start" % (self.name, time.monotonic() - self.born))
        for pid, start, role, sid in self.recorded():
            if role == "grandchild" and alive(pid, start):
                ign = [l for l in pathlib.Path("/proc/%d/status" % pid).read_text().splitlines()
                       if l.startswith("SigIgn:")]
                term_ignored = bool(ign) and int(ign[0].split()[1], 16) & (1 << (signal.SIGTERM - 1))
                self.grandchild = (pid, start)
                return check(sid == pid and term_ignored, "%s: the setsid'd TERM-ignoring grandchild "
                             "runs (pid %d, start %d)" % (self.name, pid, start), "sid %d, SigIgn %s" % (sid, ign))
        return check(False, "%s: the grandchild runs" % self.name, "recorded: %s" % self.recorded())

    def dead(self):
        with open(self.oracle) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        return not self.survivors()

    def survivors(self):
        return ["%s %d" % (role, pid) for pid, start, role, _ in self.recorded() if alive(pid, start)]

    def check_dead(self, what, wait=False):
        return check(self.recorded() and (until(self.dead) if wait else self.dead()),
                     "%s: the whole tree (%d processes) is dead" % (what, len(self.recorded())),
                     "alive: %s" % self.survivors())

    def kill_leftovers(self):
        for pid, start, role, _ in self.recorded():
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if alive(pid, start):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    print("cleanup: killed %s %d" % (role, pid))
            finally:
                os.close(fd)


def check_cgroup_gone(what, path, wait=False):
    d = cgroup_dir(path)
    check(until(lambda: not os.path.exists(d)) if wait else not os.path.exists(d),
          "%s: the run cgroup %s is removed" % (what, path), "it is still there")


def check_backend(what, backend, cgroup, scope):
    print("%s: backend %s, cgroup %s, scope %s" % (what, backend, cgroup, scope))
    where = "/user.slice/user-%d.slice/user@%d.service/" % (os.getuid(), os.getuid()) if os.getuid() \
        else "/system.slice/"
    ok = (backend == "cgroup" and cgroup is not None and scope is not None
          and scope.startswith("reaper-") and where in cgroup and "/%s/" % scope in cgroup)
    check(ok, "%s: the cgroup backend, in the delegated scope %s under %s" % (what, scope, where),
          "backend %s, cgroup %s" % (backend, cgroup))


def run_timeout():
    step("reaper.run(setsid-grandchild, timeout=2, grace=0.5)")
    t = Tree("run")
    watcher = threading.Thread(target=t.prove_running)
    watcher.start()
    outcome = None
    try:
        reaper.run(t.argv(), timeout=2, grace=0.5)
        check(False, "run: raised reaper.TimeoutExpired", "it returned")
    except reaper.TimeoutExpired as e:
        check(isinstance(e, subprocess.TimeoutExpired), "run: raised reaper.TimeoutExpired, a subprocess.TimeoutExpired")
        outcome = e.outcome
    watcher.join()
    if outcome is None:
        return
    print(outcome)
    check(t.grandchild is not None, "run: the grandchild was seen alive during the run")
    check(outcome.stop_reason == "timeout", "run: stop_reason timeout", outcome.stop_reason)
    check(outcome.killed >= 3 and not outcome.survivors,
          "run: %d killed, no survivor" % outcome.killed, outcome.survivors)
    check_backend("run", outcome.backend, outcome.cgroup, outcome.scope)
    t.check_dead("run")
    if outcome.cgroup:
        check_cgroup_gone("run", outcome.cgroup)


def popen_terminate():
    step("reaper.Popen(setsid-grandchild, grace=0.5).terminate()")
    t = Tree("terminate")
    p = reaper.Popen(t.argv(), grace=0.5)
    if t.prove_running():
        p.terminate()
    else:
        p.kill()
    p.wait()
    print(p.outcome)
    check(p.outcome.stop_reason == "cancel" and p.returncode == -signal.SIGTERM,
          "terminate: stop_reason cancel, returncode -15", "%s, %s" % (p.outcome.stop_reason, p.returncode))
    t.check_dead("terminate")
    if p.outcome.cgroup:
        check_cgroup_gone("terminate", p.outcome.cgroup)


class Boom(Exception):
    pass


def with_exception():
    step("with reaper.Popen(setsid-grandchild, grace=0.5): raise")
    t = Tree("with")
    p = None
    try:
        with reaper.Popen(t.argv(), grace=0.5) as p:
            t.prove_running()
            raise Boom()
    except Boom:
        pass
    print(p.outcome)
    check(p.outcome is not None and p.outcome.stop_reason == "cancel",
          "with: left by an exception, the run was stopped (stop_reason cancel)", p.outcome)
    t.check_dead("with")
    if p.outcome and p.outcome.cgroup:
        check_cgroup_gone("with", p.outcome.cgroup)


# An interpreter of its own holds a tree: it writes what its Popen says, waits for its stdin's
# EOF (the tree was seen alive), then ends by os._exit, or waits for a SIGKILL.
CHILD = r"""
import json, os, sys, time, reaper
mode, info, ready, *argv = sys.argv[1:]
p = reaper.Popen(argv, grace=0.5)
while not os.path.exists(ready) and p.poll() is None:
    time.sleep(0.01)
with open(info + ".tmp", "w") as f:
    # The native run's cgroup (Popen names its backend, not its cgroup).
    json.dump({"backend": p.backend, "cgroup": p.cgroup, "guardian": reaper.guardian_pid()}, f)
os.rename(info + ".tmp", info)
sys.stdin.read()
if mode == "os_exit":
    os._exit(0)
time.sleep(3600)
"""


def interpreter_end(mode):
    step("the interpreter ended by %s with a tree running" % mode)
    t = Tree(mode)
    info = t.dir / "info"
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(info), str(t.ready), *t.argv()],
                             stdin=subprocess.PIPE)
    try:
        if not until(lambda: info.exists() or child.poll() is not None) or not info.exists():
            check(False, "%s: the interpreter started its tree" % mode, "exit %s" % child.poll())
            return
        d = json.loads(info.read_text())
        guardian = d["guardian"] and stat(d["guardian"])
        cg = d["cgroup"]
        scope = next((part for part in (cg or "").split("/") if part.startswith("reaper-") and part.endswith(".scope")), None)
        check_backend(mode, d["backend"], cg, scope)
        check(scope is not None and scope.startswith("reaper-%d-" % child.pid),
              "%s: the scope is the interpreter's own" % mode, scope)
        running = t.prove_running()
        check(bool(guardian) and alive(d["guardian"], guardian[1]),
              "%s: the interpreter's guardian runs (pid %s)" % (mode, d["guardian"]))
        if mode == "sigkill":
            child.send_signal(signal.SIGKILL)
        child.stdin.close()
        child.wait()
        want = -signal.SIGKILL if mode == "sigkill" else 0
        check(child.returncode == want, "%s: the interpreter ended (%s)" % (mode, child.returncode))
        if not running:
            return
        t.check_dead(mode, wait=True)
        if cg:
            check_cgroup_gone(mode, cg, wait=True)
            if scope:
                scope_dir = cgroup_dir(cg[:cg.index("/" + scope + "/") + len(scope) + 1])
                check(until(lambda: not os.path.exists(scope_dir)),
                      "%s: the interpreter's scope %s is gone" % (mode, scope), "still there")
        if guardian:
            check(until(lambda: not alive(d["guardian"], guardian[1])),
                  "%s: the guardian exited once its work was done" % mode)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


try:
    # The interpreters of their own first: once this one has run a command it lives in its own
    # delegated scope, which a child interpreter would inherit and use as it is.
    interpreter_end("sigkill")
    interpreter_end("os_exit")
    # Warm (the fixture cached, the runtime and guardian started) before the 2 s timeout's run,
    # whose tree must be built well within it.
    popen_terminate()
    with_exception()
    run_timeout()
finally:
    for t in trees:
        t.kill_leftovers()
    shutil.rmtree(base, ignore_errors=True)
    step("done")
PY

# run_checks WHO [RUNNER...]: runs check.py as WHO into WHO.log, its status last.
run_checks() {
  local who=$1 t=$SECONDS
  shift
  "$@" env PYTHONPATH="$site" python3 "$PWD/check.py" "$who" >"$who.log" 2>&1
  echo "@@status $? after $((SECONDS - t)) s" >>"$who.log"
}
# report WHO: the log, its ok/FAIL lines counted by pass/fail.
report() {
  local who=$1 line checks=0
  say "as $who$([ "$who" = user ] && echo " $vm_user, in a login session"): python3 check.py (PYTHONPATH: the unpacked wheel)"
  while IFS= read -r line; do
    case $line in
      "ok: "*) pass "${line#ok: }"; checks=$((checks + 1)) ;;
      "FAIL: "*) fail "${line#FAIL: }"; checks=$((checks + 1)) ;;
      "@@status 0 "*) echo "(${line#@@status 0 })" ;;
      "@@status "*) fail "$who: check.py exited ${line#@@status }" ;;
      *) printf '%s\n' "$line" ;;
    esac
  done <"$who.log"
  [ "$checks" -gt 0 ] || fail "$who: no check ran"
}
# The user and root side by side: nothing is shared but the fixture binary (each has its own
# files, scopes and cgroups, and checks only the pids its trees recorded).
run_checks user as_user &
user_job=$!
run_checks root
wait "$user_job"
report user
report root

left=$(live_named reaper-fixture)
[ -z "$left" ] && pass "no reaper-fixture left (ps)" || fail "left behind:"$'\n'"$left"
echo "(bindings: $SECONDS s)"
finish

//! reaper as a container's init (issue 15 part B): PID 1 of a new PID namespace (`unshare
//! --pid --fork --mount-proc`, what Docker gives an ENTRYPOINT), reaping every orphan at once,
//! passing signals on as tini does, stopping the whole tree gracefully on SIGTERM (`docker
//! stop`), and exiting with the leader's status. Signals come from outside the namespace, as
//! `docker stop` sends them, through a pidfd on reaper.

mod common;

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// A PID 1 under `unshare --pid --fork --mount-proc`, SIGKILLed with its namespace if the test
/// ends early (unshare's child is the namespace's init: its death kills the rest).
struct Pid1 {
    unshare: Child,
    init: Option<OwnedFd>,
}

impl Pid1 {
    /// `unshare … -- PROGRAM ARGS…` (PROGRAM: reaper, or tini for the negative control).
    fn start(program: &str, args: &[&str], env: &[(&str, &Path)]) -> Pid1 {
        Self::start_with(&["--mount-proc"], program, args, env)
    }

    /// The same with other unshare options than `--mount-proc` (none: /proc stays the parent
    /// namespace's).
    fn start_with(opts: &[&str], program: &str, args: &[&str], env: &[(&str, &Path)]) -> Pid1 {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork"])
            .args(opts)
            .args(["--", program])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        Pid1 {
            unshare: c.spawn().expect("start unshare"),
            init: None,
        }
    }

    /// A pidfd on the namespace's PID 1 (unshare's child), once unshare has forked it; the
    /// caller knows PID 1 runs PROGRAM by then (its leader said so). Checked against unshare's
    /// list of children after the open: unshare had not reaped it, so the pid was still its own.
    fn try_init(&mut self) -> Option<&OwnedFd> {
        if self.init.is_none() {
            let me = self.unshare.id();
            let children = format!("/proc/{me}/task/{me}/children");
            let listed = |pid: i32| {
                std::fs::read_to_string(&children)
                    .unwrap_or_default()
                    .split_whitespace()
                    .any(|p| p == pid.to_string())
            };
            let pid: i32 = std::fs::read_to_string(&children)
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            let fd = rustix::process::pidfd_open(
                rustix::process::Pid::from_raw(pid)?,
                rustix::process::PidfdFlags::empty(),
            )
            .ok()?;
            if !listed(pid) {
                return None;
            }
            self.init = Some(fd);
        }
        self.init.as_ref()
    }

    fn init(&mut self) -> &OwnedFd {
        self.try_init().expect("PID 1 is running")
    }

    /// Whether PID 1 has a child named `comm` (its leader, once exec'd; the guardian is
    /// another child).
    fn has_child_named(&mut self, comm: &str) -> bool {
        use std::os::fd::AsRawFd;
        let Some(fd) = self.try_init().map(|f| f.as_raw_fd()) else {
            return false;
        };
        // The pid behind the pidfd, in the test's namespace (fdinfo's `Pid:`).
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
        let Some(pid) = info.lines().find_map(|l| l.strip_prefix("Pid:")) else {
            return false;
        };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", pid.trim())) else {
            return false;
        };
        tasks.flatten().any(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .any(|c| {
                    std::fs::read_to_string(format!("/proc/{c}/comm"))
                        .is_ok_and(|n| n.trim() == comm)
                })
        })
    }

    fn signal(&mut self, sig: Signal) {
        let fd = self.init();
        rustix::process::pidfd_send_signal(fd, sig).expect("signal PID 1");
    }

    /// unshare's exit status (it exits with its child's) and PID 1's stderr.
    fn wait(mut self, within: Duration) -> (i32, String) {
        let st = wait_with_deadline(&mut self.unshare, within);
        let mut err = String::new();
        if let Some(mut e) = self.unshare.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        let code = match (
            st.code(),
            std::os::unix::process::ExitStatusExt::signal(&st),
        ) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            _ => -1,
        };
        (code, err)
    }
}

impl Drop for Pid1 {
    fn drop(&mut self) {
        if let Some(fd) = &self.init {
            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

fn reaper_bin() -> &'static str {
    env!("CARGO_BIN_EXE_reaper")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn has_line(path: &Path, line: &str) -> bool {
    lines(path).iter().any(|l| l == line)
}

/// The table's app: a main process, a background child and a setsid'd grandchild, each
/// trapping SIGTERM to write "graceful NAME" and exit 0; each writes "ready NAME" once its
/// trap is set. `$OUT` is the file.
const APP: &str = r#"
    trap 'echo "graceful main" >> "$OUT"; exit 0' TERM
    part='trap "echo \"graceful $0\" >> \"\$OUT\"; exit 0" TERM; echo "ready $0" >> "$OUT"; while :; do sleep 600 & wait $!; done'
    sh -c "$part" child &
    setsid sh -c "$part" grandchild &
    echo "ready main" >> "$OUT"
    while :; do sleep 600 & wait $!; done
"#;

fn app_ready(out: &Path) -> bool {
    ["ready main", "ready child", "ready grandchild"]
        .iter()
        .all(|l| has_line(out, l))
}

/// The table's scenario with reaper as PID 1: SIGTERM to PID 1 (`docker stop`) reaches all
/// three, setsid'd grandchild included, each exits by its own trap, and reaper exits with the
/// main process's status (0).
#[test]
fn sigterm_to_pid1_stops_main_child_and_setsid_grandchild_gracefully() {
    if !have(Need::PidNamespace) {
        return;
    }
    // cgroup: this machine; subreaper: a container's (its cgroupfs is read-only).
    for backend in ["cgroup", "subreaper"] {
        if backend == "cgroup" && !have(Need::Cgroup) {
            continue;
        }
        let t = Tree::new();
        let out = t.dir.path().join("out");
        let mut p = Pid1::start(
            reaper_bin(),
            &[
                "run",
                "--containment",
                backend,
                "--grace",
                "5s",
                "--",
                "sh",
                "-c",
                APP,
            ],
            &[("OUT", &out)],
        );
        assert!(
            wait_until(Duration::from_secs(20), || app_ready(&out)),
            "{backend}: the app never got ready: {:?}",
            lines(&out)
        );
        p.signal(Signal::TERM);
        let (code, err) = p.wait(Duration::from_secs(30));
        for name in ["main", "child", "grandchild"] {
            assert!(
                has_line(&out, &format!("graceful {name}")),
                "{backend}: {name} did not exit by its trap: {:?}; {err}",
                lines(&out)
            );
        }
        assert_eq!(code, 0, "{backend}: {err}");
    }
}

/// `INIT -- CMD…` as PID 1 (how podman starts `--init-path`): the table's scenario as above,
/// quietly (no summary line, as tini), and the leader's status passes through; `reaper --`
/// with no command is a usage error; a link named `timeout` keeps timeout(1)'s `--`.
#[test]
fn the_init_command_line_as_pid1_stops_the_tree_gracefully() {
    let o = reaper()
        .arg("--")
        .stdin(Stdio::null())
        .output()
        .expect("run reaper");
    assert_eq!(code(&o), 125, "{}", stderr(&o));
    // Through a link named `timeout`, `--` keeps GNU timeout's meaning (the init form would
    // look for a command named "10": 127).
    let dir = tempfile::Builder::new()
        .prefix("reaper-test-")
        .tempdir()
        .expect("temp dir");
    let link = dir.path().join("timeout");
    std::os::unix::fs::symlink(reaper_bin(), &link).expect("symlink");
    let o = Command::new(&link)
        .args(["--", "10", "sh", "-c", "exit 3"])
        .stdin(Stdio::null())
        .output()
        .expect("run the link");
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    if !have(Need::PidNamespace) {
        return;
    }
    let p = Pid1::start(reaper_bin(), &["--", "sh", "-c", "exit 7"], &[]);
    assert_eq!(p.wait(Duration::from_secs(30)).0, 7);
    let t = Tree::new();
    let out = t.dir.path().join("out");
    // The app's own stderr (a shell's "Terminated") is not reaper's.
    let app = format!("exec 2>/dev/null\n{APP}");
    let mut p = Pid1::start(reaper_bin(), &["--", "sh", "-c", &app], &[("OUT", &out)]);
    assert!(
        wait_until(Duration::from_secs(20), || app_ready(&out)),
        "the app never got ready: {:?}",
        lines(&out)
    );
    p.signal(Signal::TERM);
    let (code, err) = p.wait(Duration::from_secs(30));
    for name in ["main", "child", "grandchild"] {
        assert!(
            has_line(&out, &format!("graceful {name}")),
            "{name} did not exit by its trap: {:?}; {err}",
            lines(&out)
        );
    }
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.trim(), "", "-q: nothing on stderr");
}

/// Negative control: the same app under tini as PID 1 (`tini --`): only main gets SIGTERM; the
/// setsid'd grandchild is SIGKILLed by the kernel when tini exits, so the test's oracle does
/// tell a graceful stop from the namespace's end.
#[test]
fn under_tini_the_setsid_grandchild_is_not_graceful() {
    if !have(Need::PidNamespace) {
        return;
    }
    // Debian package `tini`; ci/install-deps.sh installs it, and ci/test.sh then requires it.
    if !have(Need::Program("tini")) {
        return;
    }
    let t = Tree::new();
    let out = t.dir.path().join("out");
    let mut p = Pid1::start("tini", &["--", "sh", "-c", APP], &[("OUT", &out)]);
    assert!(
        wait_until(Duration::from_secs(20), || app_ready(&out)),
        "the app never got ready: {:?}",
        lines(&out)
    );
    p.signal(Signal::TERM);
    let (_, err) = p.wait(Duration::from_secs(30));
    assert!(has_line(&out, "graceful main"), "{:?}; {err}", lines(&out));
    assert!(
        !has_line(&out, "graceful grandchild"),
        "tini reached the setsid'd grandchild? {:?}",
        lines(&out)
    );
}

/// A leader that double-forks 1000 children, each in a session of its own (`waitpid(0)` in
/// reaper's group would never reap them), waits until every one has exited (the EOF of a pipe
/// they all held), then counts the zombies of the namespace until none is left or `within`
/// passed, and writes "FIRST LAST" to `$OUT`.
const ORPHANS: &str = r#"
import os, sys, time
out, within = os.environ["OUT"], float(sys.argv[1])
r, w = os.pipe()
for _ in range(1000):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os.setsid()
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
os.close(w)
os.read(r, 1)
def zombies():
    n = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        if s[s.rindex(")") + 2] == "Z":
            n += 1
    return n
first = zombies()
deadline = time.monotonic() + within
while zombies() and time.monotonic() < deadline:
    time.sleep(0.01)
with open(out, "w") as f:
    f.write(f"{first} {zombies()}\n")
"#;

/// Counts (zombies right after the orphans' exit, zombies at the end) from inside the
/// namespace, with `pid1 …` as its init.
fn orphans_under(pid1: &str, args: &[&str], within: &str) -> ((u32, u32), i32, String) {
    let t = Tree::new();
    let out = t.dir.path().join("out");
    let mut argv: Vec<&str> = args.to_vec();
    argv.extend(["python3", "-c", ORPHANS, within]);
    let p = Pid1::start(pid1, &argv, &[("OUT", &out)]);
    let (code, err) = p.wait(Duration::from_secs(120));
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let mut n = text.split_whitespace().map(|n| n.parse::<u32>().ok());
    match (n.next().flatten(), n.next().flatten()) {
        (Some(a), Some(b)) => ((a, b), code, err),
        _ => panic!("the leader wrote no count ({text:?}); exit {code}: {err}"),
    }
}

/// reaper as PID 1 reaps 1000 orphans that each made a session of their own: none is left a
/// zombie (within 10 s, generous on a loaded machine; done at once in practice).
#[test]
fn pid1_reaps_a_thousand_orphans_in_their_own_sessions() {
    if !have(Need::PidNamespace) || !have(Need::Python3) {
        return;
    }
    for backend in ["cgroup", "subreaper"] {
        if backend == "cgroup" && !have(Need::Cgroup) {
            continue;
        }
        let args = ["run", "--containment", backend, "--"];
        let ((first, last), code, err) = orphans_under(reaper_bin(), &args, "10");
        assert_eq!(
            last, 0,
            "{backend}: zombies left (first look: {first}): {err}"
        );
        assert_eq!(code, 0, "{backend}: {err}");
    }

    // Negative control: a PID 1 that waits for its own child only (Python's subprocess.run)
    // leaves them all zombies, so the count does see unreaped orphans.
    let ((_, last), _, err) = orphans_under(
        "python3",
        &["-c", "import subprocess, sys; subprocess.run(sys.argv[1:])"],
        "0.5",
    );
    assert!(
        last >= 900,
        "only {last} zombies without a reaping init: {err}"
    );
}

/// A leader that records each signal it gets in `$OUT` ("NAME" for itself, "child NAME" for a
/// setsid'd child of its own), and exits 3 on SIGTERM.
const RECORDER: &str = r#"
import os, signal, sys
out = os.environ["OUT"]
names = ["HUP", "INT", "QUIT", "USR1", "USR2", "WINCH"]
def record(who):
    def h(sig, _):
        with open(out, "a") as f:
            f.write(who + signal.Signals(sig).name[3:] + "\n")
        if sig == signal.SIGTERM:
            os._exit(3)
    return h
def listen(who):
    for n in names + ["TERM"]:
        signal.signal(getattr(signal, "SIG" + n), record(who))
    with open(out, "a") as f:
        f.write(who + "ready\n")
    while True:
        signal.pause()
if os.fork() == 0:
    os.setsid()
    listen("child ")
listen("")
"#;

const FORWARDED: [(Signal, &str); 6] = [
    (Signal::HUP, "HUP"),
    (Signal::INT, "INT"),
    (Signal::QUIT, "QUIT"),
    (Signal::USR1, "USR1"),
    (Signal::USR2, "USR2"),
    (Signal::WINCH, "WINCH"),
];

/// As PID 1, reaper passes HUP, INT, QUIT, USR1, USR2 and WINCH on to the leader, as tini does,
/// and keeps running (each would be dropped by the kernel without a handler: PID 1); TERM
/// then stops the tree, and reaper exits with the leader's status (3). With `--forward-to
/// tree`, the setsid'd child gets them too; without it, it does not.
#[test]
fn pid1_forwards_signals_to_the_leader_or_the_tree() {
    if !have(Need::PidNamespace) || !have(Need::Python3) {
        return;
    }
    for tree in [false, true] {
        let t = Tree::new();
        let out = t.dir.path().join("out");
        let mut args = vec!["run", "--grace", "5s"];
        if tree {
            args.extend(["--forward-to", "tree"]);
        }
        args.extend(["--", "python3", "-c", RECORDER]);
        let mut p = Pid1::start(reaper_bin(), &args, &[("OUT", &out)]);
        assert!(
            wait_until(Duration::from_secs(20), || has_line(&out, "ready")
                && has_line(&out, "child ready")),
            "the recorder never got ready: {:?}",
            lines(&out)
        );
        for (sig, name) in FORWARDED {
            p.signal(sig);
            assert!(
                wait_until(Duration::from_secs(20), || has_line(&out, name)),
                "tree={tree}: the leader never got SIG{name}: {:?}",
                lines(&out)
            );
            if tree {
                let child = format!("child {name}");
                assert!(
                    wait_until(Duration::from_secs(20), || has_line(&out, &child)),
                    "the setsid'd child never got SIG{name}: {:?}",
                    lines(&out)
                );
            }
        }
        p.signal(Signal::TERM);
        let (code, err) = p.wait(Duration::from_secs(30));
        assert_eq!(code, 3, "tree={tree}: {err}; {:?}", lines(&out));
        assert!(has_line(&out, "TERM"), "{:?}", lines(&out));
        // TERM goes to every process whatever --forward-to says: it stops the tree.
        assert!(has_line(&out, "child TERM"), "{:?}", lines(&out));
        if !tree {
            let reached: Vec<String> = lines(&out)
                .into_iter()
                .filter(|l| l.starts_with("child ") && l != "child ready" && l != "child TERM")
                .collect();
            assert!(reached.is_empty(), "forwarded to the child: {reached:?}");
        }
    }
}

/// Exit statuses as PID 1: the leader's code; 128+N when it died of signal N (its own, a
/// forwarded SIGINT, or the SIGTERM that stopped the tree).
#[test]
fn pid1_exits_with_the_leaders_status() {
    if !have(Need::PidNamespace) {
        return;
    }
    let run = |script: &str| {
        let p = Pid1::start(reaper_bin(), &["run", "-q", "--", "sh", "-c", script], &[]);
        p.wait(Duration::from_secs(30))
    };
    assert_eq!(run("exit 7").0, 7);
    assert_eq!(run("exit 0").0, 0);
    assert_eq!(run("kill -KILL $$").0, 137);

    for (sig, code) in [(Signal::INT, 130), (Signal::TERM, 143)] {
        let mut p = Pid1::start(reaper_bin(), &["run", "--", "sleep", "600"], &[]);
        // The leader has exec'd sleep once PID 1's child is named so (before that, a signal
        // could find the pre-exec reaper fork and its handlers).
        assert!(wait_until(Duration::from_secs(20), || p.has_child_named("sleep")));
        p.signal(sig);
        let (c, err) = p.wait(Duration::from_secs(30));
        assert_eq!(c, code, "{sig:?}: {err}");
    }
}

/// PID 1 of a namespace whose /proc is still the parent's (`unshare --pid --fork` without
/// `--mount-proc`): cgroup.procs gives pids of reaper's namespace, /proc/PID names the parent
/// namespace's processes. The first SIGTERM must still reach the whole tree (it reached none:
/// "signalled n=0", and cgroup.kill after the grace SIGKILLed all three), so all three exit
/// by their traps.
#[test]
fn under_a_foreign_proc_the_first_sigterm_still_reaches_the_tree() {
    if !have(Need::PidNamespace) || !have(Need::Cgroup) {
        return;
    }
    let t = Tree::new();
    let out = t.dir.path().join("out");
    let mut p = Pid1::start_with(
        &[],
        reaper_bin(),
        &[
            "run",
            "--containment",
            "cgroup",
            "--grace",
            "20s",
            "--",
            "sh",
            "-c",
            APP,
        ],
        &[("OUT", &out)],
    );
    assert!(
        wait_until(Duration::from_secs(20), || app_ready(&out)),
        "the app never got ready: {:?}",
        lines(&out)
    );
    p.signal(Signal::TERM);
    let (code, err) = p.wait(Duration::from_secs(30));
    for name in ["main", "child", "grandchild"] {
        assert!(
            has_line(&out, &format!("graceful {name}")),
            "{name} did not exit by its trap: {:?}; {err}",
            lines(&out)
        );
    }
    assert_eq!(code, 0, "{err}");
}

/// The subreaper backend finds the tree by walking /proc from reaper's pid: under a foreign
/// /proc, PID 1's "descendants" were the parent namespace's whole tree (reported as dozens of
/// survivors, each a pidfd_open away from a process of this namespace that shares its
/// number). It refuses to start there, says why and what to do, and runs nothing.
#[test]
fn under_a_foreign_proc_the_subreaper_backend_refuses() {
    if !have(Need::PidNamespace) {
        return;
    }
    let t = Tree::new();
    let out = t.dir.path().join("out");
    let p = Pid1::start_with(
        &[],
        reaper_bin(),
        &[
            "run",
            "--containment",
            "subreaper",
            "--",
            "sh",
            "-c",
            r#"echo ran > "$OUT""#,
        ],
        &[("OUT", &out)],
    );
    let (code, err) = p.wait(Duration::from_secs(30));
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("/proc shows another PID namespace than reaper's")
            && err.contains("--mount-proc"),
        "{err}"
    );
    assert!(!out.exists(), "the command ran");

    // `reaper doctor` says so too.
    let doc = Command::new("unshare")
        .args(["--pid", "--fork", "--", reaper_bin(), "doctor", "--json"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    let doc: serde_json::Value = serde_json::from_slice(&doc.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", stderr(&doc)));
    let hints = doc["hints"].to_string();
    assert!(
        hints.contains("/proc shows another PID namespace than reaper's"),
        "{hints}"
    );
}

/// `--init` gives the same behaviour when reaper is not PID 1 (a subreaper under another
/// init): SIGUSR1 is passed on to the leader instead of killing reaper (its default action),
/// SIGINT is passed on instead of stopping the tree, and SIGTERM stops the tree.
#[test]
fn the_init_flag_forwards_when_not_pid1() {
    forwards_when_not_pid1(&["run", "--init", "--grace", "5s", "--"]);
}

/// `reaper -- CMD…`, a container runtime's init command line (podman's `--init-path`), is
/// `reaper run --init -- CMD…`: the same forwarding, not PID 1.
#[test]
fn the_init_command_line_forwards_when_not_pid1() {
    forwards_when_not_pid1(&["--"]);
}

fn forwards_when_not_pid1(prefix: &[&str]) {
    if !have(Need::Python3) {
        return;
    }
    let t = Tree::new();
    let out = t.dir.path().join("out");
    let mut r = reaper()
        .args(prefix)
        .args(["python3", "-c", RECORDER])
        .env("OUT", &out)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start reaper");
    assert!(
        wait_until(Duration::from_secs(20), || has_line(&out, "ready")
            && has_line(&out, "child ready")),
        "the recorder never got ready: {:?}",
        lines(&out)
    );
    for (sig, name) in [(Signal::USR1, "USR1"), (Signal::INT, "INT")] {
        signal_child(&r, sig);
        assert!(
            wait_until(Duration::from_secs(20), || has_line(&out, name)),
            "the leader never got SIG{name}: {:?}",
            lines(&out)
        );
    }
    signal_child(&r, Signal::TERM);
    let st = wait_with_deadline(&mut r, Duration::from_secs(30));
    assert_eq!(st.code(), Some(3), "{:?}", lines(&out));
    assert!(has_line(&out, "child TERM"), "{:?}", lines(&out));
}

/// A container's PID 1 with a read-only cgroupfs (the cgroup2 mount remounted read-only in a
/// mount namespace of its own; the host's mount is not touched): the one fallback line names
/// the PID namespace as what contains the tree; `-q` silences it (tests/containers.rs).
#[test]
fn pid1_fallback_line_names_the_pid_namespace() {
    if !have(Need::PidNamespace) {
        return;
    }
    let mount = cgroup2_mount().expect("a cgroup2 mount");
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--",
            "sh",
            "-c",
        ])
        .arg(r#"mount --make-rprivate / && mount -o remount,bind,ro "$MNT" && exec "$@""#)
        .args(["sh", reaper_bin(), "run", "--", "true"])
        .env("MNT", mount)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].ends_with("; as PID 1, the PID namespace contains the tree"),
        "{err}"
    );
}

//! The guardian: it must never stop reaper from serving (issue 10 item 6), it cleans up exactly
//! its own reaper's cgroups when reaper is SIGKILLed, and it removes reaper's supervisor leaf
//! once reaper has exited (issue 10 item 9, last part).

mod common;
mod mcp_support;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_support::Server;
use rmcp::model::{CallToolRequestParams, ClientRequest, ServerResult};
use serde_json::json;

/// Slack on top of every bound the promise itself sets (a shared, noisy machine).
const SLACK: Duration = Duration::from_secs(3);

/// `reaper mcp ARGS` with fake-codex, its stderr going to `log`.
async fn start_logged(args: &[&str], log: &Path) -> Server {
    let stderr = std::fs::File::create(log).expect("a log file");
    mcp_support::start_with_stderr(
        mcp_support::Options {
            args,
            env: &[("RUST_LOG", "warn")],
        },
        stderr.into(),
    )
    .await
}

/// A process this test stopped with SIGSTOP; continued when dropped, whatever the test's fate,
/// so a failing test never leaves a stopped guardian behind.
struct Stopped(OwnedFd);

impl Stopped {
    fn stop(pid: i32, start: u64) -> Stopped {
        let fd = common::pidfd_checked(pid, start).expect("the guardian is alive");
        rustix::process::pidfd_send_signal(fd.as_fd(), rustix::process::Signal::STOP)
            .expect("SIGSTOP the guardian");
        Stopped(fd)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = rustix::process::pidfd_send_signal(self.0.as_fd(), rustix::process::Signal::CONT);
    }
}

/// Waits (up to `within`) until the process behind `fd` has exited.
fn exited_within(fd: &OwnedFd, within: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(n) if n > 0 => return true,
            Ok(_) => return false,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => panic!("poll on a pidfd: {e}"),
        }
    }
}

/// Issue 10 item 6: a contained process with reaper's uid SIGSTOPs the guardian. reaper used to
/// write two records a call into the guardian's pipe with a blocking `write_all` on its only
/// runtime thread: ~630 calls later the pipe was full and the server froze (no answer, no ping,
/// no timeout enforced, stdin EOF ignored). Now every call is answered, a ping too, a timeout
/// still fires on time, stdin EOF still ends the server, and the stopped guardian is reported
/// once while serving, then continued at the end (and said so). Each wait is bounded, so on
/// the old code this test fails instead of hanging.
#[tokio::test]
async fn a_stopped_guardian_never_stops_the_server() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    const CALLS: usize = 1500;
    const IN_FLIGHT: usize = 8;
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let log = tmp.path().join("stderr");
    // 30 "seconds" of 20 ms: a 600 ms timeout.
    let s = start_logged(
        &[
            "--test-timeout-unit",
            "20ms",
            "--grace",
            "200ms",
            "--max-concurrent",
            "8",
        ],
        &log,
    )
    .await;
    let server_pid = s.pid();
    let server_cgroup = mcp_support::cgroup_of(server_pid).unwrap_or_default();
    let (gpid, gstart) = common::guardian_of(server_pid).expect("reaper mcp runs a guardian");
    let guardian = Stopped::stop(gpid, gstart);

    let peer = Arc::new(s.client.peer().clone());
    let t0 = Instant::now();
    let mut done = 0;
    while done < CALLS {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..IN_FLIGHT.min(CALLS - done) {
            let peer = peer.clone();
            set.spawn(async move {
                let params = CallToolRequestParams::new("codex".to_owned()).with_arguments(
                    mcp_support::args(json!({"prompt": "thread Q\nsay ok\ndone"})),
                );
                peer.call_tool(params).await
            });
        }
        while let Some(r) = tokio::time::timeout(Duration::from_secs(30), set.join_next())
            .await
            .unwrap_or_else(|_| {
                panic!("the server stopped answering after {done} calls (guardian stopped)")
            })
        {
            let r = r.expect("the call task").expect("a result");
            assert_ne!(r.is_error, Some(true), "{}", mcp_support::text(&r));
            done += 1;
        }
    }
    eprintln!("{CALLS} calls with a stopped guardian: {:?}", t0.elapsed());

    let pong = tokio::time::timeout(
        Duration::from_secs(5),
        peer.send_request(ClientRequest::PingRequest(Default::default())),
    )
    .await
    .expect("a ping answered within 5 s");
    assert!(matches!(pong, Ok(ServerResult::EmptyResult(_))), "{pong:?}");

    let t1 = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        s.call(
            "codex",
            json!({"prompt": "thread T\nhang", "timeout_seconds": 30}),
        ),
    )
    .await
    .expect("the timed-out call answered");
    let took = t1.elapsed();
    assert_eq!(r.is_error, Some(true));
    assert!(
        mcp_support::text(&r).starts_with("[ERROR] timeout after 30s"),
        "{}",
        mcp_support::text(&r)
    );
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_millis(600 + 200) + SLACK,
        "timeout took {took:?}"
    );

    // Closing the client's transport closes the server's stdin.
    let Server {
        mut child,
        client,
        pids,
        ..
    } = s;
    drop(peer);
    let t2 = Instant::now();
    let _ = client.cancel().await;
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the server exits after stdin EOF")
        .expect("wait");
    let took = t2.elapsed();
    eprintln!("stdin EOF to exit: {took:?}");
    assert!(took < SLACK, "exit took {took:?}");
    assert_eq!(status.code(), Some(0));

    // Reported once while serving, and once more at the end, where reaper continues it.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let reports: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("the guardian (pid"))
        .collect();
    assert_eq!(reports.len(), 2, "{text}");
    assert!(
        reports[0].contains(&format!("the guardian (pid {gpid}) is stopped"))
            && reports[0].contains("reaper serves on"),
        "{text}"
    );
    assert!(
        reports[1].contains(&format!("the guardian (pid {gpid}) is stopped"))
            && reports[1].contains("continues it"),
        "{text}"
    );

    // Continued, the guardian finds reaper gone and nothing left of it, and exits.
    drop(guardian);
    let gfd = common::pidfd_checked(gpid, gstart);
    if let Some(fd) = gfd {
        assert!(
            exited_within(&fd, SLACK),
            "the guardian did not exit once continued"
        );
    }
    let procs = mcp_support::recorded(&pids);
    assert_eq!(
        procs.iter().filter(|p| p.role == "codex").count(),
        CALLS + 1
    );
    mcp_support::assert_nothing_left(&procs, &server_cgroup, SLACK).await;
}

/// A cgroup this test creates under the cgroup2 mount, removed (with whatever is left in it,
/// children first) when dropped.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(tag: &str) -> TestCgroup {
        let mount = common::cgroup2_mount().expect("a cgroup2 mount");
        let dir = mount.join(format!("reaper-test-{tag}-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("create the test cgroup");
        TestCgroup(dir)
    }

    fn child(&self, name: &str) -> PathBuf {
        let d = self.0.join(name);
        std::fs::create_dir(&d).expect("create a cgroup in the test cgroup");
        d
    }

    /// The names of the cgroups directly in it.
    fn children(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        fn remove(d: &Path) {
            if let Ok(rd) = std::fs::read_dir(d) {
                for e in rd.flatten().filter(|e| e.path().is_dir()) {
                    remove(&e.path());
                }
            }
            let _ = std::fs::write(d.join("cgroup.kill"), "1");
            for _ in 0..200 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        remove(&self.0);
    }
}

/// A `sleep 600` of this test's, moved into `cgroup`; SIGKILLed and reaped when dropped.
struct Sleeper {
    child: std::process::Child,
    start: u64,
}

impl Sleeper {
    fn new(cgroup: Option<&Path>) -> Sleeper {
        let child = std::process::Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep starts");
        let pid = child.id() as i32;
        let start = common::stat(pid).expect("sleep's stat").1;
        if let Some(cg) = cgroup {
            std::fs::write(cg.join("cgroup.procs"), pid.to_string()).expect("move sleep");
        }
        Sleeper { child, start }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn alive(&self) -> bool {
        common::alive(self.pid(), self.start)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The guardian now finds its reaper's cgroups by name rather than by a list: `reaper mcp`
/// SIGKILLed with three calls in flight, beside another live reaper under the same
/// `--cgroup-parent`. The guardian kills and removes all three run cgroups within the README's
/// second, and leaves alone another reaper's run, a cgroup named after the same pid with
/// another start time (a reused pid), and a `reaper-kept-…` one with this reaper's name.
#[tokio::test]
async fn sigkilled_mid_calls_the_guardian_removes_exactly_its_reapers_cgroups() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let parent = TestCgroup::new("guardian-owned");
    let parent_arg = parent.0.to_string_lossy().into_owned();
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let s = start_logged(
        &["--cgroup-parent", &parent_arg],
        &tmp.path().join("stderr"),
    )
    .await;
    let server_pid = s.pid();
    let server_start = common::stat(server_pid).expect("server's stat").1;
    let (gpid, gstart) = common::guardian_of(server_pid).expect("reaper mcp runs a guardian");
    let mut calls = Vec::new();
    for i in 0..3 {
        calls.push(
            s.start_call(
                "codex",
                json!({"prompt": format!("thread C{i}\nescapee\nignore-signals\nhang")}),
            )
            .await,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.recorded().iter().filter(|p| p.role == "escapee").count() < 3 {
        assert!(Instant::now() < deadline, "three escapees within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let prefix = format!("{}{server_start}-", common::run_cgroup_prefix(server_pid));
    let runs: Vec<String> = parent
        .children()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert_eq!(runs.len(), 3, "one cgroup per call: {runs:?}");

    // Another reaper under the same parent, started after the calls. Its stale sweep runs in
    // the background once its run cgroup exists; it says when it is done, and only then are
    // the cgroups below made (a sweep would rightly take a reused pid's cgroup for stale).
    let other_log = tmp.path().join("other.log");
    let mut other = common::reaper()
        .args(["run", "--cgroup-parent", &parent_arg, "--", "sleep", "600"])
        .env("RUST_LOG", "reaper=debug")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&other_log).expect("the other reaper's log"))
        .spawn()
        .expect("another reaper starts");
    let other_prefix = common::run_cgroup_prefix(other.id());
    let other_run = || {
        parent
            .children()
            .into_iter()
            .find(|n| n.starts_with(&other_prefix))
    };
    assert!(
        common::wait_until(Duration::from_secs(10), || other_run().is_some_and(|n| {
            std::fs::read_to_string(parent.0.join(n).join("cgroup.procs"))
                .is_ok_and(|p| !p.trim().is_empty())
        })),
        "the other reaper's run cgroup holds its sleep"
    );
    let other_run = other_run().expect("the other reaper's run cgroup");
    assert!(
        common::wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&other_log).is_ok_and(|l| l.contains("stale-cgroup sweep of"))
        }),
        "the other reaper's stale sweep ends"
    );
    // Named after this server's pid, but not its: a reused pid, and a kept run.
    let reused = parent.child(&format!(
        "{}{}-0",
        common::run_cgroup_prefix(server_pid),
        server_start + 1
    ));
    let kept = parent.child(&format!(
        "reaper-kept-{}-{server_pid}-{server_start}-7",
        common::pidns()
    ));
    let in_reused = Sleeper::new(Some(&reused));
    let in_kept = Sleeper::new(Some(&kept));

    let gfd = common::pidfd_checked(gpid, gstart).expect("the guardian is alive");
    let procs = s.recorded();
    let Server { mut child, .. } = s;
    let t0 = Instant::now();
    child.start_kill().expect("SIGKILL the server");
    let _ = child.wait().await;
    let gone = common::wait_until(SLACK, || runs.iter().all(|n| !parent.0.join(n).exists()));
    let took = t0.elapsed();
    eprintln!("SIGKILL to every run cgroup removed: {took:?}");
    let left = mcp_support::wait_all_dead(&procs, SLACK).await;
    mcp_support::kill_recorded(&left);
    assert!(gone, "run cgroups left behind: {:?}", parent.children());
    assert_eq!(left, []);
    assert!(exited_within(&gfd, SLACK), "the guardian did not exit");

    // The guardian has exited: whatever it left alone stays so.
    assert!(
        parent.0.join(&other_run).exists(),
        "another reaper's run cgroup"
    );
    assert!(
        reused.exists() && in_reused.alive(),
        "a reused pid's cgroup"
    );
    assert!(kept.exists() && in_kept.alive(), "a kept cgroup");
    // The other reaper never noticed: SIGTERM ends its run normally (128 + 15).
    common::signal_child(&other, rustix::process::Signal::TERM);
    let st = common::wait_with_deadline(&mut other, Duration::from_secs(10));
    assert_eq!(st.code(), Some(143));
    assert!(!parent.0.join(&other_run).exists());
}

/// reaper `stand_in`'s guardian, started by hand (as `Guardian::spawn` does), told `dir`.
fn guardian_for(stand_in: &Sleeper, dir: &Path) -> (std::process::Child, std::process::ChildStdin) {
    let mut g = common::reaper()
        .args([
            "guardian",
            &stand_in.pid().to_string(),
            &stand_in.start.to_string(),
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("the guardian starts");
    let mut pipe = g.stdin.take().expect("piped stdin");
    let mut msg = format!("+{}", dir.display()).into_bytes();
    msg.push(0);
    std::io::Write::write_all(&mut pipe, &msg).expect("tell the guardian");
    (g, pipe)
}

/// Issue 10 item 9 (last part): reaper moves itself into `reaper-PID-START-supervisor` when its
/// cgroup has controllers enabled, and cannot remove the cgroup it lives in; nobody removed it.
/// Its guardian now does, once reaper has exited: here reaper is SIGKILLed (a stand-in process
/// plays reaper, in a supervisor leaf this test creates: ensure_leaf itself needs a controller
/// in the parent's subtree_control, and this host's cgroup2 root enables none, so the path
/// through a real reaper is tested only on hosts with controllers). Before the fix nothing
/// removed the leaf: ensure_leaf never told the guardian about it, and the guardian's
/// protocol (one record per run cgroup) had no way to.
#[test]
fn the_guardian_removes_the_supervisor_leaf_of_a_killed_reaper() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let parent = TestCgroup::new("guardian-leaf-killed");
    let mut stand_in = Sleeper::new(None);
    let leaf = parent.child(&format!(
        "{}{}-supervisor",
        common::run_cgroup_prefix(stand_in.pid()),
        stand_in.start
    ));
    std::fs::write(leaf.join("cgroup.procs"), stand_in.pid().to_string()).expect("move in");
    let (mut g, pipe) = guardian_for(&stand_in, &parent.0);
    let t0 = Instant::now();
    stand_in.kill();
    drop(pipe); // reaper's death closes its end
    let st = common::wait_with_deadline(&mut g, Duration::from_secs(10));
    eprintln!("SIGKILL to guardian exit: {:?}", t0.elapsed());
    assert_eq!(st.code(), Some(0));
    assert!(!leaf.exists(), "the supervisor leaf is removed");
    assert!(
        parent.0.exists(),
        "the directory reaper named is not the guardian's"
    );
}

/// The same after a normal end: reaper says `done` (closes the pipe) while it still lives in its
/// leaf. The guardian removes the run cgroup reaper left (survivors) at once, and the leaf only
/// once reaper has exited — never while reaper is in it.
#[test]
fn the_guardian_removes_the_supervisor_leaf_after_reaper_exits() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let parent = TestCgroup::new("guardian-leaf-done");
    let mut stand_in = Sleeper::new(None);
    let (pid, start) = (stand_in.pid(), stand_in.start);
    let leaf = parent.child(&format!(
        "{}{start}-supervisor",
        common::run_cgroup_prefix(pid)
    ));
    std::fs::write(leaf.join("cgroup.procs"), pid.to_string()).expect("move in");
    let run = parent.child(&format!("{}{start}-0", common::run_cgroup_prefix(pid)));
    let survivor = Sleeper::new(Some(&run));
    let (mut g, pipe) = guardian_for(&stand_in, &parent.0);
    drop(pipe); // `done`
    assert!(
        common::wait_until(Duration::from_secs(10), || !run.exists()),
        "the run cgroup left behind is removed at once"
    );
    assert!(!survivor.alive(), "what was left in it is killed");
    // The guardian has read the EOF and taken the run over; reaper still lives in its leaf.
    assert!(
        stand_in.alive() && leaf.exists(),
        "the leaf stays while reaper lives"
    );
    assert!(
        g.try_wait().expect("try_wait").is_none(),
        "the guardian waits for reaper"
    );
    stand_in.kill();
    let st = common::wait_with_deadline(&mut g, Duration::from_secs(10));
    assert_eq!(st.code(), Some(0));
    assert!(
        !leaf.exists(),
        "the supervisor leaf is removed once reaper has exited"
    );
    assert!(
        parent.0.exists(),
        "the directory reaper named is not the guardian's"
    );
}

/// Without a guardian (`--no-guardian`), the next reaper's stale sweep removes a supervisor leaf
/// whose reaper is gone, and leaves a live reaper's alone — in names of either form (with the
/// PID namespace, and the older one without).
#[test]
fn the_stale_sweep_removes_a_dead_reapers_supervisor_leaf() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let parent = TestCgroup::new("guardian-leaf-sweep");
    let mut dead = Sleeper::new(None);
    dead.kill();
    let leaves = |s: &Sleeper| {
        [
            format!("reaper-{}-{}-supervisor", s.pid(), s.start),
            format!(
                "{}{}-supervisor",
                common::run_cgroup_prefix(s.pid()),
                s.start
            ),
        ]
        .map(|n| parent.child(&n))
    };
    let dead_leaves = leaves(&dead);
    let live = Sleeper::new(None);
    let live_leaves = leaves(&live);
    std::fs::write(live_leaves[1].join("cgroup.procs"), live.pid().to_string()).expect("move in");
    let parent_arg = parent.0.to_string_lossy().into_owned();
    let out = common::run_reaper([
        "run",
        "--no-guardian",
        "--cgroup-parent",
        &parent_arg,
        "--",
        "true",
    ]);
    assert_eq!(common::code(&out), 0, "{}", common::stderr(&out));
    assert!(
        dead_leaves.iter().all(|l| !l.exists()),
        "a dead reaper's leaf is swept"
    );
    assert!(
        live_leaves.iter().all(|l| l.exists()) && live.alive(),
        "a live reaper's leaf is not"
    );
}

/// `sh -c` text that sets `cg` to the run cgroup's directory, as its leader sees it.
const RUN_CGROUP: &str = r#"cg="$MNT$(sed -n 's/^0:://p' /proc/self/cgroup)""#;

/// Waits (up to 10 s) for `path` to hold a line, and returns its words.
fn marker(path: &Path) -> Vec<String> {
    let mut words = Vec::new();
    assert!(
        common::wait_until(Duration::from_secs(10), || {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if !text.ends_with('\n') {
                return false;
            }
            words = text.split_whitespace().map(str::to_owned).collect();
            true
        }),
        "the hostile command never wrote {}",
        path.display()
    );
    words
}

/// Whether `/proc/locks` shows a `flock` of process `pid` on the inode `ino`: held, or waited
/// for (`->`).
fn flock_of(pid: i32, ino: u64, waiting: bool) -> bool {
    std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let w = match w.get(1) {
                Some(&"->") if waiting => &w[2..],
                Some(&"->") => return false,
                _ if waiting => return false,
                _ => &w[1..],
            };
            w.first() == Some(&"FLOCK")
                && w.get(3) == Some(&pid.to_string().as_str())
                && w.get(4)
                    .and_then(|dev_ino| dev_ino.rsplit(':').next())
                    .is_some_and(|i| i == ino.to_string())
        })
}

/// A run whose tree waits in a blocking `flock -x` on its own run cgroup's directory, under
/// `parent`, reaper's stderr going to `log`: reaper, the cgroup, and the waiter's pid and start
/// time — once the waiter is seen blocked on that directory's lock in `/proc/locks`.
fn flock_waiter_run(
    parent: &TestCgroup,
    extra: &[&str],
    tmp: &Path,
) -> (std::process::Child, PathBuf, (i32, u64)) {
    use std::os::unix::fs::MetadataExt;
    let mark = tmp.join("waiter");
    let script =
        format!("{RUN_CGROUP}; flock -x \"$cg\" sleep 600 & echo \"$! $cg\" > \"$MARK\"; wait");
    let child = common::reaper()
        .arg("run")
        .args(extra)
        .args([
            "--cgroup-parent",
            &parent.0.to_string_lossy(),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("MNT", common::cgroup2_mount().expect("a cgroup2 mount"))
        .env("MARK", &mark)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.join("stderr")).expect("a log file"))
        .spawn()
        .expect("reaper starts");
    let words = marker(&mark);
    let pid: i32 = words[0].parse().expect("the waiter's pid");
    let cg = PathBuf::from(&words[1]);
    let start = common::stat(pid).expect("the waiter runs").1;
    let ino = std::fs::metadata(&cg).expect("the run cgroup").ino();
    assert!(
        common::wait_until(Duration::from_secs(10), || flock_of(pid, ino, true)),
        "the waiter never blocked on the run cgroup's lock"
    );
    (child, cg, (pid, start))
}

/// A process of the run waits in `flock -x` on its own run cgroup. When reaper is SIGKILLed,
/// the kernel hands reaper's owner lock to that waiter, and the guardian, which trusted the
/// lock, took the cgroup for another live reaper's and left it, the tree with it. The name
/// carries reaper's PID namespace now, so the guardian knows the cgroup is its reaper's without
/// asking the lock: it kills the tree and removes the cgroup.
#[test]
fn a_flock_waiter_in_the_run_does_not_keep_the_guardian_out() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let parent = TestCgroup::new("guardian-flock");
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (mut reaper, cg, (wpid, wstart)) = flock_waiter_run(&parent, &[], tmp.path());
    let (gpid, gstart) =
        common::guardian_of(reaper.id() as i32).expect("reaper run runs a guardian");
    let gfd = common::pidfd_checked(gpid, gstart).expect("the guardian is alive");
    let t0 = Instant::now();
    common::signal_child(&reaper, rustix::process::Signal::KILL);
    let _ = reaper.wait();
    let gone = common::wait_until(Duration::from_secs(1) + SLACK, || {
        !cg.exists() && !common::alive(wpid, wstart)
    });
    eprintln!("SIGKILL to the run cgroup removed: {:?}", t0.elapsed());
    assert!(
        gone,
        "the run cgroup {} (exists: {}) or the waiter (alive: {}) outlived reaper",
        cg.display(),
        cg.exists(),
        common::alive(wpid, wstart)
    );
    assert!(exited_within(&gfd, SLACK), "the guardian did not exit");
}

/// The same attack without a guardian: the waiter holds the dead reaper's owner lock, and the
/// next reaper's stale sweep, which took a held lock for a live owner, skipped the cgroup for
/// good. A name of the sweeper's own PID namespace is decided by its owner's pid and start time
/// alone: the next reaper removes it and kills the waiter.
#[test]
fn a_flock_waiter_in_a_dead_reapers_run_does_not_keep_the_stale_sweep_out() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let parent = TestCgroup::new("sweep-flock");
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (mut reaper, cg, (wpid, wstart)) =
        flock_waiter_run(&parent, &["--no-guardian"], tmp.path());
    common::signal_child(&reaper, rustix::process::Signal::KILL);
    let _ = reaper.wait();
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&cg)
            .expect("nothing removed the run cgroup")
            .ino()
    };
    assert!(
        common::wait_until(Duration::from_secs(10), || flock_of(wpid, ino, false)),
        "the waiter never got the dead reaper's lock"
    );
    let out = common::run_reaper([
        "run",
        "--no-guardian",
        "--cgroup-parent",
        &parent.0.to_string_lossy(),
        "--",
        "true",
    ]);
    assert_eq!(common::code(&out), 0, "{}", common::stderr(&out));
    assert!(
        !cg.exists() && !common::alive(wpid, wstart),
        "the stale cgroup {} (exists: {}) or its waiter (alive: {}) survived the sweep",
        cg.display(),
        cg.exists(),
        common::alive(wpid, wstart)
    );
}

/// Continues the process behind a pidfd when dropped, whatever the test's fate, so a failing
/// test never leaves a process stopped.
struct ContinueOnDrop(OwnedFd);

impl Drop for ContinueOnDrop {
    fn drop(&mut self) {
        let _ = rustix::process::pidfd_send_signal(self.0.as_fd(), rustix::process::Signal::CONT);
    }
}

/// A contained process finds the guardian by its title and SIGSTOPs it. The stopped guardian
/// held reaper's stderr, so a caller reading reaper's output through a pipe to its end
/// (`out=$(reaper run … 2>&1)`, `subprocess.run(capture_output=True)`) waited for ever. Now the
/// guardian holds no pipe of the caller's, and reaper, when done, continues its stopped
/// guardian (and says so), which then exits.
#[test]
fn a_guardian_stopped_from_the_tree_holds_no_pipe_of_the_caller_and_ends() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (mark, go) = (tmp.path().join("stopped"), tmp.path().join("go"));
    let script = r#"
        g=
        for p in /proc/[0-9]*; do
            case "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" in
                "reaper guardian $PPID "*) g=${p#/proc/} ;;
            esac
        done
        [ -n "$g" ] || exit 3
        kill -STOP "$g" || exit 4
        i=0
        until [ "$(cut -d' ' -f3 "/proc/$g/stat")" = T ]; do
            i=$((i + 1)); [ $i -lt 1000 ] || exit 5; sleep 0.01
        done
        echo "$g T" > "$MARK"
        i=0
        until [ -e "$GO" ]; do i=$((i + 1)); [ $i -lt 1000 ] || exit 6; sleep 0.01; done
    "#;
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let mut reaper = common::reaper()
        .args(["run", "--", "sh", "-c", script])
        .env("MARK", &mark)
        .env("GO", &go)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("dup the pipe"))
        .stderr(writer)
        .spawn()
        .expect("reaper starts");
    // `2>&1` captured to its end, as `$(…)` does.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut { reader }, &mut out);
        let _ = tx.send(out);
    });
    let words = marker(&mark);
    assert_eq!(words.get(1).map(String::as_str), Some("T"), "{words:?}");
    let gpid: i32 = words[0].parse().expect("the guardian's pid");
    let gstart = common::stat(gpid).expect("the guardian").1;
    let gfd = common::pidfd_checked(gpid, gstart).expect("the guardian is alive");
    let _continue = ContinueOnDrop(gfd.try_clone().expect("dup the pidfd"));
    assert_eq!(
        common::state(gpid),
        Some('T'),
        "the tree stopped the guardian"
    );
    std::fs::write(&go, "").expect("let the command end");

    let t0 = Instant::now();
    let out = rx.recv_timeout(Duration::from_secs(10));
    let st = common::wait_with_deadline(&mut reaper, SLACK);
    let out = out.expect("the caller's pipe reached its end within 10 s");
    eprintln!("end of the command to the pipe's end: {:?}", t0.elapsed());
    assert_eq!(st.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!("the guardian (pid {gpid}) is stopped")) && out.contains("continue"),
        "reaper says it continues its stopped guardian: {out}"
    );
    assert!(
        exited_within(&gfd, SLACK),
        "the stopped guardian outlived reaper"
    );
}

/// Without `--sandbox`, a contained `kill -STOP $PPID` stopped reaper: its timeout never fired.
/// The guardian, which holds a pidfd on reaper, now sees reaper stopped without having said it
/// stops on purpose (job control), continues it and says so: the timeout fires on time.
#[test]
fn a_reaper_stopped_from_the_tree_is_continued_by_its_guardian() {
    if !common::have(common::Need::Cgroup) {
        return;
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (mark, log) = (tmp.path().join("stopped"), tmp.path().join("stderr"));
    // A busy look (no fork per turn), so the stop is seen before the guardian undoes it.
    let script = r#"
        kill -STOP "$PPID" || exit 3
        i=0
        while :; do
            read -r line < "/proc/$PPID/stat"; set -- $line
            [ "$3" = T ] && break
            i=$((i + 1)); [ $i -lt 200000 ] || { echo never > "$MARK"; exit 4; }
        done
        echo "$PPID T" > "$MARK"
        sleep 100
    "#;
    let t0 = Instant::now();
    let mut reaper = common::reaper()
        .args([
            "run",
            "--timeout",
            "2s",
            "--grace",
            "200ms",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("MARK", &mark)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("reaper starts");
    let st = common::wait_with_deadline(&mut reaper, Duration::from_secs(2) + SLACK + SLACK);
    let took = t0.elapsed();
    let words = marker(&mark);
    assert_eq!(
        words,
        [reaper.id().to_string(), "T".to_owned()],
        "the tree stopped reaper"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(st.code(), Some(124), "{text}");
    assert!(took < Duration::from_secs(2) + SLACK, "took {took:?}");
    assert!(
        text.contains(&format!("reaper (pid {}) is stopped", reaper.id())),
        "the guardian says it continued reaper: {text}"
    );
}

/// The guardian tells reaper's own job-control stops from the others by what reaper said on the
/// pipe, and bounds them: a stand-in reaper (a `sleep` of the test's, which the guardian
/// watches) is stopped after `P` (reaper is about to stop its own job) and stays stopped while
/// the job it names (another `sleep`, the stand-in leader) is stopped too; once that job runs
/// again, or the time left until the run's timeout has passed, the guardian continues it; after
/// `R` (it was continued) a stop is no longer its own, and the guardian continues it.
#[test]
fn the_guardian_leaves_a_stop_reaper_announced_only_while_it_is_a_job_stop() {
    let stand_in = Sleeper::new(None);
    let job = Sleeper::new(None);
    let fd = common::pidfd_checked(stand_in.pid(), stand_in.start).expect("sleep runs");
    let job_fd = common::pidfd_checked(job.pid(), job.start).expect("sleep runs");
    let _continue = ContinueOnDrop(fd.try_clone().expect("dup the pidfd"));
    let _continue_job = ContinueOnDrop(job_fd.try_clone().expect("dup the pidfd"));
    let mut g = common::reaper()
        .args([
            "guardian",
            &stand_in.pid().to_string(),
            &stand_in.start.to_string(),
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the guardian starts");
    let mut pipe = g.stdin.take().expect("piped stdin");
    let say = |pipe: &mut std::process::ChildStdin, rec: &[u8]| {
        std::io::Write::write_all(pipe, rec).expect("tell the guardian");
    };
    let signal = |fd: &OwnedFd, pid: i32, sig: rustix::process::Signal, want: Option<char>| {
        rustix::process::pidfd_send_signal(fd.as_fd(), sig).expect("signal a sleep");
        assert!(
            common::wait_until(Duration::from_secs(5), || match want {
                Some(w) => common::state(pid) == Some(w),
                None => common::state(pid) != Some('T'),
            }),
            "pid {pid} is {want:?}"
        );
    };
    let stop = || {
        signal(
            &fd,
            stand_in.pid(),
            rustix::process::Signal::STOP,
            Some('T'),
        )
    };
    let continued = || common::wait_until(SLACK, || common::state(stand_in.pid()) != Some('T'));
    let job_rec = format!("P{}:{} -\0", job.pid(), job.start);
    // Announced, and the job is stopped: still stopped after four of the guardian's looks.
    signal(&job_fd, job.pid(), rustix::process::Signal::STOP, Some('T'));
    say(&mut pipe, job_rec.as_bytes());
    stop();
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        common::state(stand_in.pid()),
        Some('T'),
        "an announced stop of a stopped job is left"
    );
    // The job runs again: the stop is no longer a job stop.
    signal(&job_fd, job.pid(), rustix::process::Signal::CONT, None);
    assert!(continued(), "the guardian continues a stop whose job runs");
    // Announced with a job that never stopped: continued after the grace.
    stop();
    assert!(continued(), "…and one whose job never stopped");
    // The job stopped, but the run's timeout (100 ms away) has passed.
    signal(&job_fd, job.pid(), rustix::process::Signal::STOP, Some('T'));
    say(
        &mut pipe,
        format!("P{}:{} 100\0", job.pid(), job.start).as_bytes(),
    );
    stop();
    assert!(
        continued(),
        "the guardian continues a stop past the run's timeout"
    );
    // No longer announced: continued.
    say(&mut pipe, b"R\0");
    stop();
    assert!(
        continued(),
        "the guardian continues a stop reaper did not announce"
    );
    stop();
    assert!(continued(), "…every time");
    signal(&job_fd, job.pid(), rustix::process::Signal::CONT, None);
    drop(pipe);
    let st = common::wait_with_deadline(&mut g, Duration::from_secs(10));
    assert_eq!(st.code(), Some(0));
}

/// Whether `name` is a run cgroup name (`reaper-…-SEQ` or `reaper-…-supervisor`) carrying
/// `pid` among its owner fields.
fn carries_pid(name: &str, pid: u32) -> bool {
    let fields: Vec<&str> = name.split('-').collect();
    fields.len() >= 4
        && fields[0] == "reaper"
        && fields[1..fields.len() - 1].contains(&pid.to_string().as_str())
}

/// `reaper doctor` probes by creating a run cgroup (and starting leaders in it). SIGKILLed
/// during the probe, it left that cgroup to the next reaper's stale sweep: it had no guardian.
/// Now it has one: 40 doctors, each SIGKILLed at another moment of its probe, leave nothing.
/// They live in a test cgroup of their own, so no other reaper's sweep removes what they leave.
#[test]
fn a_doctor_sigkilled_during_its_probe_leaves_no_cgroup() {
    use std::os::unix::process::CommandExt;
    if !common::have(common::Need::Cgroup) {
        return;
    }
    const TRIES: u32 = 40;
    let parent = TestCgroup::new("doctor-kill");
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(parent.0.join("cgroup.procs"))
        .expect("the test cgroup's cgroup.procs");
    let doctor = || {
        use std::os::fd::AsRawFd;
        let fd = procs.as_raw_fd();
        let mut cmd = common::reaper();
        cmd.args(["doctor", "--json", "--delegate", "never"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: write(2) of a constant into an fd opened before the fork: async-signal-safe
        // and allocation-free, as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        cmd.spawn().expect("reaper doctor starts")
    };
    // How long a whole probe takes here, to spread the kills over it.
    let t0 = Instant::now();
    let st = doctor().wait().expect("wait for doctor");
    let whole = t0.elapsed();
    assert!(st.code().is_some(), "{st:?}");
    let mut killed = Vec::new();
    let mut mid_probe = 0;
    for i in 0..TRIES {
        let mut d = doctor();
        std::thread::sleep(whole * i / TRIES);
        let had_cgroup = parent.children().iter().any(|n| carries_pid(n, d.id()));
        common::signal_child(&d, rustix::process::Signal::KILL);
        let st = d.wait().expect("wait for doctor");
        if st.code().is_none() {
            killed.push(d.id());
            mid_probe += u32::from(had_cgroup);
        }
    }
    eprintln!(
        "{} of {TRIES} doctors SIGKILLed ({mid_probe} with their run cgroup there), a probe \
         takes {whole:?}",
        killed.len()
    );
    assert!(
        mid_probe > 0,
        "no doctor was killed while its run cgroup existed"
    );
    let left = || -> Vec<String> {
        parent
            .children()
            .into_iter()
            .filter(|n| killed.iter().any(|&pid| carries_pid(n, pid)))
            .collect()
    };
    common::wait_until(Duration::from_millis(1500), || left().is_empty());
    assert_eq!(
        left(),
        Vec::<String>::new(),
        "cgroups the killed doctors left"
    );
}

/// `Guardian::exec` runs the caller's program (here the `reaper` binary's hidden command) with
/// this process's pid and start time added, and that guardian exits once told `done`.
#[test]
fn exec_runs_the_callers_program_with_this_process_named() {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_reaper"));
    cmd.arg("guardian");
    let g = reaper::Guardian::exec(cmd).expect("the guardian starts");
    let pid = g.pid();
    let me = std::process::id().to_string();
    let want = ["guardian".to_owned(), me];
    // Until its exec: the fork shows this process's command line.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if argv.len() >= 4 && argv[1..3] == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the guardian never ran: {argv:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    g.done();
    let mut status = 0;
    // SAFETY: waitpid on our own child's pid, with a valid status pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "the guardian is this process's child");
    assert!(libc::WIFEXITED(status), "the guardian exited by itself");
}

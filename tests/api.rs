//! The library's public API, used as an embedder would: only `reaper::` items, from tokio
//! runtimes of both kinds. Dropping a [`reaper::Child`] kills its whole tree; many run at once;
//! `wait` is idempotent; a panicking task's drop still kills.
//!
//! The subreaper backend needs `reaper::own_every_child()`, which changes the whole test
//! process: its test is in tests/api_owned.rs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reaper::{Command, Containment, Signal, Stdio, StopReason};

/// A shell whose grandchild leaves its session, ignores SIGTERM and writes its pid to
/// `pidfile` (the proof that it ran), then everything sleeps.
fn hostile(pidfile: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "setsid sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 600' & exec sleep 600",
            pidfile.display()
        ))
        .stdin(Stdio::Null)
        .grace(Duration::from_millis(200))
        .delegation(reaper::Delegation::Never);
    cmd
}

/// The grandchild's pid, once it wrote it.
async fn grandchild(pidfile: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the grandchild never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `pid` names a live process (not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(|c| c != 'Z' && c != 'X'))
        })
        .unwrap_or(false)
}

/// Waits up to `limit` for `pid` to die; whether it did.
async fn dies_within(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

fn cgroup_backend() -> bool {
    let ok = reaper::host::cgroup_writable();
    if !ok {
        let required = std::env::var("REAPER_REQUIRE")
            .is_ok_and(|r| r.split_whitespace().any(|n| n == "cgroup"));
        assert!(
            !required,
            "no cgroup backend, which REAPER_REQUIRE says this machine has"
        );
        eprintln!("skipped: no cgroup backend here");
    }
    ok
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// Dropping the handle kills the setsid'd, TERM-ignoring grandchild within a second, on each
/// backend this process may use (the cgroup backend where there is one, and pgid).
#[tokio::test(flavor = "current_thread")]
async fn dropping_a_child_kills_its_whole_tree_on_every_backend() {
    let mut backends = vec![Containment::Pgid];
    if cgroup_backend() {
        backends.push(Containment::Cgroup);
    }
    for backend in backends {
        let dir = scratch();
        let pidfile = dir.path().join("pid");
        let child = hostile(&pidfile)
            .containment(backend)
            .spawn()
            .await
            .expect("spawns");
        let gc = grandchild(&pidfile).await;
        assert!(alive(gc));
        let cgroup = child.cgroup();
        let t0 = Instant::now();
        drop(child);
        assert!(
            dies_within(gc, Duration::from_secs(1)).await,
            "{backend:?}: the grandchild outlived the drop"
        );
        eprintln!("{backend:?}: dead {:?} after the drop", t0.elapsed());
        // The cgroup is removed in the background, soon after.
        if let Some(cg) = cgroup {
            let deadline = Instant::now() + Duration::from_secs(5);
            while cg.exists() {
                assert!(Instant::now() < deadline, "{} left behind", cg.display());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// The same from a multi-thread runtime, the drop on a worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_child_kills_its_tree_from_a_multi_thread_runtime() {
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let child = hostile(&pidfile).spawn().await.expect("spawns");
    let gc = grandchild(&pidfile).await;
    tokio::spawn(async move { drop(child) })
        .await
        .expect("the task ends");
    assert!(dies_within(gc, Duration::from_secs(1)).await);
}

/// A handle dropped while its task panics still kills its tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_dropped_in_a_panicking_task_still_kills_its_tree() {
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let pf = pidfile.clone();
    let task = tokio::spawn(async move {
        let _child = hostile(&pf).spawn().await.expect("spawns");
        grandchild(&pf).await;
        panic!("the harness's tool call failed");
    });
    assert!(task.await.is_err(), "the task panicked");
    let gc = grandchild(&pidfile).await;
    assert!(dies_within(gc, Duration::from_secs(1)).await);
}

/// `wait` twice gives the same outcome, and `stop` after the end gives it too.
#[tokio::test(flavor = "current_thread")]
async fn wait_is_idempotent() {
    let mut child = Command::new("sh")
        .args(["-c", "exit 7"])
        .spawn()
        .await
        .expect("spawns");
    let a = child.wait().await;
    let b = child.wait().await;
    assert_eq!(a.leader_status, Some(reaper::ExitStatus::Code(7)));
    assert_eq!(a.stop_reason, StopReason::Exited);
    assert_eq!(
        (a.leader_status, a.stop_reason, a.killed, a.duration),
        (b.leader_status, b.stop_reason, b.killed, b.duration)
    );
    let c = child.stop().await;
    assert_eq!((c.leader_status, c.duration), (a.leader_status, a.duration));
}

/// `stop` ends the whole tree gracefully (TERM, the grace, then KILL for the grandchild that
/// ignores it) and says so; `kill` does it at once: the leader (`sleep`, which TERM ends) dies
/// of SIGKILL then, of SIGTERM under `stop`.
#[tokio::test(flavor = "current_thread")]
async fn stop_and_kill_end_the_whole_tree() {
    for kill in [false, true] {
        let dir = scratch();
        let pidfile = dir.path().join("pid");
        let mut child = hostile(&pidfile).spawn().await.expect("spawns");
        let gc = grandchild(&pidfile).await;
        let out = if kill {
            child.kill().await
        } else {
            child.stop().await
        };
        assert_eq!(out.stop_reason, StopReason::Cancel, "{out:?}");
        assert!(out.survivors.is_empty(), "{out:?}");
        assert!(out.killed >= 2, "the leader and the grandchild: {out:?}");
        assert!(!alive(gc));
        let first = if kill { Signal::KILL } else { Signal::TERM };
        assert_eq!(
            out.leader_status,
            Some(reaper::ExitStatus::Signal(first.as_raw())),
            "{out:?}"
        );
    }
}

/// Spawns from several threads at once (the leader's clone shares reaper's memory until its
/// exec, on a stack kept for the next spawn): each child runs its own command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawns_from_several_threads_at_once_each_run_their_own_command() {
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            tokio::spawn(async move {
                for i in 0..25 {
                    let code = t * 25 + i + 1;
                    let mut cmd = Command::new("sh");
                    cmd.args(["-c", &format!("exit {code}")]);
                    if !cgroup_backend() {
                        cmd.containment(Containment::Pgid);
                    }
                    let out = cmd.spawn().await.expect("spawns").wait().await;
                    assert_eq!(
                        out.leader_status,
                        Some(reaper::ExitStatus::Code(code)),
                        "{out:?}"
                    );
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("every spawn ran its own command");
    }
}

/// A hundred children at once in one runtime, each with its own tree: all run, stopping one
/// leaves the others, and dropping the rest kills every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_children_at_once() {
    let dir = scratch();
    let mut children = Vec::new();
    let mut pidfiles: Vec<PathBuf> = Vec::new();
    for i in 0..100 {
        let pidfile = dir.path().join(format!("pid{i}"));
        let mut cmd = hostile(&pidfile);
        if !cgroup_backend() {
            // Without cgroups, pgid keeps concurrent runs apart in this process.
            cmd.containment(Containment::Pgid);
        }
        children.push(cmd.spawn().await.expect("spawns"));
        pidfiles.push(pidfile);
    }
    let mut grandchildren = Vec::new();
    for p in &pidfiles {
        grandchildren.push(grandchild(p).await);
    }
    let mut first = children.remove(0);
    let out = first.stop().await;
    assert!(out.survivors.is_empty());
    assert!(!alive(grandchildren[0]));
    assert!(
        grandchildren[1..].iter().all(|&g| alive(g)),
        "stopping one stopped others"
    );
    drop(children);
    for &g in &grandchildren[1..] {
        assert!(
            dies_within(g, Duration::from_secs(5)).await,
            "pid {g} outlived the drop"
        );
    }
}

/// The leader's stdio is the caller's to use, as tokio's: piped stdout read to its end.
#[tokio::test(flavor = "current_thread")]
async fn piped_stdio_is_tokios() {
    use tokio::io::AsyncReadExt;
    let mut child = Command::new("sh")
        .args(["-c", "echo hello; echo to-stderr >&2"])
        .stdout(Stdio::Piped)
        .stderr(Stdio::Null)
        .spawn()
        .await
        .expect("spawns");
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .await
        .expect("reads");
    assert_eq!(out, "hello\n");
    assert_eq!(
        child.wait().await.leader_status,
        Some(reaper::ExitStatus::Code(0))
    );
}

/// Errors are typed: a missing program is `NotFound` (127), a directory `NotExecutable` (126).
#[tokio::test(flavor = "current_thread")]
async fn errors_are_typed() {
    match Command::new("/nonexistent/program").spawn().await {
        Err(e @ reaper::Error::NotFound { .. }) => assert_eq!(e.exit_code(), 127),
        other => panic!("{other:?}"),
    }
    match Command::new("/").spawn().await {
        Err(e @ reaper::Error::NotExecutable { .. }) => assert_eq!(e.exit_code(), 126),
        other => panic!("{other:?}"),
    }
    // A limit never runs without its cgroup.
    let mut cmd = Command::new("true");
    cmd.containment(Containment::Pgid).limits(reaper::Limits {
        pids_max: Some(10),
        ..Default::default()
    });
    match cmd.spawn().await {
        Err(reaper::Error::Containment(e)) => {
            assert_eq!(e.kind(), reaper::ContainErrorKind::LimitUnavailable, "{e}");
            // Which limit, and the backend that cannot hold it, as values a face words.
            match e.refusal() {
                Some(reaper::Refusal::NeedsCgroups { limits, asked }) => {
                    assert_eq!(limits.pids_max, Some(10));
                    assert_eq!(*asked, Some(reaper::BackendKind::Pgid));
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
    // The subreaper backend would take this process's other children for the run's.
    match Command::new("true")
        .containment(Containment::Subreaper)
        .spawn()
        .await
    {
        Err(reaper::Error::Containment(e)) => {
            assert_eq!(e.kind(), reaper::ContainErrorKind::ChildrenNotOwned, "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// reaper never reaps a child it did not start: the caller's own `tokio::process` child keeps
/// its exit status, however many runs start and end meanwhile.
#[tokio::test(flavor = "current_thread")]
async fn the_callers_own_children_are_left_alone() {
    let mut own = tokio::process::Command::new("sh")
        .args(["-c", "sleep 0.3; exit 3"])
        .spawn()
        .expect("the caller's own child");
    for _ in 0..5 {
        let mut c = Command::new("true").spawn().await.expect("spawns");
        c.wait().await;
    }
    let st = own.wait().await.expect("its status is still there");
    assert_eq!(st.code(), Some(3));
}

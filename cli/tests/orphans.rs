//! Orphans that reparent to reaper (it is a child subreaper) are reaped at once, whatever
//! process group or session they are in: a zombie left behind holds a pid until reaper exits,
//! and a long-running `reaper mcp` would exhaust `pid_max` that way.

mod common;
mod mcp_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{have, reaper, signal_child, wait_with_deadline, Need};
use serde_json::json;

/// How long a reaped orphan may stay a zombie of reaper: reaper reaps on SIGCHLD, so this is
/// generous slack for a loaded machine, far below "for the rest of the run".
const REAP_BOUND: Duration = Duration::from_secs(2);

/// `(pid, state)` of every child of `pid`, from `/proc/PID/task/*/children`.
fn children(pid: i32) -> Vec<(i32, char)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .filter_map(|c| common::state(c).map(|st| (c, st)))
        .collect()
}

fn zombie_children(pid: i32) -> Vec<i32> {
    children(pid)
        .into_iter()
        .filter(|&(_, st)| st == 'Z')
        .map(|(c, _)| c)
        .collect()
}

/// Waits until `pid` is no zombie child of `parent` (reaped, or never one); false after `limit`.
fn reaped_within(parent: i32, pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !zombie_children(parent).contains(&pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the pidfd is readable (the process exited).
fn wait_exit(pidfd: &std::os::fd::OwnedFd, limit: Duration) {
    let mut fds = [rustix::event::PollFd::new(
        pidfd,
        rustix::event::PollFlags::IN,
    )];
    let ts = rustix::time::Timespec {
        tv_sec: limit.as_secs() as i64,
        tv_nsec: 0,
    };
    let n = rustix::event::poll(&mut fds, Some(&ts)).expect("poll the pidfd");
    assert_eq!(n, 1, "the escapee did not exit within {limit:?}");
}

/// issue 10 item 3: `reap_orphans` waited with `waitpid(0)`, which only reaps children in
/// reaper's own process group, so an orphan in a session of its own stayed a zombie of reaper
/// for the rest of the run. `reaper run -- sh -c '(setsid … &); …'`: the setsid'd escapee
/// reparents to reaper; once it exits, reaper must reap it while the run goes on. Every backend
/// (reaper is a subreaper under each of them on Linux).
#[test]
fn a_setsid_orphan_is_reaped_while_the_run_goes_on() {
    for backend in ["cgroup", "subreaper", "pgid"] {
        if backend == "cgroup" && !have(Need::Cgroup) {
            continue;
        }
        let dir = tempfile::Builder::new()
            .prefix("reaper-test-")
            .tempdir()
            .expect("temp dir");
        let fifo = dir.path().join("fifo");
        let pidfile = dir.path().join("escapee");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .expect("mkfifo");
        // The escapee blocks reading the fifo until the test closes it, so its pid is still its
        // own when the test opens a pidfd on it; its parent (the subshell) exits at once.
        let script = format!(
            "(setsid sh -c 'exec cat {fifo} >/dev/null' & echo $! > {pid}.tmp; mv {pid}.tmp {pid}); exec sleep 60",
            fifo = fifo.display(),
            pid = pidfile.display()
        );
        let mut child = reaper()
            .args(["run", "--containment", backend, "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn reaper");
        let reaper_pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(20);
        let escapee: i32 = loop {
            if let Ok(t) = std::fs::read_to_string(&pidfile) {
                break t.trim().parse().expect("a pid");
            }
            assert!(Instant::now() < deadline, "{backend}: no escapee pid");
            std::thread::sleep(Duration::from_millis(5));
        };
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(escapee).expect("pid"),
            rustix::process::PidfdFlags::empty(),
        )
        .expect("the escapee is alive (it waits for the fifo)");
        // Opening the fifo for writing waits for the escapee's `cat`; closing it ends it.
        drop(
            std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .expect("open the fifo"),
        );
        wait_exit(&pidfd, Duration::from_secs(10));
        let reaped = reaped_within(reaper_pid, escapee, REAP_BOUND);
        let zombies = zombie_children(reaper_pid);
        signal_child(&child, rustix::process::Signal::TERM);
        wait_with_deadline(&mut child, Duration::from_secs(20));
        assert!(
            reaped,
            "{backend}: the exited escapee {escapee} is still a zombie of reaper {REAP_BOUND:?} \
             after its exit (zombie children: {zombies:?})"
        );
    }
}

/// issue 10 item 3, in `reaper mcp`: every call whose codex leaves a setsid'd escapee left one
/// permanent zombie in the server (100 calls, 100 zombies). After many such calls, the server
/// has no zombie child left.
#[tokio::test]
async fn mcp_calls_with_setsid_escapees_leave_no_zombies() {
    use mcp_support::*;
    const CALLS: usize = 30;
    let s = start(Options::default()).await;
    for i in 0..CALLS {
        let r = s
            .call(
                "codex",
                json!({"prompt": format!("thread T{i}\nescapee\ndone")}),
            )
            .await;
        assert_eq!(r.is_error, Some(false), "call {i}: {}", text(&r));
    }
    let procs = s.recorded();
    let escapees = procs.iter().filter(|p| p.role == "escapee").count();
    assert_eq!(escapees, CALLS, "{procs:?}");
    let left = wait_all_dead(&procs, Duration::from_secs(5)).await;
    kill_recorded(&left);
    assert_eq!(left, [], "survivors");
    // Every escapee is dead; none may stay a zombie of the server.
    let deadline = Instant::now() + REAP_BOUND;
    let zombies = loop {
        let z = zombie_children(s.pid());
        if z.is_empty() || Instant::now() >= deadline {
            break z;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        zombies,
        Vec::<i32>::new(),
        "zombie children of the server after {CALLS} calls with escapees"
    );
}

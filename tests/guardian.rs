//! The guardian: it must never stop reaper from serving (issue 10 item 6), it cleans up exactly
//! its own reaper's cgroups when reaper is SIGKILLed, and it removes reaper's supervisor leaf
//! once reaper has exited (issue 10 item 9, last part).

mod common;
mod mcp_support;

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_support::{Collector, Server, FAKE_CODEX, REAPER};
use rmcp::model::{CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::ServiceExt;
use serde_json::json;

/// Slack on top of every bound the promise itself sets (a shared, noisy machine).
const SLACK: Duration = Duration::from_secs(3);

/// `reaper mcp ARGS` with fake-codex, its stderr going to `log`.
async fn start_logged(args: &[&str], log: &Path) -> Server {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pids = dir.path().join("pids");
    let stderr = std::fs::File::create(log).expect("a log file");
    let mut child = tokio::process::Command::new(REAPER)
        .arg("mcp")
        .args(args)
        .env("CODEX_CMD", FAKE_CODEX)
        .env("FAKE_CODEX_PIDS", &pids)
        .env("RUST_LOG", "warn")
        .env_remove("REAPER_TIMEOUT")
        .env_remove("CODEX_CLI_MCP_SLIM_TIMEOUT")
        .env_remove("REAPER_PROGRESS_INTERVAL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("reaper mcp starts");
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let collector = Collector::default();
    let progress = collector.progress.clone();
    let client = tokio::time::timeout(Duration::from_secs(10), collector.serve((stdout, stdin)))
        .await
        .expect("initialize within 10 s")
        .expect("initialize succeeds");
    Server {
        child,
        client,
        progress,
        pids,
        dir,
    }
}

/// The guardian of reaper `pid`: its child running `reaper guardian PID START`.
fn guardian_of(pid: i32) -> Option<(i32, u64)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks.flatten() {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            let cmd = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
            if args.len() >= 3 && args[1] == b"guardian" && args[2] == pid.to_string().as_bytes() {
                return common::stat(c).map(|(_, st)| (c, st));
            }
        }
    }
    None
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
/// once. Each wait is bounded, so on the old code this test fails instead of hanging.
#[tokio::test]
async fn a_stopped_guardian_never_stops_the_server() {
    if !common::cgroup_usable() {
        eprintln!("skipped: the guardian needs the cgroup backend");
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
    let (gpid, gstart) = guardian_of(server_pid).expect("reaper mcp runs a guardian");
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

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let reports = text.matches("the guardian (pid").count();
    assert_eq!(reports, 1, "the stopped guardian is reported once:\n{text}");
    assert!(
        text.contains(&format!("the guardian (pid {gpid}) is stopped")),
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

//! Shared by the `reaper mcp` integration tests: start `reaper mcp` as a child process, talk to
//! it through the rmcp client over its stdio, drive `fake-codex`, and tell whether everything a
//! call started is dead and its cgroup gone.

#![allow(dead_code)] // each test binary uses its own part of this

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam, Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestHandle, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::process::{Child, Command};

pub use reaper_testkit::fake_codex;

pub const REAPER: &str = env!("CARGO_BIN_EXE_reaper");

/// Records every progress notification the server sends, with the time it arrived.
#[derive(Clone, Default)]
pub struct Collector {
    pub progress: Arc<Mutex<Vec<(Instant, ProgressNotificationParam)>>>,
}

impl ClientHandler for Collector {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        lock(&self.progress).push((Instant::now(), params));
    }
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running `reaper mcp` with a connected client.
pub struct Server {
    pub child: Child,
    pub client: RunningService<RoleClient, Collector>,
    pub progress: Arc<Mutex<Vec<(Instant, ProgressNotificationParam)>>>,
    /// Where fake-codex records its processes.
    pub pids: PathBuf,
    pub dir: tempfile::TempDir,
}

#[derive(Default)]
pub struct Options<'a> {
    pub args: &'a [&'a str],
    pub env: &'a [(&'a str, &'a str)],
}

/// `reaper mcp ARGS` with `CODEX_CMD=fake-codex`, initialized.
pub async fn start(opts: Options<'_>) -> Server {
    start_with_stderr(opts, Stdio::inherit()).await
}

/// [`start`], with the server's stderr going to `stderr` (a log file a test reads).
pub async fn start_with_stderr(opts: Options<'_>, stderr: Stdio) -> Server {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pids = dir.path().join("pids");
    let mut cmd = Command::new(REAPER);
    cmd.arg("mcp");
    // The sandbox's root reaches the harness's (root-only) directory only as declared.
    let sandboxed = opts
        .args
        .iter()
        .take_while(|a| **a != "--")
        .any(|a| *a == "--sandbox" || a.starts_with("--sandbox="));
    if sandboxed {
        cmd.arg("--sandbox-rw").arg(dir.path());
    }
    cmd.args(opts.args)
        .env("CODEX_CMD", fake_codex())
        .env("FAKE_CODEX_PIDS", &pids)
        .env_remove("REAPER_TIMEOUT")
        .env_remove("CODEX_CLI_MCP_SLIM_TIMEOUT")
        .env_remove("REAPER_PROGRESS_INTERVAL")
        .envs(opts.env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // A group of its own: a call that reached the server's group (the bug the tests of
        // tests/reach.rs attack) must not reach the test harness too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("reaper mcp starts");
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

pub fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("arguments are an object")
}

impl Server {
    pub async fn call(&self, tool: &str, arguments: Value) -> CallToolResult {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments));
        tokio::time::timeout(Duration::from_secs(60), self.client.call_tool(params))
            .await
            .expect("a result within 60 s")
            .expect("the call succeeds at the protocol level")
    }

    /// Starts a call without waiting for it, so it can be cancelled.
    pub async fn start_call(&self, tool: &str, arguments: Value) -> RequestHandle<RoleClient> {
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments));
        self.client
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .expect("the request is sent")
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("the server runs") as i32
    }

    /// Processes fake-codex recorded so far.
    pub fn recorded(&self) -> Vec<Proc> {
        recorded(&self.pids)
    }

    /// Waits until fake-codex recorded a process of `role`.
    pub async fn wait_for_role(&self, role: &str) -> Proc {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(p) = self.recorded().into_iter().find(|p| p.role == role) {
                return p;
            }
            assert!(Instant::now() < deadline, "no {role} recorded within 20 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One process fake-codex recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub starttime: u64,
    pub role: String,
    pub cgroup: String,
}

pub fn recorded(path: &Path) -> Vec<Proc> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some(Proc {
                pid: f.next()?.parse().ok()?,
                starttime: f.next()?.parse().ok()?,
                role: f.next()?.to_owned(),
                cgroup: f.next().unwrap_or("-").to_owned(),
            })
        })
        .collect()
}

/// Whether the process is still alive: same pid, same start time, not a zombie.
pub fn alive(p: &Proc) -> bool {
    reaper_platform::linux::procfs::is_alive(p.pid, p.starttime)
}

/// The recorded processes still alive.
pub fn survivors(procs: &[Proc]) -> Vec<Proc> {
    procs.iter().filter(|p| alive(p)).cloned().collect()
}

/// Waits up to `limit` for every recorded process to die; returns the survivors.
pub async fn wait_all_dead(procs: &[Proc], limit: Duration) -> Vec<Proc> {
    let deadline = Instant::now() + limit;
    loop {
        let s = survivors(procs);
        if s.is_empty() || Instant::now() >= deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The cgroup2 mount point, from `/proc/self/mountinfo`.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        if post.split(' ').next()? != "cgroup2" {
            return None;
        }
        pre.split(' ').nth(4).map(PathBuf::from)
    })
}

/// The cgroup (unified hierarchy path) of a process.
pub fn cgroup_of(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
}

/// The cgroups the calls ran in that still exist. A call that ran in the server's own cgroup
/// (the subreaper fallback) has no cgroup of its own to check.
pub fn leftover_cgroups(procs: &[Proc], server_cgroup: &str) -> Vec<PathBuf> {
    let Some(mount) = cgroup2_mount() else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = procs
        .iter()
        .filter(|p| p.cgroup != "-" && p.cgroup != server_cgroup)
        .map(|p| mount.join(p.cgroup.trim_start_matches('/')))
        .filter(|d| d.exists())
        .collect();
    out.dedup();
    out
}

/// Asserts that everything recorded is dead and every call cgroup removed.
pub async fn assert_nothing_left(procs: &[Proc], server_cgroup: &str, limit: Duration) {
    assert!(!procs.is_empty(), "fake-codex recorded no process");
    let s = wait_all_dead(procs, limit).await;
    assert!(s.is_empty(), "survivors: {s:?}");
    let deadline = Instant::now() + limit;
    loop {
        let left = leftover_cgroups(procs, server_cgroup);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "cgroups left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The text of a result's single text block.
pub fn text(r: &CallToolResult) -> String {
    let v = serde_json::to_value(r).expect("a result serializes");
    v["content"][0]["text"]
        .as_str()
        .expect("a text block")
        .to_owned()
}

pub fn structured(r: &CallToolResult) -> Option<Value> {
    r.structured_content.clone()
}

/// SIGKILLs whatever a failed test left (best effort; the test has already failed).
pub fn kill_recorded(procs: &[Proc]) {
    for p in survivors(procs) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid was just checked to be
        // the recorded process (same start time).
        unsafe {
            libc::kill(p.pid, libc::SIGKILL);
        }
    }
}

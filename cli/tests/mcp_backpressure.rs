//! `reaper mcp` against a client that writes requests but does not read the answers: the
//! server stops reading stdin instead of buffering (its memory stays bounded), answers every
//! call once the client reads, and still shuts down within a second on stdin EOF or SIGTERM
//! while both pipes are full. The client here is raw JSON-RPC over pipes: rmcp's own client
//! always reads, which is exactly what these tests must not do.

mod mcp_support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mcp_support::*;
use serde_json::{json, Value};

/// Beyond the one second the shutdown promise gives: these machines are shared and noisy.
const SLACK: Duration = Duration::from_secs(2);
const MIB: usize = 1 << 20;

/// `reaper mcp ARGS` on raw pipes, with `CODEX_CMD=fake-codex`.
struct Raw {
    child: Child,
    stdout: BufReader<ChildStdout>,
    pids: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Raw {
    /// Starts the server and completes the MCP handshake (reading only its answer).
    fn start(args: &[&str]) -> (Raw, ChildStdin) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let pids = dir.path().join("pids");
        let mut child = Command::new(REAPER)
            .arg("mcp")
            .args(args)
            .env("CODEX_CMD", fake_codex())
            .env("FAKE_CODEX_PIDS", &pids)
            .env_remove("REAPER_TIMEOUT")
            .env_remove("CODEX_CLI_MCP_SLIM_TIMEOUT")
            .env_remove("REAPER_PROGRESS_INTERVAL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("reaper mcp starts");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut raw = Raw {
            child,
            stdout,
            pids,
            _dir: dir,
        };
        let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}});
        writeln!(stdin, "{init}").expect("initialize is written");
        let answer = raw.next_message().expect("an answer to initialize");
        assert_eq!(answer["id"], "init", "{answer}");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        writeln!(stdin, "{initialized}").expect("initialized is written");
        (raw, stdin)
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn next_line(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    }

    fn next_message(&mut self) -> Option<Value> {
        let line = self.next_line()?;
        Some(serde_json::from_str(&line).expect("a JSON-RPC message"))
    }

    /// Waits up to `limit` for the server to exit.
    fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_recorded(&recorded(&self.pids));
    }
}

/// A call that hangs with an escapee that ignores signals, with `timeout_seconds: 30`, asking
/// for progress notifications (which the client does not read either).
fn hanging_call(id: usize) -> Vec<u8> {
    let prompt = format!("thread T{id}\nescapee\nignore-signals\nhang");
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "codex", "arguments": {"prompt": prompt, "timeout_seconds": 30},
        "_meta": {"progressToken": id}}});
    let mut line = serde_json::to_vec(&call).expect("a request serializes");
    line.push(b'\n');
    line
}

/// A `tools/call` of `codex` with id `id`: fake-codex starts thread `T<id>`, answers with the
/// whole prompt (so the result is as big as the request), and exits before it reaches the
/// `pad` bytes of padding.
fn echo_call(id: usize, script: &str, pad: usize) -> Vec<u8> {
    let prompt = format!("thread T{id}\n{script}\nexit 0\n{}", "x".repeat(pad));
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "codex", "arguments": {"prompt": prompt}}});
    let mut line = serde_json::to_vec(&call).expect("a request serializes");
    line.push(b'\n');
    line
}

/// Writes `n` requests from a thread of its own, non-blocking, so the test sees the server's
/// back-pressure (`blocked`: the pipe is full) and can close stdin (`stop`) while a write is
/// pending.
struct Writer {
    written: Arc<AtomicUsize>,
    blocked: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    fn start(
        stdin: ChildStdin,
        n: usize,
        request: impl Fn(usize) -> Vec<u8> + Send + 'static,
    ) -> Writer {
        let fd = stdin.as_raw_fd();
        // SAFETY: fcntl(2) on a descriptor this test owns; only its flags change.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        let written = Arc::new(AtomicUsize::new(0));
        let blocked = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, b, s) = (written.clone(), blocked.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut stdin = stdin;
            for i in 1..=n {
                let line = request(i);
                let mut rest = &line[..];
                while !rest.is_empty() {
                    if s.load(Ordering::SeqCst) {
                        return; // drops stdin: the server sees EOF
                    }
                    match stdin.write(rest) {
                        Ok(k) => {
                            b.store(false, Ordering::SeqCst);
                            rest = &rest[k..];
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            b.store(true, Ordering::SeqCst);
                            let mut pfd = libc::pollfd {
                                fd,
                                events: libc::POLLOUT,
                                revents: 0,
                            };
                            // SAFETY: one valid pollfd, owned by this frame.
                            unsafe { libc::poll(&mut pfd, 1, 20) };
                        }
                        Err(_) => return, // the server is gone
                    }
                }
                w.store(i, Ordering::SeqCst);
            }
            while !s.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Writer {
            written,
            blocked,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes the server's stdin, waiting for the thread to let go of it.
    fn close(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}

/// `VmHWM` (peak resident memory) of a process, in KiB.
fn peak_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .expect("VmHWM in /proc/PID/status")
}

/// User plus system CPU time of a process.
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|t| t.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// Waits until the server has done all it will do for a client that does not read: either it
/// read every request (the writer is done) and every codex it started has exited, or the
/// writer is blocked on a full pipe and every codex started so far has exited, with no new
/// one for a while. Only decides when the test starts reading: the memory bound is asserted
/// on the peak over the whole test.
fn wait_until_settled(raw: &Raw, writer: &Writer, total: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut seen, mut quiet_since) = (usize::MAX, Instant::now());
    loop {
        let procs = recorded(&raw.pids);
        let all_done = survivors(&procs).is_empty();
        if procs.len() != seen {
            (seen, quiet_since) = (procs.len(), Instant::now());
        }
        let read_everything = writer.written.load(Ordering::SeqCst) == total && seen == total;
        let held_back = writer.blocked.load(Ordering::SeqCst)
            && quiet_since.elapsed() > Duration::from_millis(500);
        if all_done && (read_everything || held_back) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not settle in 120 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 10 item 5: `reaper mcp` read every request as it came, ran a task per request and
/// kept every finished result until it was written, so a client that sent 240 calls with a
/// 1 MiB prompt (echoed back) and did not read grew it to ~550 MiB. Now the server stops
/// reading while its in-flight bound is full: the client's writes block, the server's peak
/// stays under 64 MiB, and every call is answered once the client reads.
#[tokio::test]
async fn a_client_that_does_not_read_is_held_back_not_buffered() {
    const CALLS: usize = 240;
    let (mut raw, stdin) = Raw::start(&[]);
    let pid = raw.pid();
    let server_cgroup = cgroup_of(pid).unwrap_or_default();
    let t0 = Instant::now();
    let mut writer = Writer::start(stdin, CALLS, |i| echo_call(i, "prompt\ndone", MIB));

    wait_until_settled(&raw, &writer, CALLS);
    let held_at = writer.written.load(Ordering::SeqCst);
    let peak_held = peak_kib(pid);
    eprintln!(
        "not reading: {held_at} of {CALLS} requests written, {} codex started, peak {} MiB \
         ({:?})",
        recorded(&raw.pids).len(),
        peak_held / 1024,
        t0.elapsed()
    );

    // Now read: every call is answered, once, with its own thread and the echoed prompt.
    // (Results are 2 MiB each: checked as text, parsing 480 MiB of JSON in a debug build is
    // what would take the time.)
    let mut answered = BTreeSet::new();
    while answered.len() < CALLS {
        let line = raw
            .next_line()
            .expect("the server answers every call before it stops");
        let Some(id) = line
            .strip_prefix(r#"{"jsonrpc":"2.0","id":"#)
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        else {
            continue; // a notification
        };
        assert!(line.len() > 2 * MIB, "call {id}: {line:.300}");
        assert!(
            line.contains(r#""isError":false"#),
            "call {id}: {line:.300}"
        );
        assert!(
            line.contains(&format!(r#""threadId":"T{id}""#)),
            "call {id}: {line:.300}"
        );
        assert!(answered.insert(id), "call {id} answered twice");
    }
    assert_eq!(answered, (1..=CALLS as u64).collect::<BTreeSet<_>>());
    let peak = peak_kib(pid);
    eprintln!(
        "after reading everything: peak {} MiB ({:?}, server CPU {:?})",
        peak / 1024,
        t0.elapsed(),
        cpu_time(pid)
    );

    writer.close();
    let status = raw.wait_exit(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "exit on stdin EOF");
    let procs = recorded(&raw.pids);
    assert_eq!(procs.len(), CALLS, "one codex per call");
    assert_nothing_left(&procs, &server_cgroup, SLACK).await;
    assert!(
        peak < 64 * 1024,
        "peak memory {} MiB (while held back: {} MiB)",
        peak / 1024,
        peak_held / 1024
    );
    assert!(
        held_at < CALLS,
        "the server read all {CALLS} requests without any being answered"
    );
}

/// Fills both pipes (stdout with answers nobody reads, stdin with requests the server holds
/// back) while two calls hang (with `timeout_seconds: 30`, each second lasting `unit`).
fn jammed(unit: &str) -> (Raw, Writer) {
    let (raw, stdin) = Raw::start(&[
        "--max-concurrent",
        "2",
        "--grace",
        "200ms",
        "--progress-interval",
        "100ms",
        "--test-timeout-unit",
        unit,
    ]);
    // The first answers (1 MiB each) fill stdout; then two hanging calls hold both slots; the
    // rest wait behind them, and the requests behind those wait in stdin.
    let writer = Writer::start(stdin, 200, |i| {
        if i == 5 || i == 6 {
            hanging_call(i)
        } else {
            echo_call(i, "prompt\ndone", MIB)
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let procs = recorded(&raw.pids);
        let escapees = procs.iter().filter(|p| p.role == "escapee").count();
        let codexes = procs.iter().filter(|p| p.role == "codex").count();
        if writer.blocked.load(Ordering::SeqCst) && escapees == 2 && codexes >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "stdin did not fill within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(writer.written.load(Ordering::SeqCst) < 200);
    (raw, writer)
}

/// While the server holds a client back, a call's timeout is still enforced: its tree (an
/// escapee that ignores signals) is killed at timeout + grace, though the client reads nothing.
#[tokio::test]
async fn timeouts_are_enforced_while_the_client_does_not_read() {
    // timeout_seconds 30 lasts 3 s; the grace is 200 ms.
    let (mut raw, mut writer) = jammed("100ms");
    let cgroup = cgroup_of(raw.pid()).unwrap_or_default();
    let escapees: Vec<Proc> = recorded(&raw.pids)
        .into_iter()
        .filter(|p| p.role == "escapee")
        .collect();
    let left = wait_all_dead(&escapees, Duration::from_secs(3) + SLACK).await;
    assert_eq!(left, [], "escapees alive past their timeout");
    assert!(
        writer.written.load(Ordering::SeqCst) < 200,
        "the client was never held back"
    );
    writer.close();
    let status = raw.wait_exit(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "exit on stdin EOF");
    assert_nothing_left(&recorded(&raw.pids), &cgroup, SLACK).await;
}

/// Issue 10 item 5: while the server holds a client back (stdin full, stdout full, calls
/// running), closing stdin still kills every call's tree and ends the server within a second;
/// the answers nobody reads do not hold it.
#[tokio::test]
async fn stdin_eof_ends_a_jammed_server_within_a_second() {
    let (mut raw, mut writer) = jammed("1s");
    let cgroup = cgroup_of(raw.pid()).unwrap_or_default();
    let procs = recorded(&raw.pids);
    let t0 = Instant::now();
    writer.close();
    let status = raw.wait_exit(Duration::from_secs(10));
    let took = t0.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "exit on stdin EOF");
    assert!(took < Duration::from_secs(1) + SLACK, "exit took {took:?}");
    assert_nothing_left(&procs, &cgroup, SLACK).await;
}

/// The same for SIGTERM.
#[tokio::test]
async fn sigterm_ends_a_jammed_server_within_a_second() {
    let (mut raw, _writer) = jammed("1s");
    let cgroup = cgroup_of(raw.pid()).unwrap_or_default();
    let procs = recorded(&raw.pids);
    let t0 = Instant::now();
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our live child.
    unsafe {
        libc::kill(raw.pid(), libc::SIGTERM);
    }
    let status = raw.wait_exit(Duration::from_secs(10));
    let took = t0.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(143), "exit on SIGTERM");
    assert!(took < Duration::from_secs(1) + SLACK, "exit took {took:?}");
    assert_nothing_left(&procs, &cgroup, SLACK).await;
}

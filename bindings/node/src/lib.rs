//! The Node.js addon behind the npm package `reaper-process`: `reaper::Command` and
//! `reaper::Child` as JavaScript sees them, through `index.js` (which shapes them like
//! `child_process`). Everything here is a thin layer over the library's public API.
//!
//! One tokio runtime of the addon's own, made at the first spawn, runs every child: a `Child`
//! is used only from the runtime that spawned it. The JavaScript thread never waits on it but
//! for the spawn itself (as `child_process.spawn` forks on that thread).

use std::os::fd::{IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use reaper::supervise::{Escalation, Plan, Request, Sender, StopSpec, Target};
use reaper::{ExitStatus, Guardian, Limits, Outcome, Sandbox, Signal, Stdio};
use serde_json::{json, Value};

/// The addon's runtime (or why it could not be made).
static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();

fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("reaper-node")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the tokio runtime of reaper-process: {e}"))
        })
        .as_ref()
        .map_err(|e| Error::from_reason(e.clone()))
}

/// This process's guardian, once started; `None` again after [`guardian_done`].
static GUARDIAN: Mutex<Option<Arc<Guardian>>> = Mutex::new(None);

fn guardian() -> Option<Arc<Guardian>> {
    GUARDIAN.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Starts this process's guardian, once: `program` run with `args` and then this process's pid
/// and start time, which it must pass to [`guardian_serve`]. Returns the guardian's pid.
#[napi]
pub fn guardian_start(program: String, args: Vec<String>) -> Result<i32> {
    let mut slot = GUARDIAN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(g) = slot.as_ref() {
        return Ok(g.pid());
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    let g = Guardian::exec(cmd)
        .map_err(|e| Error::from_reason(format!("cannot start reaper's guardian: {e}")))?;
    let pid = g.pid();
    *slot = Some(g);
    Ok(pid)
}

/// The guardian process itself (what the guardian script runs): blocks until the process
/// `pid` (started at `start`) is gone, cleans up after it, and returns the exit status.
#[napi]
pub fn guardian_serve(pid: String, start: String) -> Result<u32> {
    let bad = |what: &str, v: &str| Error::from_reason(format!("guardian: bad {what} {v:?}"));
    let p: i32 = pid.parse().map_err(|_| bad("pid", &pid))?;
    let s: u64 = start.parse().map_err(|_| bad("start time", &start))?;
    Ok(u32::from(Guardian::serve(p, s)))
}

/// This process is ending normally: the guardian removes what is left and exits. Later spawns
/// run without one.
#[napi]
pub fn guardian_done() {
    let g = GUARDIAN.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(g) = g {
        g.done();
    }
}

/// The guardian's pid, if one runs.
#[napi]
pub fn guardian_pid() -> Option<i32> {
    guardian().map(|g| g.pid())
}

/// What `index.js` passes to [`spawn`].
#[napi(object)]
pub struct SpawnOptions {
    pub file: String,
    pub args: Vec<String>,
    pub cwd: Option<String>,
    /// `KEY=VALUE` entries: the whole environment (none given: this process's).
    pub env: Option<Vec<String>>,
    /// Per fd 0, 1, 2: -1 a pipe, -2 this process's, -3 /dev/null, N ≥ 0 a copy of fd N.
    pub stdio: Vec<i32>,
    pub timeout_ms: Option<f64>,
    pub grace_ms: Option<f64>,
    /// The first signal of a stop (SIGTERM unless given).
    pub kill_signal: Option<i32>,
    pub memory_max: Option<f64>,
    pub pids_max: Option<f64>,
    pub cpus: Option<f64>,
    /// "on" or "pid".
    pub sandbox: Option<String>,
    /// Whether the run is covered by this process's guardian (when one runs).
    pub guardian: Option<bool>,
    /// The command may use this process's terminal as a foreground job does.
    pub foreground: Option<bool>,
}

/// What [`NativeChild::wait`] calls with the outcome.
type Done = ThreadsafeFunction<String, (), String, Status, false>;

/// A running command and its tree.
#[napi]
pub struct NativeChild {
    pid: u32,
    sender: Sender,
    /// Our ends of the pipes, until `index.js` takes them.
    pipes: [Option<OwnedFd>; 3],
    /// The callback of the wait task ([`NativeChild::wait`]), until it is called.
    waiter: Arc<Mutex<Option<Done>>>,
    /// Parked here until [`NativeChild::wait`] moves it into the wait task.
    child: Option<reaper::Child>,
    /// The run is over (its outcome is sent): requests go nowhere.
    over: Arc<AtomicBool>,
    backend: String,
    cgroup: Option<String>,
    warning: Option<String>,
}

/// The child's fd `i` as `n` says (see [`SpawnOptions::stdio`]); for a pipe, our end goes
/// to `ours`.
fn stdio_of(i: usize, n: i32, ours: &mut Option<OwnedFd>) -> Result<Stdio> {
    Ok(match n {
        -1 => {
            let (r, w) = pipe()?;
            // The child reads its fd 0 and writes 1 and 2.
            let (theirs, mine) = if i == 0 { (r, w) } else { (w, r) };
            *ours = Some(mine);
            Stdio::Fd(theirs)
        }
        -2 => Stdio::Inherit,
        -3 => Stdio::Null,
        fd if fd >= 0 => {
            // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes no pointer; on a descriptor that is not
            // open it fails with EBADF, which is returned.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if dup < 0 {
                return Err(Error::from_reason(format!(
                    "stdio: fd {fd}: {}",
                    std::io::Error::last_os_error()
                )));
            }
            // SAFETY: `dup` was just made by fcntl: open, and owned by nobody else.
            Stdio::Fd(unsafe { std::os::fd::FromRawFd::from_raw_fd(dup) })
        }
        other => return Err(Error::from_reason(format!("stdio: bad value {other}"))),
    })
}

/// A pipe, both ends close-on-exec (the child's end is dup'd onto its fd by the spawn).
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::from_reason(format!(
            "cannot create a pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: pipe2 succeeded: both are open descriptors owned by nobody else.
    Ok(unsafe {
        use std::os::fd::FromRawFd;
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    })
}

fn signal(n: i32) -> Result<Signal> {
    Signal::from_named_raw(n).ok_or_else(|| Error::from_reason(format!("unknown signal {n}")))
}

fn ms(v: f64, what: &str) -> Result<Duration> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(Error::from_reason(format!(
            "{what} must be a finite number of milliseconds ≥ 0"
        )));
    }
    Ok(Duration::from_secs_f64(v / 1000.0))
}

/// A failed spawn as `index.js` turns it into an `Error`: JSON with the errno name Node would
/// give (`ENOENT`…), the library's kind and message, and timeout(1)'s status.
fn spawn_error(e: &reaper::Error) -> Error {
    let (code, kind) = match e {
        reaper::Error::NotFound { .. } => ("ENOENT", "NotFound"),
        reaper::Error::NotExecutable { source, .. } => (
            match source.raw_os_error() {
                Some(libc::ENOEXEC) => "ENOEXEC",
                Some(libc::EISDIR) => "EISDIR",
                Some(libc::ENOTDIR) => "ENOTDIR",
                _ => "EACCES",
            },
            "NotExecutable",
        ),
        reaper::Error::TooLarge { .. } => ("E2BIG", "TooLarge"),
        reaper::Error::Containment(_) => ("ERR_REAPER_CONTAINMENT", "Containment"),
        reaper::Error::Sandbox(_) => ("ERR_REAPER_SANDBOX", "Sandbox"),
        reaper::Error::JoinFailed { .. } => ("ERR_REAPER_CONTAINMENT", "JoinFailed"),
        reaper::Error::NoPidfd { .. } => ("ERR_REAPER_SPAWN", "NoPidfd"),
        _ => ("ERR_REAPER_SPAWN", "Spawn"),
    };
    let errno = e.exec_error().and_then(|x| x.raw_os_error());
    Error::from_reason(
        json!({
            "code": code,
            "kind": kind,
            "errno": errno,
            "exitCode": e.exit_code(),
            "message": e.to_string(),
        })
        .to_string(),
    )
}

/// Starts a command as `opts` says. Blocks the JavaScript thread for the spawn only.
#[napi]
pub fn spawn(opts: SpawnOptions) -> Result<NativeChild> {
    let rt = runtime()?;
    let mut cmd = reaper::Command::new(&opts.file);
    cmd.args(&opts.args);
    if let Some(dir) = &opts.cwd {
        cmd.current_dir(dir);
    }
    if let Some(env) = &opts.env {
        cmd.env_clear();
        for kv in env {
            match kv.split_once('=') {
                Some((k, v)) => cmd.env(k, v),
                None => cmd.env(kv, ""),
            };
        }
    }
    let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
    if opts.stdio.len() != 3 {
        return Err(Error::from_reason("stdio: three entries expected"));
    }
    for (i, n) in opts.stdio.iter().enumerate() {
        let io = stdio_of(i, *n, &mut ours[i])?;
        match i {
            0 => cmd.stdin(io),
            1 => cmd.stdout(io),
            _ => cmd.stderr(io),
        };
    }
    // The stop: `killSignal` to the whole tree, the grace, then SIGKILL. A stop asked for
    // with another signal (`kill(sig)`) sends that one instead: a timeout(1)-style
    // escalation whose wait for the leader is bounded by the grace, after which what is left
    // gets the rest of the grace.
    let grace = match opts.grace_ms {
        Some(g) => ms(g, "grace")?,
        None => reaper::DEFAULT_GRACE,
    };
    let first = match opts.kill_signal {
        Some(n) => signal(n)?,
        None => Signal::TERM,
    };
    let mut plan = Plan::new(StopSpec {
        first: Some(first),
        to: Target::Tree,
        grace,
    });
    plan.timeout = opts.timeout_ms.map(|t| ms(t, "timeout")).transpose()?;
    plan.escalation = Escalation::AfterLeader {
        kill_after: Some(grace),
        foreground: false,
        announce: None,
    };
    cmd.plan(plan);
    let limits = Limits {
        memory_max: opts.memory_max.map(|v| v as u64),
        pids_max: opts.pids_max.map(|v| v as u64),
        cpus: opts.cpus,
    };
    if !limits.is_empty() {
        cmd.limits(limits);
    }
    match opts.sandbox.as_deref() {
        None => {}
        Some("on") => {
            cmd.sandbox(Some(Sandbox::On));
        }
        Some("pid") => {
            cmd.sandbox(Some(Sandbox::Pid));
        }
        Some(other) => {
            return Err(Error::from_reason(format!(
                "sandbox: {other:?} is not \"on\" nor \"pid\""
            )))
        }
    }
    if opts.foreground == Some(true) {
        cmd.foreground(true);
    }
    if opts.guardian.unwrap_or(true) {
        if let Some(g) = guardian() {
            cmd.guardian(g);
        }
    }
    let child = rt.block_on(cmd.spawn()).map_err(|e| spawn_error(&e))?;
    // The child's ends were moved into the command and closed with it: only ours are left.
    drop(cmd);
    Ok(NativeChild {
        pid: child.id(),
        sender: child.sender(),
        pipes: ours,
        waiter: Arc::new(Mutex::new(None)),
        backend: child
            .backend()
            .map(|b| b.as_str().to_owned())
            .unwrap_or_default(),
        cgroup: child.cgroup().map(|p| p.display().to_string()),
        warning: child.warning().map(|e| e.to_string()),
        child: Some(child),
        over: Arc::new(AtomicBool::new(false)),
    })
}

#[napi]
impl NativeChild {
    /// The leader's pid.
    #[napi(getter)]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The containment the run got: "cgroup", "subreaper" or "pgid".
    #[napi(getter)]
    pub fn backend(&self) -> String {
        self.backend.clone()
    }

    /// The run's cgroup, for the cgroup backend.
    #[napi(getter)]
    pub fn cgroup(&self) -> Option<String> {
        self.cgroup.clone()
    }

    /// Why the containment is weaker than asked (`Auto`'s fallback), if it is.
    #[napi(getter)]
    pub fn warning(&self) -> Option<String> {
        self.warning.clone()
    }

    /// Our ends of the pipes, for fd 0, 1 and 2 (-1 where there is none): from now on
    /// JavaScript owns them (it wraps each in a `net.Socket`).
    #[napi]
    pub fn take_pipes(&mut self) -> Vec<i32> {
        self.pipes
            .iter_mut()
            .map(|p| p.take().map_or(-1, IntoRawFd::into_raw_fd))
            .collect()
    }

    /// Runs the run to its end on the addon's runtime, then calls `done` with the outcome
    /// (JSON). Once only.
    #[napi]
    pub fn wait(&mut self, done: Done) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Err(Error::from_reason("wait: already waiting"));
        };
        let rt = runtime()?;
        let over = Arc::clone(&self.over);
        *self.waiter.lock().unwrap_or_else(|p| p.into_inner()) = Some(done);
        let waiter = Arc::clone(&self.waiter);
        rt.spawn(async move {
            let outcome = child.wait().await;
            over.store(true, Ordering::SeqCst);
            let done = waiter.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(done) = done {
                done.call(
                    outcome_json(&outcome).to_string(),
                    ThreadsafeFunctionCallMode::NonBlocking,
                );
            }
            // The child (its containment released) is dropped here, on its own runtime.
        });
        Ok(())
    }

    /// Asks for the run's end: SIGKILL (9) kills the whole tree now; any other signal goes to
    /// the whole tree, then the grace, then SIGKILL. False once the run is over.
    #[napi]
    pub fn kill(&self, sig: i32) -> Result<bool> {
        if self.over.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let req = if sig == libc::SIGKILL {
            Request::Kill
        } else {
            Request::Signal(signal(sig)?)
        };
        Ok(self.sender.send(req))
    }

    /// Whether the wait keeps Node's event loop alive (as `child.ref()`/`unref()` do).
    #[napi]
    #[allow(deprecated)] // `refer`/`unref` are napi's way to (un)reference a tsfn later on
    pub fn set_ref(&mut self, env: Env, on: bool) -> Result<()> {
        let mut waiter = self.waiter.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = waiter.as_mut() {
            if on {
                w.refer(&env)?;
            } else {
                w.unref(&env)?;
            }
        }
        Ok(())
    }
}

impl Drop for NativeChild {
    /// Garbage collection of the handle kills the tree, as dropping a `reaper::Child` does.
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            // Never waited for: the `Child` is dropped on its runtime (one SIGKILL for the
            // tree, the containment removed in the background).
            if let Ok(rt) = runtime() {
                let _guard = rt.enter();
                drop(child);
            }
        } else if !self.over.load(Ordering::SeqCst) {
            self.sender.send(Request::Kill);
        }
    }
}

fn status_json(st: Option<ExitStatus>) -> (Value, Value) {
    match st {
        Some(ExitStatus::Code(c)) => (json!(c), Value::Null),
        Some(ExitStatus::Signal(s)) => (Value::Null, json!(s)),
        _ => (Value::Null, Value::Null),
    }
}

fn process_json(p: &reaper::Process) -> Value {
    json!({ "pid": p.pid, "starttime": p.starttime.to_string(), "comm": p.comm })
}

fn usage_json(u: &reaper::Usage) -> Value {
    json!({
        "memoryPeakBytes": u.memory_peak_bytes,
        "oomKill": u.oom_kill,
        "oomGroupKill": u.oom_group_kill,
        "pidsMaxEvents": u.pids_max_events,
        "cpuUsageUsec": u.cpu_usage_usec,
        "cpuNrThrottled": u.cpu_nr_throttled,
        "cpuThrottledUsec": u.cpu_throttled_usec,
    })
}

fn outcome_json(o: &Outcome) -> Value {
    let (code, signal) = status_json(o.leader_status);
    let secs = |d: Duration| d.as_secs_f64() * 1000.0;
    json!({
        "argv": o.argv,
        "backend": o.backend.as_str(),
        "cgroup": o.cgroup.as_ref().map(|p| p.display().to_string()),
        "leaderPid": o.leader_pid,
        "exitCode": code,
        "signalNumber": signal,
        "stopReason": serde_json::to_value(o.stop_reason).unwrap_or(Value::Null),
        "receivedSignalNumber": o.received_signal.map(|s| s.as_raw()),
        "durationMs": secs(o.duration),
        "leaderRanMs": o.leader_ran.map(secs),
        "teardownMs": secs(o.teardown),
        "killed": o.killed,
        "survivors": o.survivors.iter().map(process_json).collect::<Vec<_>>(),
        "escapees": o.escapees.iter().map(|e| {
            let mut v = process_json(&e.process);
            v["to"] = json!(e.to);
            v
        }).collect::<Vec<_>>(),
        "error": o.error.as_ref().map(|e| e.to_string()),
        "guardianPid": o.guardian_pid,
        "limits": o.limits.map(|l| json!({
            "memoryMax": l.memory_max, "pidsMax": l.pids_max, "cpus": l.cpus,
        })),
        "usage": o.usage.as_ref().map(usage_json),
        "exitStatus": o.exit_code(true),
    })
}

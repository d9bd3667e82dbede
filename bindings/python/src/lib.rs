//! `reaper._native`: the reaper library for Python. The Python package (`reaper`) builds its
//! API (`run`, `Popen`, `reaper.asyncio`, `reaper.mcp`) on these few primitives:
//!
//! - `spawn(...)` starts a command contained and returns a `Run`, whose `reaper::Child` lives
//!   on this process's one tokio runtime, driven there by a task of its own;
//! - a `Run` is waited for (blocking, the GIL released), polled, stopped, killed, signalled,
//!   or watched through a descriptor that becomes readable at its end (for an event loop);
//! - dropping a `Run` (its Python object collected) drops the `Child`: its whole tree is killed;
//! - the guardian: `start_guardian(argv)` execs it (`Guardian::exec`), `guardian_serve` is what
//!   that program calls, `guardian_done` ends it at a normal exit.
//!
//! A process forked from the one that created the runtime has neither its threads nor its
//! runs: every call there fails with `ForkedError` instead of hanging.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::IntoPyObjectExt;
use tokio::sync::{mpsc, oneshot};

create_exception!(
    _native,
    NativeError,
    PyException,
    "A typed error of the reaper library: args are (kind, message, details dict)."
);
create_exception!(
    _native,
    ForkedError,
    PyException,
    "This process was forked from the one whose runtime and runs these are."
);

/// The runtime every `Child` of this process lives on, and the process that created it.
static RUNTIME: OnceLock<(tokio::runtime::Runtime, u32)> = OnceLock::new();
/// The guardian this process started, and the process that started it.
static GUARDIAN: Mutex<Option<(Arc<reaper::Guardian>, u32)>> = Mutex::new(None);
/// The runs alive in this process, for `shutdown` (the interpreter's exit).
static LIVE: Mutex<Vec<std::sync::Weak<Shared>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn forked() -> PyErr {
    ForkedError::new_err(
        "this process was forked after reaper started its runtime here: its runs and threads \
         stayed in the parent; start reaper's runs in the parent, or before forking start none",
    )
}

fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    let (rt, pid) = RUNTIME.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("reaper-runtime")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("reaper: cannot start a tokio runtime: {e}"));
        (rt, std::process::id())
    });
    if *pid != std::process::id() {
        return Err(forked());
    }
    Ok(rt)
}

fn native_err(kind: &str, message: String, details: Vec<(&str, PyObject)>) -> PyErr {
    Python::attach(|py| {
        let d = PyDict::new(py);
        for (k, v) in details {
            let _ = d.set_item(k, v);
        }
        NativeError::new_err((kind.to_string(), message, d.unbind()))
    })
}

type PyObject = Py<PyAny>;

fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> PyObject {
    v.into_py_any(py).unwrap_or_else(|_| py.None())
}

fn contain_kind(k: reaper::ContainErrorKind) -> String {
    // Debug of a unit variant is its name: the Python side maps it as it is.
    format!("{k:?}")
}

fn spawn_error(e: reaper::Error) -> PyErr {
    let message = e.to_string();
    Python::attach(|py| {
        let errno = |s: &std::io::Error| obj(py, s.raw_os_error());
        let contain = |c: &reaper::ContainError| {
            vec![
                ("contain_kind", obj(py, contain_kind(c.kind()))),
                ("what", obj(py, c.what().to_string())),
                (
                    "path",
                    obj(py, c.path().map(|p| p.to_string_lossy().into_owned())),
                ),
                ("errno", obj(py, c.raw_os_error())),
            ]
        };
        let (kind, details): (&str, Vec<(&str, PyObject)>) = match &e {
            reaper::Error::NotFound { program } => {
                ("NotFound", vec![("program", obj(py, program.clone()))])
            }
            reaper::Error::NotExecutable { program, source } => (
                "NotExecutable",
                vec![
                    ("program", obj(py, program.clone())),
                    ("errno", errno(source)),
                ],
            ),
            reaper::Error::TooLarge { program, source } => (
                "TooLarge",
                vec![
                    ("program", obj(py, program.clone())),
                    ("errno", errno(source)),
                ],
            ),
            reaper::Error::Containment(c) => ("Containment", contain(c)),
            reaper::Error::Sandbox(s) => (
                "Sandbox",
                vec![("undeclared_directory", obj(py, s.undeclared_directory()))],
            ),
            reaper::Error::JoinFailed { program, cause } => {
                let mut d = contain(cause);
                d.push(("program", obj(py, program.clone())));
                ("JoinFailed", d)
            }
            reaper::Error::NoPidfd { pid, source } => (
                "NoPidfd",
                vec![("pid", obj(py, *pid)), ("errno", errno(source))],
            ),
            reaper::Error::Spawn { program, source } => (
                "Spawn",
                vec![
                    ("program", obj(py, program.clone())),
                    ("errno", errno(source)),
                ],
            ),
            _ => ("Spawn", vec![]),
        };
        let mut details = details;
        details.push(("exit_code", obj(py, e.exit_code())));
        native_err(kind, message, details)
    })
}

fn signal(n: i32) -> PyResult<reaper::Signal> {
    reaper::Signal::from_named_raw(n)
        .ok_or_else(|| PyValueError::new_err(format!("{n} is not a signal reaper can send")))
}

/// What the driver task is asked from Python.
enum Ask {
    /// Send this signal to the leader alone; the answer is whether it was sent.
    Signal(reaper::Signal, oneshot::Sender<bool>),
}

/// What a `Run`'s Python object and its driver task share.
struct Shared {
    outcome: Mutex<Option<reaper::Outcome>>,
    ended: Condvar,
    /// An eventfd made readable (once, for good) at the run's end: for an event loop.
    ready: OwnedFd,
    /// The run's requests (stop, kill), which work from any thread.
    sender: reaper::supervise::Sender,
}

impl Shared {
    fn finish(&self, outcome: reaper::Outcome) {
        *lock(&self.outcome) = Some(outcome);
        self.ended.notify_all();
        let one: u64 = 1;
        // SAFETY: `ready` is an open eventfd this struct owns; the buffer is 8 bytes, as an
        // eventfd write takes.
        unsafe { libc::write(self.ready.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

async fn drive(
    mut child: reaper::Child,
    mut asks: mpsc::UnboundedReceiver<Ask>,
    shared: Arc<Shared>,
) {
    // Until the leader exits or the run decides to stop: answer the asks between steps
    // (`step` is cancel-safe).
    loop {
        tokio::select! {
            _ = child.step() => break,
            ask = asks.recv() => match ask {
                Some(Ask::Signal(sig, answer)) => {
                    let _ = answer.send(child.signal_leader(sig));
                }
                // The Python object is gone: dropping the Child kills its whole tree.
                None => return drop(child),
            },
        }
    }
    // The end, as planned (what the leader left is stopped); an ask now finds it ending.
    let wait = child.wait();
    tokio::pin!(wait);
    let mut open = true;
    let outcome = loop {
        tokio::select! {
            o = &mut wait => break o,
            ask = asks.recv(), if open => match ask {
                Some(Ask::Signal(_, answer)) => { let _ = answer.send(false); }
                None => open = false,
            },
        }
    };
    shared.finish(outcome);
}

/// One contained command and its whole tree.
#[pyclass(frozen, module = "reaper._native")]
struct Run {
    pid: u32,
    owner: u32,
    backend: Option<&'static str>,
    cgroup: Option<String>,
    warning: Option<String>,
    shared: Arc<Shared>,
    asks: mpsc::UnboundedSender<Ask>,
}

impl Run {
    fn mine(&self) -> PyResult<()> {
        if self.owner == std::process::id() {
            Ok(())
        } else {
            Err(forked())
        }
    }
}

#[pymethods]
impl Run {
    /// The leader's pid.
    #[getter]
    fn pid(&self) -> u32 {
        self.pid
    }

    /// The containment the run got: "cgroup", "subreaper" or "pgid".
    #[getter]
    fn backend(&self) -> Option<&'static str> {
        self.backend
    }

    /// The run's cgroup, with the cgroup backend.
    #[getter]
    fn cgroup(&self) -> Option<String> {
        self.cgroup.clone()
    }

    /// Why the automatic containment fell back from a cgroup, when it did.
    #[getter]
    fn warning(&self) -> Option<String> {
        self.warning.clone()
    }

    /// The outcome (a dict), or None while the run goes on.
    fn poll<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.mine()?;
        lock(&self.shared.outcome)
            .as_ref()
            .map(|o| outcome_dict(py, o))
            .transpose()
    }

    /// Waits for the run's end, at most `timeout` seconds (None: no limit), the GIL released;
    /// returns the outcome, or None on the timeout. Signal handlers run meanwhile (Ctrl-C).
    #[pyo3(signature = (timeout=None))]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.mine()?;
        let deadline = match timeout {
            Some(t) if !(t.is_finite() && t >= 0.0) => {
                return Err(PyValueError::new_err(
                    "timeout must be a finite number of seconds, >= 0",
                ))
            }
            Some(t) => Some(Instant::now() + Duration::from_secs_f64(t)),
            None => None,
        };
        loop {
            let shared = Arc::clone(&self.shared);
            let done = py.detach(move || {
                let g = lock(&shared.outcome);
                if g.is_some() {
                    return true;
                }
                // A slice at a time, so that the interpreter's signal handlers (Ctrl-C) run.
                let mut slice = Duration::from_millis(100);
                if let Some(d) = deadline {
                    slice = slice.min(d.saturating_duration_since(Instant::now()));
                }
                let (g, _) = shared
                    .ended
                    .wait_timeout(g, slice)
                    .unwrap_or_else(|p| p.into_inner());
                g.is_some()
            });
            if done {
                return self.poll(py);
            }
            py.check_signals()?;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// Stops the whole tree, as a timeout would: the stop signal to every process, the grace,
    /// SIGKILL for what is left. Returns at once; `wait` returns the outcome.
    fn stop(&self) -> PyResult<bool> {
        self.mine()?;
        Ok(self.shared.sender.send(reaper::supervise::Request::Cancel))
    }

    /// SIGKILLs the whole tree now. Returns at once; `wait` returns the outcome.
    fn kill(&self) -> PyResult<bool> {
        self.mine()?;
        Ok(self.shared.sender.send(reaper::supervise::Request::Kill))
    }

    /// Sends `sig` to the leader alone; False when it has exited (or the run is ending).
    fn send_signal(&self, py: Python<'_>, sig: i32) -> PyResult<bool> {
        self.mine()?;
        let sig = signal(sig)?;
        let (tx, rx) = oneshot::channel();
        if self.asks.send(Ask::Signal(sig, tx)).is_err() {
            return Ok(false);
        }
        Ok(py.detach(move || rx.blocking_recv().unwrap_or(false)))
    }

    /// A descriptor that becomes readable at the run's end, and stays so (an eventfd): for
    /// an event loop's reader. It lives as long as this object.
    fn ready_fd(&self) -> i32 {
        self.shared.ready.as_raw_fd()
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn stop_reason(r: reaper::StopReason) -> &'static str {
    use reaper::StopReason as S;
    match r {
        S::Exited => "exited",
        S::Timeout => "timeout",
        S::Signal => "signal",
        S::Cancel => "cancel",
        S::Killed => "killed",
        S::Oom => "oom",
        S::ParentDied => "parent_died",
        S::Shutdown => "shutdown",
        S::StdinEof => "stdin_eof",
        S::Stopped => "stopped",
        S::Error => "error",
        // A reason this module does not know yet: the library's newer than it.
        _ => "other",
    }
}

fn process_tuple<'py>(py: Python<'py>, p: &reaper::Process) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            obj(py, p.pid),
            obj(py, p.starttime),
            obj(py, p.comm.clone()),
        ],
    )
}

fn outcome_dict<'py>(py: Python<'py>, o: &reaper::Outcome) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("argv", o.argv.clone())?;
    d.set_item("backend", o.backend.as_str())?;
    d.set_item(
        "cgroup",
        o.cgroup.as_ref().map(|p| p.to_string_lossy().into_owned()),
    )?;
    d.set_item("scope", o.scope.clone())?;
    d.set_item("leader_pid", o.leader_pid)?;
    let status = match o.leader_status {
        Some(reaper::ExitStatus::Code(c)) => Some(("code", c)),
        Some(reaper::ExitStatus::Signal(s)) => Some(("signal", s)),
        None => None,
    };
    d.set_item("leader_status", status)?;
    d.set_item("stop_reason", stop_reason(o.stop_reason))?;
    d.set_item("received_signal", o.received_signal.map(|s| s.as_raw()))?;
    d.set_item("duration", secs(o.duration))?;
    d.set_item("leader_ran", o.leader_ran.map(secs))?;
    d.set_item("teardown", secs(o.teardown))?;
    d.set_item("killed", o.killed)?;
    let survivors = PyList::empty(py);
    for p in &o.survivors {
        survivors.append(process_tuple(py, p)?)?;
    }
    d.set_item("survivors", survivors)?;
    let escapees = PyList::empty(py);
    for e in &o.escapees {
        let t = process_tuple(py, &e.process)?;
        escapees.append((t, e.to.clone()))?;
    }
    d.set_item("escapees", escapees)?;
    d.set_item("error", o.error.as_ref().map(|e| e.to_string()))?;
    d.set_item("guardian_pid", o.guardian_pid)?;
    d.set_item(
        "limits",
        o.limits.map(|l| (l.memory_max, l.pids_max, l.cpus)),
    )?;
    let usage = match &o.usage {
        Some(u) => {
            let ud = PyDict::new(py);
            ud.set_item("memory_peak_bytes", u.memory_peak_bytes)?;
            ud.set_item("cpu_usage_usec", u.cpu_usage_usec)?;
            ud.set_item("cpu_throttled_usec", u.cpu_throttled_usec)?;
            ud.set_item("cpu_nr_throttled", u.cpu_nr_throttled)?;
            ud.set_item("oom_kill", u.oom_kill)?;
            ud.set_item("oom_group_kill", u.oom_group_kill)?;
            ud.set_item("pids_max_events", u.pids_max_events)?;
            Some(ud)
        }
        None => None,
    };
    d.set_item("usage", usage)?;
    d.set_item("exit_code", o.exit_code(false))?;
    Ok(d)
}

/// The standard stream given from Python: -1 inherits this process's, any other number is a
/// descriptor the child gets a duplicate of (a pipe's end, /dev/null, a file).
fn stdio(fd: i32) -> PyResult<reaper::Stdio> {
    if fd < 0 {
        return Ok(reaper::Stdio::Inherit);
    }
    // SAFETY: the caller passes a descriptor it holds open for the duration of this call; it is
    // only borrowed here, to be duplicated.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let owned = borrowed
        .try_clone_to_owned()
        .map_err(|e| PyValueError::new_err(format!("descriptor {fd}: {e}")))?;
    Ok(reaper::Stdio::Fd(owned))
}

/// Starts `argv` contained; see the Python package for each argument's meaning.
#[pyfunction]
#[pyo3(signature = (argv, *, cwd=None, env=None, stdin=-1, stdout=-1, stderr=-1, timeout=None,
    grace=None, stop_signal=None, no_stop_signal=false, memory_max=None, pids_max=None, cpus=None,
    sandbox=None, containment=None, guardian=true))]
#[allow(clippy::too_many_arguments)]
fn spawn(
    py: Python<'_>,
    argv: Vec<std::ffi::OsString>,
    cwd: Option<std::path::PathBuf>,
    env: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
    stdin: i32,
    stdout: i32,
    stderr: i32,
    timeout: Option<f64>,
    grace: Option<f64>,
    stop_signal: Option<i32>,
    no_stop_signal: bool,
    memory_max: Option<u64>,
    pids_max: Option<u64>,
    cpus: Option<f64>,
    sandbox: Option<&str>,
    containment: Option<&str>,
    guardian: bool,
) -> PyResult<Run> {
    let rt = runtime()?;
    let Some((program, args)) = argv.split_first() else {
        return Err(PyValueError::new_err(
            "argv is empty: the program to run is its first item",
        ));
    };
    let duration = |what: &str, s: f64| {
        if s.is_finite() && s >= 0.0 {
            Ok(Duration::from_secs_f64(s))
        } else {
            Err(PyValueError::new_err(format!(
                "{what} must be a finite number of seconds, >= 0"
            )))
        }
    };
    let mut cmd = reaper::Command::new(program);
    cmd.args(args);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    if let Some(vars) = env {
        cmd.env_clear().envs(vars);
    }
    cmd.stdin(stdio(stdin)?)
        .stdout(stdio(stdout)?)
        .stderr(stdio(stderr)?);
    if let Some(t) = timeout {
        cmd.timeout(duration("timeout", t)?);
    }
    if let Some(g) = grace {
        cmd.grace(duration("grace", g)?);
    }
    if no_stop_signal {
        cmd.stop_signal(None);
    } else if let Some(s) = stop_signal {
        cmd.stop_signal(Some(signal(s)?));
    }
    let limits = reaper::Limits {
        memory_max,
        pids_max,
        cpus,
    };
    if !limits.is_empty() {
        cmd.limits(limits);
    }
    match sandbox {
        None => {}
        Some("on") => {
            cmd.sandbox(Some(reaper::Sandbox::On));
        }
        Some("pid") => {
            cmd.sandbox(Some(reaper::Sandbox::Pid));
        }
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "sandbox {other:?}: one of None, 'on', 'pid'"
            )))
        }
    }
    match containment {
        None | Some("auto") => {}
        Some("cgroup") => {
            cmd.containment(reaper::Containment::Cgroup);
        }
        Some("subreaper") => {
            cmd.containment(reaper::Containment::Subreaper);
        }
        Some("pgid") => {
            cmd.containment(reaper::Containment::Pgid);
        }
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "containment {other:?}: one of 'auto', 'cgroup', 'subreaper', 'pgid'"
            )))
        }
    }
    if guardian {
        if let Some((g, pid)) = lock(&GUARDIAN).as_ref() {
            if *pid == std::process::id() {
                cmd.guardian(Arc::clone(g));
            }
        }
    }
    // SAFETY: eventfd(2) with valid flags; the result is checked before it is owned.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a descriptor eventfd just returned, owned by nobody else.
    let ready = unsafe { OwnedFd::from_raw_fd(efd) };
    let child = py
        .detach(move || rt.block_on(cmd.spawn()))
        .map_err(spawn_error)?;
    let shared = Arc::new(Shared {
        outcome: Mutex::new(None),
        ended: Condvar::new(),
        ready,
        sender: child.sender(),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let run = Run {
        pid: child.id(),
        owner: std::process::id(),
        backend: child.backend().map(|b| b.as_str()),
        cgroup: child.cgroup().map(|p| p.to_string_lossy().into_owned()),
        warning: child.warning().map(|e| e.to_string()),
        shared: Arc::clone(&shared),
        asks: tx,
    };
    {
        let mut live = lock(&LIVE);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&shared));
    }
    rt.spawn(drive(child, rx, shared));
    Ok(run)
}

/// Starts this process's guardian by running `argv` (with this process's pid and start time
/// appended), unless one runs already. Returns its pid.
#[pyfunction]
fn start_guardian(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> PyResult<i32> {
    let mut g = lock(&GUARDIAN);
    if let Some((guardian, pid)) = g.as_ref() {
        if *pid == std::process::id() {
            return Ok(guardian.pid());
        }
    }
    let Some((program, args)) = argv.split_first() else {
        return Err(PyValueError::new_err("the guardian's argv is empty"));
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    let guardian = py
        .detach(move || reaper::Guardian::exec(cmd))
        .map_err(|e| {
            native_err(
                "Guardian",
                format!("cannot start the guardian: {e}"),
                vec![],
            )
        })?;
    let pid = guardian.pid();
    *g = Some((guardian, std::process::id()));
    Ok(pid)
}

/// This process's guardian's pid, if it started one.
#[pyfunction]
fn guardian_pid() -> Option<i32> {
    lock(&GUARDIAN)
        .as_ref()
        .filter(|(_, pid)| *pid == std::process::id())
        .map(|(g, _)| g.pid())
}

/// Tells the guardian this process is done (every run over): it exits.
#[pyfunction]
fn guardian_done() {
    if let Some((g, pid)) = lock(&GUARDIAN).as_ref() {
        if *pid == std::process::id() {
            g.done();
        }
    }
}

/// The guardian process's body: what `start_guardian`'s program calls. Returns its exit status.
#[pyfunction]
fn guardian_serve(py: Python<'_>, pid: i32, starttime: u64) -> u8 {
    py.detach(move || reaper::Guardian::serve(pid, starttime))
}

/// At the interpreter's exit: kills the whole tree of every run still going (SIGKILL) and
/// waits, at most `timeout` seconds, for their ends.
#[pyfunction]
#[pyo3(signature = (timeout=5.0))]
fn shutdown(py: Python<'_>, timeout: f64) {
    if RUNTIME
        .get()
        .is_none_or(|(_, pid)| *pid != std::process::id())
    {
        return;
    }
    let live: Vec<Arc<Shared>> = lock(&LIVE).iter().filter_map(|w| w.upgrade()).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(timeout.clamp(0.0, 60.0));
    py.detach(move || {
        for s in &live {
            s.sender.send(reaper::supervise::Request::Kill);
        }
        for s in &live {
            let mut g = lock(&s.outcome);
            while g.is_none() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                g = s
                    .ended
                    .wait_timeout(g, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
    });
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Run>()?;
    m.add_function(wrap_pyfunction!(spawn, m)?)?;
    m.add_function(wrap_pyfunction!(start_guardian, m)?)?;
    m.add_function(wrap_pyfunction!(guardian_pid, m)?)?;
    m.add_function(wrap_pyfunction!(guardian_done, m)?)?;
    m.add_function(wrap_pyfunction!(guardian_serve, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add("NativeError", m.py().get_type::<NativeError>())?;
    m.add("ForkedError", m.py().get_type::<ForkedError>())?;
    Ok(())
}

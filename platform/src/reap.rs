//! The one place children are reaped.
//!
//! Two callers need `wait`: a run waiting for its leader (through the leader's pidfd,
//! `waitid(P_PIDFD)`), and the subreaper duty of reaping orphans that reparented to us
//! (`waitid(P_ALL)`). The second would steal the first's status, so both go through one lock and
//! one table: whoever reaps a registered leader stores its status there for the run to take.
//!
//! `P_ALL`, not `waitpid(0)`: an orphan reparents to reaper in whatever process group and session
//! it made for itself (a setsid escapee), and `waitpid(0)` reaps only children in reaper's own
//! group, so such orphans stayed zombies for as long as reaper ran.
//!
//! The rule, for every child reaper creates (Linux): **[`reap_orphans`] may reap any child at any
//! moment, on any thread, so a child that some other code waits for is created with the reaping
//! lock held ([`hold`]) and is either registered before the lock is let go, or waited for
//! before.** Where reaper waits for a child:
//! - a run's leader: created under [`hold`] and registered through [`Spawning::register_leader`];
//!   its status is then taken from the table, whoever reaped it;
//! - inside a spawn: std's `Command::spawn` reaps a child whose exec failed (and panics if that
//!   child was reaped by someone else), the clone3 spawn's `kill_and_reap` likewise: both run
//!   under the same [`hold`];
//! - the guardian: never waited for (reaped here like an orphan once it exits); it is spawned
//!   under [`hold`] so its start time is read while its pid is still its own, and the subreaper
//!   backend leaves it out by pid *and* start time, so a reused pid is not skipped;
//! - `reaper doctor`'s clone3 probe: under [`hold`], through the probe's pidfd; its child
//!   subreaper probe: under [`hold`], through [`Spawning::reap`];
//! - nothing else: no `Child::wait`/`output`, no `tokio::process` (the pgid backend's `ps` runs
//!   only on macOS, where this module never reaps what it did not register).
//!
//! macOS has no subreaper: no orphan ever becomes reaper's child, so there is nothing to reap
//! but the leaders, each by its own pid (`waitpid(PID)`). `waitpid(-1)` there would only steal
//! the status of a child someone else waits for: the `ps` the pgid backend runs (off the runtime
//! thread).

use std::collections::HashMap;
use std::sync::Mutex;

use rustix::process::Pid;
#[cfg(not(target_os = "linux"))]
use rustix::process::WaitOptions;

use crate::process::Handle;
use crate::ExitStatus;

/// Leaders being watched, by pid, with their status once reaped. A leader's pid cannot be
/// reused while it is registered: it is our child, unreaped, until this table records it.
static LEADERS: Mutex<Option<HashMap<i32, Option<ExitStatus>>>> = Mutex::new(None);

/// Whether every child of this process is for [`reap_orphans`] to reap (Linux), or only the
/// registered leaders: a library in a process that starts children of its own must not take
/// their statuses.
static EVERY_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes [`reap_orphans`] reap every exited child (`waitid(P_ALL)`), or, with `false` (the
/// default), only the registered leaders, each by its pidfd.
pub fn reap_every_child(every: bool) {
    EVERY_CHILD.store(every, std::sync::atomic::Ordering::SeqCst);
}

/// Whether [`reap_every_child`] made every child this process's to reap.
pub fn reaps_every_child() -> bool {
    EVERY_CHILD.load(std::sync::atomic::Ordering::SeqCst)
}

struct Table(std::sync::MutexGuard<'static, Option<HashMap<i32, Option<ExitStatus>>>>);

impl std::ops::Deref for Table {
    type Target = HashMap<i32, Option<ExitStatus>>;
    fn deref(&self) -> &Self::Target {
        // Invariant: `leaders()` fills the option before handing out a `Table`.
        self.0.as_ref().expect("leader table initialised")
    }
}

impl std::ops::DerefMut for Table {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.get_or_insert_with(HashMap::new)
    }
}

fn leaders() -> Table {
    // A panic while holding this lock leaves a plain map behind; its contents stay valid.
    let mut guard = LEADERS.lock().unwrap_or_else(|p| p.into_inner());
    guard.get_or_insert_with(HashMap::new);
    Table(guard)
}

/// The reaping lock, held while a child is being created (see [`hold`]).
pub struct Spawning(Table);

/// Takes the reaping lock for the creation of a child: until it is let go, no [`reap_orphans`]
/// on any thread reaps anything, so a spawn that waits for its own failed child gets its status,
/// and a leader is registered before anyone could reap it. Nothing else of this module may be
/// called while it is held (the lock is not reentrant), and it must not be held across an
/// `.await`.
pub fn hold() -> Spawning {
    Spawning(leaders())
}

impl Spawning {
    /// Marks `pid` (our child) as a leader whose status a run will collect; lets go of the lock.
    pub fn register_leader(mut self, pid: Pid) {
        self.0.insert(pid.as_raw_nonzero().get(), None);
    }

    /// Waits for `pid`, a child created under this lock that nobody else waits for (a probe),
    /// and reaps it; lets go of the lock. `None` if it was not ours to reap (ECHILD: a host
    /// program that reaps any child took it).
    pub fn reap(self, pid: Pid) -> Option<ExitStatus> {
        loop {
            match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
                Ok(Some((_, st))) => return Some(decode_wait(st)),
                Err(rustix::io::Errno::INTR) => continue,
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

/// Forgets a leader (its run is done with it).
pub fn unregister_leader(pid: Pid) {
    leaders().remove(&pid.as_raw_nonzero().get());
}

/// Reaps the leader if it has exited: `Some(status)` once it has, `None` while it runs.
/// Idempotent: after the first `Some`, every call returns the same status.
pub fn try_reap_leader(leader: &Handle) -> std::io::Result<Option<ExitStatus>> {
    let mut table = leaders();
    let key = leader.raw_pid();
    if let Some(Some(status)) = table.get(&key) {
        return Ok(Some(*status));
    }
    match wait_leader_nohang(leader) {
        Ok(Some(status)) => {
            table.insert(key, Some(status));
            Ok(Some(status))
        }
        Ok(None) => Ok(None),
        // Reaped already, and not through this table: it is gone, with its status unknown. An
        // error (not `Ok(None)`, "still running") so the caller stops waiting: the pidfd stays
        // readable and would wake it forever.
        Err(rustix::io::Errno::CHILD) => match table.get(&key).copied().flatten() {
            Some(status) => Ok(Some(status)),
            None => Err(std::io::Error::from_raw_os_error(
                rustix::io::Errno::CHILD.raw_os_error(),
            )),
        },
        Err(e) => Err(e.into()),
    }
}

/// `waitid(P_PIDFD, WEXITED | WNOHANG)`.
#[cfg(target_os = "linux")]
fn wait_leader_nohang(leader: &Handle) -> rustix::io::Result<Option<ExitStatus>> {
    use rustix::process::{WaitId, WaitIdOptions};
    use std::os::fd::AsFd;
    rustix::process::waitid(
        WaitId::PidFd(leader.as_fd()),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
    )
    .map(|st| st.as_ref().map(decode_waitid))
}

/// `waitpid(PID, WNOHANG)`: the leader is our unreaped child, so its pid is still its own.
#[cfg(not(target_os = "linux"))]
fn wait_leader_nohang(leader: &Handle) -> rustix::io::Result<Option<ExitStatus>> {
    rustix::process::waitpid(Some(leader.pid()), WaitOptions::NOHANG)
        .map(|r| r.map(|(_, st)| decode_wait(st)))
}

/// Whether the leader has been stopped by a signal since the last call, and by which
/// (`waitid(WSTOPPED | WNOHANG)`: reports stops only, so it never reaps the leader).
#[cfg(target_os = "linux")]
pub fn leader_stopped(leader: &Handle) -> Option<crate::Signal> {
    use rustix::process::{WaitId, WaitIdOptions};
    use std::os::fd::AsFd;
    let st = rustix::process::waitid(
        WaitId::PidFd(leader.as_fd()),
        WaitIdOptions::STOPPED | WaitIdOptions::NOHANG,
    )
    .ok()??;
    st.stopping_signal().and_then(crate::Signal::from_named_raw)
}

/// Whether the leader has been stopped by a signal since the last call, and by which.
#[cfg(not(target_os = "linux"))]
pub fn leader_stopped(leader: &Handle) -> Option<crate::Signal> {
    // SAFETY: waitid(2) with WSTOPPED only reports (and consumes) a stop, never an exit.
    let info = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            leader.pid().as_raw_nonzero().get() as libc::id_t,
            &mut info,
            libc::WSTOPPED | libc::WNOHANG,
        );
        if r != 0 || info.si_pid == 0 || info.si_code != libc::CLD_STOPPED {
            return None;
        }
        info
    };
    crate::Signal::from_named_raw(info.si_status)
}

/// Reaps every exited child without blocking; a registered leader's status is kept for its run.
/// Returns how many non-leader children were reaped. ECHILD (no children) is the normal end.
/// macOS: reaps the registered leaders only (see the module docs), and returns 0.
#[cfg(not(target_os = "linux"))]
pub fn reap_orphans() -> usize {
    let mut table = leaders();
    for (&pid, slot) in table.iter_mut().filter(|(_, s)| s.is_none()) {
        let Some(p) = Pid::from_raw(pid) else {
            continue;
        };
        if let Ok(Some((_, st))) = rustix::process::waitpid(Some(p), WaitOptions::NOHANG) {
            *slot = Some(decode_wait(st));
        }
    }
    0
}

/// Reaps every exited child without blocking, in any process group or session (with
/// [`reap_every_child`]; else the registered leaders only); a registered leader's status is kept
/// for its run. Returns how many non-leader children were reaped. ECHILD (no children) is the
/// normal end.
#[cfg(target_os = "linux")]
pub fn reap_orphans() -> usize {
    let mut table = leaders();
    if !EVERY_CHILD.load(std::sync::atomic::Ordering::SeqCst) {
        for (&pid, slot) in table.iter_mut().filter(|(_, s)| s.is_none()) {
            if let Some(st) = Pid::from_raw(pid).and_then(reap_pid_nohang) {
                *slot = Some(st);
            }
        }
        return 0;
    }
    let mut reaped = 0;
    loop {
        match wait_any_nohang() {
            Ok(Some((pid, st))) => {
                if let Some(slot) = table.get_mut(&pid) {
                    *slot = Some(st);
                } else {
                    reaped += 1;
                }
            }
            Err(rustix::io::Errno::INTR) => continue,
            Ok(None) | Err(_) => return reaped,
        }
    }
}

/// `waitid(P_PID, WEXITED | WNOHANG)` of one child: its status once it has exited.
#[cfg(target_os = "linux")]
fn reap_pid_nohang(pid: Pid) -> Option<ExitStatus> {
    loop {
        match rustix::process::waitid(
            rustix::process::WaitId::Pid(pid),
            rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
        ) {
            Ok(Some(st)) => return Some(decode_waitid(&st)),
            Err(rustix::io::Errno::INTR) => continue,
            _ => return None,
        }
    }
}

/// `waitid(P_ALL, WEXITED | WNOHANG)`: one exited child of any group, with its pid. (rustix's
/// `waitid` does not hand out `si_pid`, and its `waitpid(None)` is `waitpid(0)`.)
#[cfg(target_os = "linux")]
fn wait_any_nohang() -> rustix::io::Result<Option<(i32, ExitStatus)>> {
    // SAFETY: `info` is a zeroed siginfo_t that waitid(2) fills in (or leaves zeroed: WNOHANG
    // with no exited child); the si_pid/si_status accessors read the SIGCHLD fields, which are
    // the ones waitid sets.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        if libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG) != 0 {
            return Err(rustix::io::Errno::from_raw_os_error(
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            ));
        }
        let pid = info.si_pid();
        if pid == 0 {
            return Ok(None);
        }
        let status = info.si_status();
        let st = match info.si_code {
            libc::CLD_KILLED | libc::CLD_DUMPED => ExitStatus::Signal(status),
            _ => ExitStatus::Code(status),
        };
        Ok(Some((pid, st)))
    }
}

#[cfg(target_os = "linux")]
fn decode_waitid(st: &rustix::process::WaitIdStatus) -> ExitStatus {
    match (st.exit_status(), st.terminating_signal()) {
        (_, Some(sig)) => ExitStatus::Signal(sig),
        (Some(code), None) => ExitStatus::Code(code),
        // Only EXITED was asked for, so one of the two is set; keep a total function anyway.
        (None, None) => ExitStatus::Code(st.raw_code()),
    }
}

fn decode_wait(st: rustix::process::WaitStatus) -> ExitStatus {
    match (st.exit_status(), st.terminating_signal()) {
        (_, Some(sig)) => ExitStatus::Signal(sig),
        (Some(code), None) => ExitStatus::Code(code),
        (None, None) => ExitStatus::Code(st.as_raw()),
    }
}

/// Whether this process may become a child subreaper, found without becoming one: it is one
/// already, or a forked child of it could become one (the attribute is per process, and
/// prctl(2) needs no privilege for it, so what the child may, this process may). A process
/// that becomes one keeps every orphan of its descendants that reparents meanwhile: a library
/// must not do that to a program's own children to answer a question.
#[cfg(target_os = "linux")]
pub fn may_become_subreaper() -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    if crate::linux::subreaper::is_subreaper() {
        return Ok(true);
    }
    let (from_child, to_parent) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // No reaping thread takes the probe's status before `reap` below.
    let spawning = hold();
    // SAFETY: the child of a multithreaded process calls only async-signal-safe functions
    // (prctl, write, _exit) on memory it owns (a stack byte, an fd it inherited), then exits
    // without running any destructor or atexit handler.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above: the forked child.
        unsafe {
            let ok = u8::from(libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
            libc::write(to_parent.as_raw_fd(), std::ptr::addr_of!(ok).cast(), 1);
            libc::_exit(0);
        }
    }
    let err = std::io::Error::last_os_error();
    drop(to_parent);
    let Some(child) = rustix::process::Pid::from_raw(pid) else {
        drop(spawning);
        return Err(err);
    };
    let mut answer = [0u8; 1];
    let read = loop {
        match rustix::io::read(&from_child, &mut answer) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r,
        }
    };
    spawning.reap(child);
    Ok(matches!(read, Ok(1)) && answer[0] == 1)
}

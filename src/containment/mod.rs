//! Containment backends: where a run's processes live and how every one of them is found and
//! killed. One trait, one file per backend; none of them decides *when* (that is the run layer's
//! policy), so nothing here holds a grace period or a timeout of its own.
//!
//! | backend     | finds every descendant by                      | kills by                          |
//! |-------------|------------------------------------------------|-----------------------------------|
//! | `cgroup`    | the kernel: the run's own cgroup v2, plus the  | `cgroup.kill` (atomic vs fork);   |
//! |             | descendants that left it (escapees)            | escapees: SIGSTOP pass, SIGKILL   |
//! | `subreaper` | `PR_SET_CHILD_SUBREAPER` + `/proc/*/children`  | SIGKILL each as found, repeat     |
//! | `pgid`      | polling the process table: ppid chains, every  | SIGSTOP groups and members until  |
//! |             | group and session the tree was ever seen in    | none is new, killpg + pidfd KILL  |
//!
//! `cgroup` and `subreaper` are Linux-only; macOS has `pgid` alone (signals there go to pids
//! whose start time was just checked, as macOS has no pidfd).

#[cfg(target_os = "linux")]
pub mod cgroup;
pub mod pgid;
mod request;
#[cfg(target_os = "linux")]
pub(crate) mod sandbox;
pub mod select;
pub(crate) mod sigstop;
#[cfg(target_os = "linux")]
pub mod spawn;
#[cfg(target_os = "linux")]
pub mod subreaper;

pub(crate) use crate::error::{ContainError as Error, ContainErrorKind as Kind};
pub use crate::process::{BackendKind, Escapee, Identity, Process};
pub(crate) use request::Request;
pub use request::{Containment, Delegation, Sandbox, SandboxAccess};

use std::process::Command;

use reaper_platform::process::Handle;
use reaper_platform::{signal, Pid, Signal};
use tokio::time::Instant;

/// How reports name a signal sent to one process through its handle: a pidfd on Linux, a pid
/// whose start time was just checked on macOS (no pidfd there).
#[cfg(target_os = "linux")]
pub const VIA_HANDLE: &str = "pidfd";
/// …and a `killpg` to each process group, then each process through its handle.
#[cfg(target_os = "linux")]
pub const VIA_GROUP_AND_HANDLE: &str = "killpg+pidfd";
#[cfg(not(target_os = "linux"))]
pub const VIA_HANDLE: &str = "pid";
#[cfg(not(target_os = "linux"))]
pub const VIA_GROUP_AND_HANDLE: &str = "killpg+pid";

/// What watches run cgroups from outside this process, to kill and remove them should this
/// process be SIGKILLed (the guardian): told where run cgroups go before the first is made
/// there, and left out of every run (it is this process's child, outside every run cgroup).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // only cgroups are watched
pub(crate) trait Watcher: Send + Sync {
    /// Run cgroups will be made in `dir`.
    fn watch(&self, dir: &std::path::Path);
    /// The watcher's own process.
    fn process(&self) -> Identity;
}

/// What a backend can do, so callers ask for an ability and never for a backend by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// One kill reaches every member at once, even a fork storm (`cgroup.kill`): no pass to
    /// repeat while forks outrun it.
    pub atomic_kill: bool,
    /// `is_empty` is the kernel's own answer (`populated`), not a look at `/proc` that can
    /// miss a process being reparented to reaper while it reads.
    pub exact_emptiness: bool,
    /// Two runs in one reaper process get trees of their own: stopping one leaves the other.
    pub isolates_concurrent_runs: bool,
    /// The leader is created inside the containment (`clone3(CLONE_INTO_CGROUP)`, or a join
    /// before exec), which is what `--sandbox` needs.
    pub spawns_leader_inside: bool,
}

/// The mechanism every backend provides.
#[allow(async_fn_in_trait)] // used with concrete types only; no Send bound needed
pub trait Backend {
    /// For printing only (`backend` in reports); decide by [`Backend::capabilities`].
    fn kind(&self) -> BackendKind;
    fn capabilities(&self) -> Capabilities;
    /// How reports name the final kill (`cgroup.kill`, `pidfd`, `killpg+pidfd`).
    fn kill_label(&self) -> &'static str;
    /// Arranges for the leader to enter containment before it runs any code of its own.
    fn prepare(&self, cmd: &mut Command);
    /// The leader was spawned as `leader` (not reaped yet, so the pid is its). For backends
    /// that follow the tree from the leader rather than holding it in a kernel object.
    fn spawned(&mut self, _leader: Pid) {}
    /// Every live (non-zombie) process of the run, escapees included.
    fn members(&self) -> Vec<Process>;
    /// Every process of the run seen outside its containment so far, alive or not (the cgroup
    /// backend; the others have no outside).
    fn escapees(&self) -> Vec<Escapee> {
        Vec::new()
    }
    /// Whether no live process is left (cheaper than `members()` where the kernel knows).
    fn is_empty(&self) -> bool {
        self.members().is_empty()
    }
    /// The pids of the live processes, as cheaply as the backend can tell (no start time, no
    /// name): what a stop counts before it signals anyone. May include a process that is
    /// exiting.
    fn pids(&self) -> Vec<i32> {
        self.members().into_iter().map(|m| m.pid).collect()
    }
    /// Sends `sig` to every member, each through its pidfd; returns the processes it reached.
    fn signal_all(&self, sig: Signal) -> Vec<Process>;
    /// One SIGKILL pass over the whole run; returns the processes it killed (as far as known).
    fn kill_all(&self) -> Vec<Process>;
    /// Waits until no live process is left, or the deadline passes (then `false`).
    async fn wait_empty(&mut self, deadline: Instant) -> bool;
    /// Gives back what the backend holds (the cgroup directory). Call when empty.
    fn release(&mut self) -> Result<(), Error>;
    /// For a run dropped before its end, after [`Backend::kill_all`]: the rest of its cleanup
    /// (wait for the kernel to empty the tree, then what `release` does), synchronous, for a
    /// thread of its own; the backend then holds nothing any more. `None`: nothing to do.
    fn cleanup_later(&mut self) -> Option<Box<dyn FnOnce(std::time::Instant) + Send>> {
        None
    }
    /// Ends containment without stopping anyone (`check --keep`): what is alive keeps running
    /// with `limits`. Returns where it lives now (a cgroup named out of every sweep's reach), or
    /// `None` where the processes simply stay reaper's descendants (reparented when it exits).
    fn keep(&mut self, _limits: &crate::limits::Limits) -> Result<Kept, Error> {
        Ok(Kept::default())
    }
    /// A spawn's error as the caller needs it: a backend's own failure between fork and exec
    /// (it can only pass an errno through) becomes its typed [`Error`].
    fn spawn_error(&self, e: std::io::Error) -> std::io::Error {
        e
    }
}

/// What [`Backend::keep`] left running, and where.
#[derive(Debug, Default)]
pub struct Kept {
    pub at: Option<std::path::PathBuf>,
    /// The limits could not be set on the new place: the processes run without them.
    pub unlimited: Option<Error>,
}

/// Sends `sig` to each member through a handle opened on its (pid, start time), never a bare
/// pid that may have been reused meanwhile; returns the members it reached.
pub(crate) fn signal_each(members: Vec<Process>, sig: Signal) -> Vec<Process> {
    members
        .into_iter()
        .filter(|m| {
            Handle::open_checked(m.pid, m.starttime)
                .is_some_and(|h| matches!(signal::to_handle(&h, sig), Ok(signal::Delivery::Sent)))
        })
        .collect()
}

/// Waits for reaper's next SIGCHLD (its children, and the orphans reparented to it) or until
/// `until`, whichever comes first. Without a SIGCHLD stream, until `until`.
#[cfg(target_os = "linux")]
pub(crate) async fn sigchld_or(sigchld: Option<&mut tokio::signal::unix::Signal>, until: Instant) {
    let tick = tokio::time::sleep_until(until);
    match sigchld {
        Some(s) => {
            tokio::select! {
                _ = s.recv() => {}
                _ = tick => {}
            }
        }
        None => tick.await,
    }
}

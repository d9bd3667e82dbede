//! Run a command so that nothing it starts outlives it.
//!
//! Tools that stop a command by its process group miss what matters: a grandchild that calls
//! `setsid()` and ignores SIGTERM, a double-forked daemon, a native binary orphaned when its
//! launcher was killed. reaper puts the command in a containment of its own — a cgroup v2 where
//! there is one — watches its leader through a pidfd, and stops **the whole tree**: every
//! process gets the stop signal, then the grace, then SIGKILL, atomically with `cgroup.kill`,
//! even against a fork storm. **Dropping a [`Child`] kills the whole tree.**
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), reaper::Error> {
//! use std::time::Duration;
//!
//! // A shell whose grandchild leaves its session and ignores SIGTERM.
//! let mut child = reaper::Command::new("sh")
//!     .arg("-c")
//!     .arg("setsid sh -c 'trap \"\" TERM; sleep 600' & sleep 600")
//!     .timeout(Duration::from_millis(300))
//!     .grace(Duration::from_millis(200))
//!     .spawn()
//!     .await?;
//! let outcome = child.wait().await;
//! assert_eq!(outcome.stop_reason, reaper::StopReason::Timeout);
//! assert!(outcome.killed >= 3, "the shell, its sleep, and the setsid'd grandchild's tree");
//! assert!(outcome.survivors.is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! # What contains the tree
//!
//! [`Containment::Auto`] takes a cgroup of the run's own where this process may create one
//! (root, a delegated cgroup, or a systemd scope reaper asks for), else the subreaper or the
//! pgid backend: [`Containment`] says what each does not contain, and [`host::diagnose`] what
//! works on this machine. [`Limits`] cap the tree's memory, processes and CPU; a [`Sandbox`]
//! keeps even a root command from leaving its cgroup.
//!
//! # This process and its other children
//!
//! reaper reaps only what it started, and signals only processes it can prove are a run's: a
//! member of the run's cgroup, a process found by walking down from the run's members (each
//! step's parent checked), a pidfd it holds, or a process group the run created. Your own
//! `std::process` and `tokio::process` children are never touched, even one that started after
//! a run's leader outside every cgroup, and [`host::diagnose`] leaves this process as it was.
//! Taking this process's children for a run's orphans (the subreaper backend; with one run at
//! a time, the cgroup and pgid backends) needs [`own_every_child`], for a process that starts
//! no other children (the `reaper` binary is one). Without it, a process that left the run's
//! cgroup, or double-forked between the pgid backend's looks, and whose parent exited before
//! any look saw it, is reparented out of this process's reach: neither stopped nor named.
//!
//! # If this process is killed
//!
//! A SIGKILL of this process leaves its runs to the kernel: the cgroup backend's processes live
//! on in their cgroup unless a [`Guardian`] (opt-in) kills and removes it.

#![warn(missing_docs)]

/// One line to stderr that can neither abort nor block reaper: `eprintln!` panics when stderr is
/// a closed pipe (Rust ignores SIGPIPE), which is exactly when a client has gone away and the
/// tree must still be torn down; and a write to a stderr the command filled would wait for a
/// reader that may wait for reaper (`reaper_platform::stderr`).
macro_rules! say {
    ($($arg:tt)*) => {
        reaper_platform::stderr::line(format_args!($($arg)*))
    };
}

#[cfg(target_os = "linux")]
pub mod audit;
mod child;
mod command;
pub(crate) mod containment;
mod error;
mod event;
#[cfg(target_os = "linux")]
mod guardian;
#[cfg(not(target_os = "linux"))]
#[path = "no_guardian.rs"]
mod guardian;
pub mod host;
mod limits;
#[cfg(target_os = "linux")]
mod naming;
mod options;
mod outcome;
mod process;
mod run;
#[cfg(target_os = "linux")]
pub mod runs;
pub mod supervise;
mod supervisor;
pub mod watch;

pub use child::Child;
pub use command::{Command, DEFAULT_GRACE};
pub use containment::{Containment, Delegation, Sandbox, SandboxAccess};
#[cfg(target_os = "linux")]
pub use error::SandboxStep;
pub use error::{ContainError, ContainErrorKind, Error, GuardianError, Refusal, SandboxError};
pub use event::Event;
pub(crate) use event::EventSink;
pub use guardian::Guardian;
pub use limits::{Limits, Usage};
pub use options::ContainOptions;
pub use outcome::{ExitStatus, Outcome, StopReason, TeardownError};
pub use process::{BackendKind, Escapee, Identity, Process, ProcessInfo};
pub use reaper_platform::Signal;
pub use run::Stdio;

/// Declares that every child of this process is reaper's to reap and contain: makes this
/// process a child subreaper (orphans of a run come back to it, where the subreaper and pgid
/// backends find them, and the cgroup backend finds a process that left its cgroup), lets
/// reaper reap any child it did not start, and, while a run is this process's only one, take
/// any child outside every run cgroup that started after that run's leader for the run's
/// orphan. Needed for [`Containment::Subreaper`] (and `Auto`'s fallback to it). Call it only in
/// a process that starts no children of its own besides its runs — the `reaper` binary, an
/// init — since their exit statuses are then reaper's, and they would be taken for a run's.
pub fn own_every_child() -> std::io::Result<()> {
    run::own_every_child()
}

/// Reaps, without waiting, every exited child this process may reap: the runs' leaders (their
/// statuses kept for their runs) and, after [`own_every_child`], any other child — the orphans
/// of runs that came back to this process. A server that runs commands side by side calls it on
/// every SIGCHLD, so that no zombie waits for the next run. Returns how many it reaped besides
/// leaders.
pub fn reap_exited_children() -> usize {
    reaper_platform::reap::reap_orphans()
}

/// Refuses `ptrace` of this process to every process without CAP_SYS_PTRACE, its own user's
/// included: `prctl(PR_SET_DUMPABLE, 0)`. A process of a run has this process's uid (unless a
/// sandbox or another user is asked for), so without this it could `PTRACE_ATTACH` the process
/// that supervises it and hold it stopped: no timeout, no stop, no answer. The `reaper` binary
/// and the [`Guardian`] call it first thing; an embedder that supervises runs of its own user
/// should too. What it costs: no core dump of this process, its `/proc/PID` files belong to
/// root (other processes of its user, `reaper ps` and `reaper audit` among them, can no longer
/// read its environment, file descriptors or memory maps; its `stat` and `status` stay
/// readable), and a debugger needs root. It does not stop a root process of a run (it has
/// CAP_SYS_PTRACE): the guardian watches for that. Inherited by children until they exec.
#[cfg(target_os = "linux")]
pub fn deny_tracing() -> std::io::Result<()> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(Into::into)
}

//! What the containment layer is asked for: which backend ([`Containment`]), where and how
//! ([`Request`], built from [`crate::ContainOptions`] by the run layer), and the sandbox's words
//! ([`Sandbox`], [`SandboxAccess`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{BackendKind, Watcher};
use crate::limits::Limits;

/// Which containment a run asks for. What each does *not* contain is said at each variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Containment {
    /// `Cgroup` when a run cgroup can be made here, else `Subreaper` (Linux); `Pgid` on macOS.
    /// With [`crate::Limits`] it never falls back: a limit needs the cgroup.
    #[default]
    Auto,
    /// A cgroup v2 of the run's own: the kernel holds every descendant, whatever it does with
    /// `setsid`, and `cgroup.kill` kills them all at once, even a fork storm. Does not contain:
    /// a process that leaves the cgroup (root can, and a user below a cgroup they own) once no
    /// look saw it — use [`Sandbox`] where the command is not trusted with that.
    Cgroup,
    /// This process as child subreaper: orphans of the tree come back to it. Does not contain:
    /// the tree if this process is SIGKILLed (there is no kernel object to name it by); and it
    /// holds this process's whole subtree as one, so only with [`crate::own_every_child`].
    Subreaper,
    /// The leader's process group, and every group and session the tree was seen in, by polling
    /// the process table. Does not contain: a process that double-forks and calls `setsid()`
    /// between two looks (see `poll`), nor anything once this process is SIGKILLed.
    Pgid,
}

impl Containment {
    /// The backend asked for by name; `None` for `Auto`, which [`super::select`] picks.
    pub(crate) fn backend(self) -> Option<BackendKind> {
        match self {
            Containment::Auto => None,
            Containment::Cgroup => Some(BackendKind::Cgroup),
            Containment::Subreaper => Some(BackendKind::Subreaper),
            Containment::Pgid => Some(BackendKind::Pgid),
        }
    }
}

/// A sandbox: a tree that cannot leave its cgroup, nor make anything outside it run code, even
/// as root (Linux, cgroup backend).
///
/// For root, the sandbox's root is a stranger to the host: its ids are a range of unprivileged
/// host ids of the run's own, so the host's files are "other" to it (it cannot write a file
/// of root's, such as a program the kernel or a root service runs), and it can neither signal
/// nor trace a process outside. Directories it must read or write as root are declared with
/// [`crate::ContainOptions::sandbox_path`]. Another user's sandbox keeps that user's own ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sandbox {
    /// User, mount and cgroup namespaces of the run's own, the cgroup file system, `/sys` and
    /// `/proc/sys` read-only, the kernel's files in `/proc` masked, the run records hidden, no
    /// new privileges, the capabilities that reach outside dropped, a seccomp filter (no
    /// `clone3`, no new cgroup namespace), a session of its own.
    On,
    /// The same, and a PID namespace with its own `/proc`, the leader its PID 1: the tree sees
    /// and signals nothing outside it.
    Pid,
}

/// How a directory declared with [`crate::ContainOptions::sandbox_path`] appears inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxAccess {
    /// Read as this process reads it; never written.
    ReadOnly,
    /// Read and written as this process would.
    ReadWrite,
}

/// Under systemd, whether reaper first asks the service manager for a delegated scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delegation {
    /// Under systemd, move this process into a scope of its own with `Delegate=yes` unless it
    /// is in a delegated unit already (a normal user's session cgroup is not theirs to write).
    #[default]
    Auto,
    /// Never ask systemd; create run cgroups where this process is.
    Never,
}

/// A containment's request: what [`select::contain`](super::select::contain) makes a backend
/// from.
#[derive(Clone)]
// macOS reads the backend and the poll alone: no cgroups to place, delegate or watch there.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Request {
    pub containment: Containment,
    pub cgroup_parent: Option<PathBuf>,
    pub poll: Duration,
    pub delegation: Delegation,
    pub limits: Limits,
    /// What watches run cgroups from outside this process, if anything does.
    pub watcher: Option<Arc<dyn Watcher>>,
    /// Told the name of each stale run cgroup the sweep removed (its record goes with it).
    #[cfg(target_os = "linux")]
    pub forget_stale: fn(&str),
}

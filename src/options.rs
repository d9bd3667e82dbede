//! How a run is contained: [`Containment`] (which backend), [`Sandbox`], [`Delegation`], and
//! [`ContainOptions`], all of them as one value that many commands can share.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::{Guardian, Limits};

/// Which containment a run asks for. What each does *not* contain is said at each variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Containment {
    /// `Cgroup` when a run cgroup can be made here, else `Subreaper` (Linux); `Pgid` on macOS.
    /// With [`Limits`] it never falls back: a limit needs the cgroup.
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

/// A sandbox: a tree that cannot leave its cgroup, nor make anything outside it run code, even
/// as root (Linux, cgroup backend).
///
/// For root, the sandbox's root is a stranger to the host: its ids are a range of unprivileged
/// host ids of the run's own, so the host's files are "other" to it (it cannot write a file
/// of root's, such as a program the kernel or a root service runs), and it can neither signal
/// nor trace a process outside. Directories it must read or write as root are declared with
/// [`ContainOptions::sandbox_path`]. Another user's sandbox keeps that user's own ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// How a directory declared with [`ContainOptions::sandbox_path`] appears inside the sandbox.
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

/// How a run is contained: what [`Command`](crate::Command)'s containment setters set, as one
/// value that many commands can share ([`Command::contain`](crate::Command::contain)): a server
/// that runs many commands keeps one.
#[derive(Debug, Clone)]
pub struct ContainOptions {
    pub(crate) containment: Containment,
    pub(crate) cgroup_parent: Option<PathBuf>,
    pub(crate) poll: Duration,
    pub(crate) guardian: Option<Arc<Guardian>>,
    pub(crate) delegation: Delegation,
    pub(crate) limits: Limits,
    pub(crate) sandbox: Option<Sandbox>,
    pub(crate) sandbox_paths: Vec<(PathBuf, SandboxAccess)>,
    pub(crate) raise_priority: bool,
}

pub(crate) use ContainOptions as Options;

impl ContainOptions {
    /// What watches run cgroups from outside this process, if anything does.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // only cgroups are watched
    pub(crate) fn watcher(&self) -> Option<&dyn crate::containment::Watcher> {
        self.guardian
            .as_deref()
            .map(|g| g as &dyn crate::containment::Watcher)
    }

    /// The limits these options set.
    pub fn get_limits(&self) -> Limits {
        self.limits
    }

    /// The guardian these options pass on, if any.
    pub fn get_guardian(&self) -> Option<&Arc<Guardian>> {
        self.guardian.as_ref()
    }
}

impl ContainOptions {
    /// How to contain the tree.
    pub fn containment(&mut self, c: Containment) -> &mut Self {
        self.containment = c;
        self
    }

    /// Creates the run's cgroup under this cgroup (a directory under the cgroup2 mount, or a
    /// path relative to it) instead of this process's own.
    pub fn cgroup_parent(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.cgroup_parent = Some(dir.as_ref().to_owned());
        self
    }

    /// [`Containment::Pgid`]: the slowest interval between two looks at the process table.
    pub fn poll(&mut self, every: Duration) -> &mut Self {
        self.poll = every;
        self
    }

    /// Under systemd: whether to ask for a delegated scope first.
    pub fn delegation(&mut self, d: Delegation) -> &mut Self {
        self.delegation = d;
        self
    }

    /// Resource limits for the whole tree (cgroup backend only: anything else refuses them).
    pub fn limits(&mut self, limits: Limits) -> &mut Self {
        self.limits = limits;
        self
    }

    /// Starts the command in a sandbox it cannot undo (see [`Sandbox`]).
    pub fn sandbox(&mut self, sandbox: Option<Sandbox>) -> &mut Self {
        self.sandbox = sandbox;
        self
    }

    /// Declares a directory the sandbox reaches as this process does, at the same path. For
    /// root, through an idmapped mount: there host root's files are the sandbox root's, to
    /// read (and, [`SandboxAccess::ReadWrite`], to write and `chown`), which is the point and
    /// the risk: declare nothing the kernel or a root service runs from. A directory only root
    /// may enter must be declared to be the working directory. Another user's sandbox writes
    /// what the user may anyway; `ReadOnly` then binds the directory read-only. Only with a
    /// [`Sandbox`]; the path must be absolute.
    pub fn sandbox_path(&mut self, dir: impl AsRef<Path>, access: SandboxAccess) -> &mut Self {
        self.sandbox_paths.push((dir.as_ref().to_owned(), access));
        self
    }

    /// Raises the thread that starts the run, which should be the one that drives it, above the
    /// tree where permitted (root, `CAP_SYS_NICE`): nice -10 from the start, round-robin real
    /// time while it kills, with `SCHED_RESET_ON_FORK` so that nothing it starts inherits that.
    /// Only a thread at the default priority is raised. A stop then does not wait for a CPU
    /// behind a fork storm. Off by default: the thread keeps the raise after the run (the
    /// `reaper` binary turns it on for its own thread).
    pub fn raise_priority(&mut self, yes: bool) -> &mut Self {
        self.raise_priority = yes;
        self
    }

    /// A guardian that kills and removes the run's cgroup if this process is SIGKILLed (see
    /// [`Guardian`]). Off by default.
    pub fn guardian(&mut self, guardian: Arc<Guardian>) -> &mut Self {
        self.guardian = Some(guardian);
        self
    }
}

impl Default for ContainOptions {
    fn default() -> Self {
        ContainOptions {
            containment: Containment::Auto,
            cgroup_parent: None,
            poll: Duration::from_millis(50),
            guardian: None,
            delegation: Delegation::Auto,
            limits: Limits::default(),
            sandbox: None,
            sandbox_paths: Vec::new(),
            raise_priority: false,
        }
    }
}

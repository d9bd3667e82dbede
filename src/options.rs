//! [`ContainOptions`]: how a run is contained ([`Containment`], a [`Sandbox`], [`Delegation`],
//! [`Limits`], a [`Guardian`]), as one value that many commands can share; what the containment
//! layer is asked for is built from it ([`ContainOptions::request`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::containment::{self, Containment, Delegation, Sandbox, SandboxAccess};
use crate::{Guardian, Limits};

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
    /// What the containment layer is asked for: these options but what the run layer does
    /// itself (the sandbox, the priority), the guardian as what watches run cgroups.
    pub(crate) fn request(&self) -> containment::Request {
        containment::Request {
            containment: self.containment,
            cgroup_parent: self.cgroup_parent.clone(),
            poll: self.poll,
            delegation: self.delegation,
            limits: self.limits,
            watcher: self
                .guardian
                .clone()
                .map(|g| g as Arc<dyn containment::Watcher>),
            #[cfg(target_os = "linux")]
            forget_stale: crate::runs::record::forget,
        }
    }

    /// Tries the containment these options get (a run cgroup is made and removed) and says
    /// whether concurrent runs get trees of their own: they do with cgroups; the subreaper
    /// backend holds this process's whole subtree as one, so stopping one run would stop the
    /// others. When `Auto` got a cgroup, pins these options to [`Containment::Cgroup`]: a run
    /// that later cannot get one fails and says why, instead of falling back into a subtree it
    /// would share. Fails when there are limits and no run could get them. For a server that
    /// runs commands side by side; runs them one at a time when this says false.
    pub async fn keep_runs_apart(&mut self) -> Result<bool, crate::ContainError> {
        let (apart, got) = containment::select::isolated(&self.request()).await?;
        if let Some(got) = got {
            self.containment = got;
        }
        Ok(apart)
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

//! The containment flags `run`, `check` and `mcp` share, and what they set on a command.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::coreutils as parse;

/// `--containment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContainmentArg {
    /// cgroup when a run cgroup can be created, else subreaper (with a warning); pgid on macOS.
    Auto,
    Cgroup,
    Subreaper,
    /// The leader's process group plus process-table tracking (macOS; portable).
    Pgid,
}

impl From<ContainmentArg> for reaper::Containment {
    fn from(c: ContainmentArg) -> Self {
        match c {
            ContainmentArg::Auto => reaper::Containment::Auto,
            ContainmentArg::Cgroup => reaper::Containment::Cgroup,
            ContainmentArg::Subreaper => reaper::Containment::Subreaper,
            ContainmentArg::Pgid => reaper::Containment::Pgid,
        }
    }
}

/// `--sandbox[=pid]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxArg {
    /// User, mount and cgroup namespaces, a read-only cgroup file system, capabilities dropped,
    /// a seccomp filter.
    On,
    /// The same, and a PID namespace with its own /proc, the leader its PID 1.
    Pid,
}

impl From<SandboxArg> for reaper::Sandbox {
    fn from(s: SandboxArg) -> Self {
        match s {
            SandboxArg::On => reaper::Sandbox::On,
            SandboxArg::Pid => reaper::Sandbox::Pid,
        }
    }
}

/// `--delegate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DelegateArg {
    /// Under systemd, move reaper into a delegated scope of its own unless it is in one already.
    Auto,
    /// Never ask systemd; create run cgroups where reaper is.
    Never,
}

impl From<DelegateArg> for reaper::Delegation {
    fn from(d: DelegateArg) -> Self {
        match d {
            DelegateArg::Auto => reaper::Delegation::Auto,
            DelegateArg::Never => reaper::Delegation::Never,
        }
    }
}

/// Containment flags shared by `run` and `check`.
#[derive(Debug, Clone, clap::Args)]
pub struct ContainArgs {
    /// How to contain the tree: a cgroup v2 of its own (preferred), reaper as child subreaper,
    /// or pgid (the leader's process group plus process-table tracking, for macOS); `auto` uses
    /// cgroup when it can and says so when it cannot.
    #[arg(long, value_enum, default_value = "auto", value_name = "BACKEND")]
    pub containment: ContainmentArg,

    /// Create run cgroups under this cgroup (a directory under the cgroup2 mount, or a path
    /// relative to it) instead of reaper's own.
    #[arg(long, env = "REAPER_CGROUP_PARENT", value_name = "DIR")]
    pub cgroup_parent: Option<PathBuf>,

    /// pgid backend: read the process table at least this often (faster right after the start
    /// and while the tree forks). A process that double-forks and calls setsid() between two
    /// reads can escape, so shorter is safer and costs more CPU.
    #[arg(long, value_parser = parse::duration, default_value = "50ms", value_name = "DUR")]
    pub poll: Duration,

    /// Under systemd, ask the service manager (the user's, or the system's for root) for a scope
    /// with Delegate=yes and create run cgroups there; `never` creates them where reaper is.
    #[arg(
        long,
        value_enum,
        env = "REAPER_DELEGATE",
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub delegate: DelegateArg,

    #[command(flatten)]
    pub limits: LimitArgs,

    /// Start the command in a sandbox it cannot undo, even as root: its own mount and cgroup
    /// namespaces (the cgroup namespace rooted at the run's cgroup), the cgroup file system,
    /// /sys and /proc/sys read-only, the kernel's files in /proc masked, no new privileges, and
    /// CAP_SYS_ADMIN, CAP_SYS_PTRACE and the other capabilities that could undo it dropped. As
    /// root, the sandbox's root is an unprivileged user on the host (ids of the run's own): it
    /// reads what anyone may and writes nothing of the host's but world-writable places and
    /// the directories given to --sandbox-rw. `--sandbox=pid` adds a PID namespace with its own
    /// /proc (the command is its PID 1). Needs the cgroup backend, and root or unprivileged
    /// user namespaces (a non-root user's sandbox keeps the user's own ids); where a part is
    /// impossible, reaper exits 125 naming it (`reaper doctor` says what works here).
    #[arg(
        long,
        value_enum,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on",
        value_name = "MODE"
    )]
    pub sandbox: Option<SandboxArg>,

    /// With --sandbox: DIR (an absolute path, and everything below it) is readable and writable
    /// inside as it is outside. For root, host root's files there are the sandbox root's: what
    /// the command writes there, host root owns. Declare nothing the kernel or a service runs
    /// from. Repeatable.
    #[arg(long = "sandbox-rw", value_name = "DIR", requires = "sandbox")]
    pub sandbox_rw: Vec<PathBuf>,

    /// With --sandbox: DIR is readable inside as it is outside, and read-only (a toolchain or
    /// configuration under a directory only root may enter). Repeatable.
    #[arg(long = "sandbox-ro", value_name = "DIR", requires = "sandbox")]
    pub sandbox_ro: Vec<PathBuf>,
}

/// Resource limits (cgroup backend only), as systemd-run's `-p MemoryMax= -p TasksMax=
/// -p CPUQuota=`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitArgs {
    /// Memory limit for the whole tree (memory.max, no swap): 512M, 2G, 1.5G (K/M/G/T are
    /// powers of 1024, plain numbers bytes). When the tree exceeds it, the kernel's OOM killer
    /// ends the whole run (stop reason `oom`, exit 137).
    #[arg(long, value_parser = super::parse::size, value_name = "SIZE")]
    pub memory_max: Option<u64>,

    /// Most processes (and threads) the tree may have at once (pids.max): a fork past it fails.
    #[arg(long, value_parser = super::parse::pids, value_name = "N")]
    pub pids_max: Option<u64>,

    /// CPU time for the whole tree, in cores (cpu.max): 0.5 is half of one core.
    #[arg(long, value_parser = super::parse::cpus, value_name = "N.N")]
    pub cpus: Option<f64>,
}

impl LimitArgs {
    pub fn limits(&self) -> reaper::Limits {
        reaper::Limits {
            memory_max: self.memory_max,
            pids_max: self.pids_max,
            cpus: self.cpus,
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct GuardArgs {
    /// Do not start the guardian process that kills the tree if reaper itself is SIGKILLed.
    #[arg(long)]
    pub no_guardian: bool,
}

impl ContainArgs {
    /// The containment these flags ask for, with the guardian when one was started.
    pub fn options(&self, guard: &GuardArgs) -> reaper::ContainOptions {
        let mut o = reaper::ContainOptions::default();
        o.containment(self.containment.into())
            .poll(self.poll)
            .delegation(self.delegate.into())
            .limits(self.limits.limits())
            .sandbox(self.sandbox.map(Into::into))
            // reaper's own thread: a stop must not wait for a CPU behind the tree.
            .raise_priority(true);
        if let Some(p) = &self.cgroup_parent {
            o.cgroup_parent(p);
        }
        // Bound at the real path, which is also where a relative one leads.
        let real = |d: &PathBuf| std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        for d in &self.sandbox_ro {
            o.sandbox_path(real(d), reaper::SandboxAccess::ReadOnly);
        }
        for d in &self.sandbox_rw {
            o.sandbox_path(real(d), reaper::SandboxAccess::ReadWrite);
        }
        if let Some(g) = guardian(self, guard) {
            o.guardian(g);
        }
        o
    }

    /// Sets the containment flags on `cmd`, with the guardian when one was started.
    pub fn apply(&self, cmd: &mut reaper::Command, guard: &GuardArgs) {
        cmd.contain(self.options(guard));
    }

    /// Whether a guardian helps: it cleans up cgroups, which the subreaper and pgid backends
    /// (and so macOS) do not have (`main` forks it early when so).
    pub fn wants_guardian(&self, guard: &GuardArgs) -> bool {
        !(guard.no_guardian
            || matches!(
                self.containment,
                ContainmentArg::Subreaper | ContainmentArg::Pgid
            )
            || !cfg!(target_os = "linux"))
    }
}

/// The guardian `main` forked, if it did (or why it could not).
static GUARDIAN: OnceLock<Result<Arc<reaper::Guardian>, String>> = OnceLock::new();

/// Forks this process's guardian: first thing in `main`, before any thread.
pub fn fork_guardian() {
    GUARDIAN.get_or_init(|| reaper::Guardian::fork().map_err(|e| e.to_string()));
}

/// The guardian for a command with these flags: the one `main` forked, when it helps.
pub fn guardian(contain: &ContainArgs, guard: &GuardArgs) -> Option<Arc<reaper::Guardian>> {
    if !contain.wants_guardian(guard) {
        return None;
    }
    match GUARDIAN.get()? {
        Ok(g) => Some(g.clone()),
        Err(e) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                say!("reaper: warning: {e}; if reaper is SIGKILLed its tree may outlive it")
            });
            None
        }
    }
}

/// The forked guardian, whatever the flags (doctor's probe, the end of every face).
pub fn any_guardian() -> Option<Arc<reaper::Guardian>> {
    GUARDIAN.get()?.as_ref().ok().cloned()
}

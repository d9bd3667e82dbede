//! The processes a run has: [`Process`], named for good by pid and start time, and
//! [`Escapee`], one that left the run's cgroup; [`BackendKind`], the containment a run got;
//! [`ProcessInfo`], a process as the process table shows it.

pub use reaper_platform::process::Identity;

/// A process as the process table shows it (`/proc/PID/stat` and the files beside it): what
/// [`crate::runs`] lists of a run and [`crate::audit`] of a leak. `uid`, `exe` and `cgroup` are
/// `None` where they were not read (a run's processes) or could not be.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// Its pid.
    pub pid: i32,
    /// Its start time (clock ticks after boot): with the pid, its [`Identity`].
    pub starttime: u64,
    /// Its parent's pid.
    pub ppid: i32,
    /// Its process group.
    pub pgid: i32,
    /// Its session.
    pub sid: i32,
    /// Its state (`S`, `R`, `T`, …).
    pub state: char,
    /// The user that owns it.
    pub uid: Option<u32>,
    /// Its command name.
    pub comm: String,
    /// Its executable.
    pub exe: Option<std::path::PathBuf>,
    /// Its command line.
    pub cmdline: String,
    /// Its cgroup (the unified hierarchy's path).
    pub cgroup: Option<String>,
    /// Seconds since it started.
    pub age_secs: u64,
}

impl ProcessInfo {
    /// The process, named for good.
    pub fn identity(&self) -> Identity {
        Identity {
            pid: self.pid,
            starttime: self.starttime,
        }
    }
}

/// A process of a run, named for good: its pid and start time (clock ticks after boot,
/// `/proc/PID/stat` field 22), which no later process with that pid shares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Process {
    /// Its pid (in reaper's PID namespace).
    pub pid: i32,
    /// Its start time, in clock ticks after boot.
    pub starttime: u64,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
}

impl Process {
    /// The process, named for good.
    pub fn identity(&self) -> Identity {
        Identity {
            pid: self.pid,
            starttime: self.starttime,
        }
    }

    /// How the library's messages name a process: `sleep (pid 1234)`.
    pub(crate) fn label(&self) -> String {
        format!("{} (pid {})", self.comm, self.pid)
    }
}

impl From<reaper_platform::process::ProcStat> for Process {
    fn from(s: reaper_platform::process::ProcStat) -> Self {
        Self {
            pid: s.pid,
            starttime: s.starttime,
            comm: s.comm,
        }
    }
}

/// A process of the run that left the run's cgroup (root, or a user who owns the parent
/// cgroup, can write itself into another `cgroup.procs`): still the run's, as it descends from
/// it; stopped with the rest and named in every report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Escapee {
    /// The process.
    pub process: Process,
    /// The cgroup it was in when reaper first saw it outside (as `/proc/PID/cgroup` shows it).
    pub to: String,
}

impl Escapee {
    /// `sleep (pid 1234): moved out of the cgroup to /`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn label(&self) -> String {
        format!(
            "{}: moved out of the cgroup to {}",
            self.process.label(),
            self.to
        )
    }
}

/// The containment a run got (see [`crate::Containment`] for what each does not contain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// The run's own cgroup v2.
    Cgroup,
    /// This process as child subreaper.
    Subreaper,
    /// Process groups and sessions, tracked through the process table.
    Pgid,
}

impl BackendKind {
    /// `cgroup`, `subreaper`, `pgid`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cgroup => "cgroup",
            BackendKind::Subreaper => "subreaper",
            BackendKind::Pgid => "pgid",
        }
    }
}

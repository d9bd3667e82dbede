//! Containment's one error type: what failed, on which path, the errno, and what to do. It
//! becomes text only at the command-line and MCP edges (`Display`), where the words are the
//! ones users and tests know; `doctor` reads the parts instead.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why containment could not be set up, changed or given back.
#[derive(Debug, Clone)]
pub struct Error {
    kind: Kind,
    /// What failed, in the user's words (the OS's words and the path included where known).
    what: String,
    // Set by the Linux backends only (macOS has no cgroupfs to name).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    path: Option<PathBuf>,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    errno: Option<i32>,
    /// What the user can do about it, when it is not already part of `what`.
    hint: Option<&'static str>,
}

/// What a caller may need to tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Anything else: the message says it all.
    Failed,
    /// The leader could not enter the run's cgroup between fork and exec (the join's write to
    /// `cgroup.procs` failed); nothing of the command ran.
    JoinFailed,
    /// `--cgroup-parent` is not a cgroup2 directory under the mount: the caller's mistake, not
    /// a host without cgroups (so `auto` does not fall back).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    ParentRefused,
}

/// `run `reaper doctor``: what to do when the machine's setup is the likely cause.
pub const RUN_DOCTOR: &str = "run `reaper doctor`";

// Some constructors serve the Linux backends only.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Error {
    /// An error whose message is `what`.
    pub fn new(what: impl Into<String>) -> Self {
        Self {
            kind: Kind::Failed,
            what: what.into(),
            path: None,
            errno: None,
            hint: None,
        }
    }

    /// The leader could not join its cgroup before exec.
    pub fn join_failed() -> Self {
        Self {
            kind: Kind::JoinFailed,
            ..Self::new("cannot move the leader into its cgroup before exec")
        }
    }

    /// `what: e`, with the errno kept.
    pub fn io(what: impl fmt::Display, e: &std::io::Error) -> Self {
        Self::new(format!("{what}: {e}")).with_errno(e.raw_os_error())
    }

    /// The path the failed operation was on.
    pub fn on(mut self, path: impl AsRef<Path>) -> Self {
        self.path = Some(path.as_ref().to_owned());
        self
    }

    pub fn with_errno(mut self, errno: Option<i32>) -> Self {
        self.errno = errno;
        self
    }

    /// What to do, shown after the message (`…; run `reaper doctor``).
    pub fn hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }

    /// The same error, of kind `kind`.
    pub fn of_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The message without its hint (`doctor` gives its own advice).
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)?;
        if let Some(h) = self.hint {
            write!(f, "; {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// cgroupfs errors name the operation, the path and the OS's words already.
#[cfg(target_os = "linux")]
impl From<reaper_platform::linux::cgroupfs::CgroupFsError> for Error {
    fn from(e: reaper_platform::linux::cgroupfs::CgroupFsError) -> Self {
        let errno = e.source.raw_os_error();
        Self::new(e.to_string()).on(&e.path).with_errno(errno)
    }
}

impl From<String> for Error {
    fn from(what: String) -> Self {
        Self::new(what)
    }
}

impl From<&str> for Error {
    fn from(what: &str) -> Self {
        Self::new(what)
    }
}

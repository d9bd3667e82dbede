//! [`Spec`]: what the run layer starts, built by [`crate::Command`] for each spawn; and
//! [`Stdio`], where each of the leader's standard streams goes.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use crate::{ContainOptions, EventSink, Signal};

/// Where one of the leader's standard streams goes.
#[derive(Debug, Default)]
pub enum Stdio {
    /// This process's own.
    #[default]
    Inherit,
    /// `/dev/null`.
    Null,
    /// A pipe whose other end is the [`Child`](crate::Child)'s `stdin`, `stdout` or `stderr`.
    Piped,
    /// This file descriptor.
    Fd(OwnedFd),
}

impl From<OwnedFd> for Stdio {
    fn from(fd: OwnedFd) -> Stdio {
        Stdio::Fd(fd)
    }
}

impl From<std::fs::File> for Stdio {
    fn from(f: std::fs::File) -> Stdio {
        Stdio::Fd(f.into())
    }
}

/// One start of a command: what to run, where its streams go, how to contain it, and what its
/// record says of its plan.
#[derive(Debug)]
// Runs are recorded on Linux only.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Spec {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Changes to this process's environment, in order: `Some` sets, `None` removes.
    pub env: Vec<(OsString, Option<OsString>)>,
    pub env_clear: bool,
    pub cwd: Option<PathBuf>,
    /// Taken by the spawn where it uses them (a pipe, a descriptor).
    pub stdio: [Stdio; 3],
    /// Hand the terminal to the leader when this process holds it in the foreground.
    pub terminal: bool,
    pub options: ContainOptions,
    pub events: EventSink,
    /// For the run's record: the plan's timeout, stop signal and grace, and the request the
    /// run serves.
    pub timeout: Option<Duration>,
    pub stop_signal: Option<Signal>,
    pub grace: Duration,
    pub request_id: Option<String>,
}

impl Spec {
    /// argv as text, for reports and messages.
    pub fn argv_lossy(&self) -> Vec<String> {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }
}

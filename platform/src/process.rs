//! One process, the way the run layer sees it on every platform: a [`Handle`] to watch and
//! signal it, and the facts about it that reports name it by.
//!
//! | platform | `Handle`                                        | facts from                     |
//! |----------|-------------------------------------------------|--------------------------------|
//! | Linux    | a pidfd: a reused pid cannot redirect it        | `/proc/PID/stat`               |
//! | macOS    | the pid, its start time checked before a signal | `proc_pidinfo(2)`, `getsid(2)` |
//!
//! A pid alone names a process only until it is reaped; `(pid, starttime)` names it for good,
//! so everything that remembers a process remembers both.

#[cfg(target_os = "linux")]
pub use crate::linux::pidfd::Pidfd as Handle;
#[cfg(target_os = "linux")]
pub use crate::linux::procfs::{age_secs, cmdline, exe, is_alive, self_identity, stat};

#[cfg(target_os = "macos")]
pub use crate::macos::process::{age_secs, cmdline, exe, is_alive, self_identity, stat, Handle};

/// A [`Handle`]'s exit, watched through one registration with the reactor that lives as long
/// as this does: waiting again (a `select!` loop that re-enters its wait on every turn) costs no
/// system call, where each [`Handle::exited`] duplicates the fd and registers it afresh.
/// Cancel-safe: the readiness is kept by the registration, not by the future.
#[derive(Debug)]
pub struct ExitWatch {
    /// `None`: the process had exited when the watch was made.
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl ExitWatch {
    pub(crate) fn new(fd: Option<std::os::fd::OwnedFd>) -> std::io::Result<Self> {
        Ok(ExitWatch {
            fd: fd.map(crate::async_readable).transpose()?,
        })
    }

    /// Resolves once the process has exited. An exit stays readable, so the readiness is never
    /// cleared and every later wait resolves at once.
    pub async fn exited(&self) -> std::io::Result<()> {
        if let Some(fd) = &self.fd {
            let _ready = fd.readable().await?;
        }
        Ok(())
    }
}

/// The facts about one process reaper uses (on Linux the fields of `/proc/PID/stat`, proc(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// The executable name (Linux: at most 15 bytes, may contain spaces and parentheses).
    pub comm: String,
    /// `R`, `S`, `D`, `T`, `t`, `Z`, `X`, `I`, …
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    /// When the process started: clock ticks after boot on Linux (field 22), seconds since the
    /// epoch on macOS. Only compared with values from the same platform.
    pub starttime: u64,
}

impl ProcStat {
    /// A zombie (or a dead entry) has exited: it is not a survivor.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// The process group of the caller. 0 is a real answer, not an error: a group whose leader
/// lives in an ancestor PID namespace has no number here. (rustix's `getpgrp` asserts a
/// non-zero pid and would panic.)
pub fn own_process_group() -> i32 {
    // SAFETY: getpgrp(2) takes nothing and cannot fail.
    unsafe { libc::getpgrp() }
}

/// The session of `pid` (`None`: the caller). 0 is a real answer: processes that init started
/// without `setsid()` (CI runners) are in session 0, and a session whose leader lives in an
/// ancestor PID namespace has no number here. (rustix's `getsid` panics on 0.)
pub fn session_of(pid: Option<i32>) -> std::io::Result<i32> {
    // SAFETY: getsid(2) only reads its argument.
    match unsafe { libc::getsid(pid.unwrap_or(0)) } {
        -1 => Err(std::io::Error::last_os_error()),
        sid => Ok(sid),
    }
}

/// This platform's process table: `/proc` on Linux, `ps` on macOS.
pub fn table() -> std::io::Result<Box<dyn crate::proctable::ProcessTable>> {
    #[cfg(target_os = "linux")]
    {
        Ok(Box::new(crate::linux::proctable::ProcTable))
    }
    #[cfg(target_os = "macos")]
    {
        Ok(Box::new(crate::macos::PsTable))
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "no process-table source for this platform (Linux /proc and macOS ps are supported)",
        ))
    }
}

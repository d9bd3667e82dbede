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

pub use crate::exit_watch::ExitWatch;
pub use crate::group::{own_process_group, session_of};
pub use crate::identity::{Identity, ProcStat};

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

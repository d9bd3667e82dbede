//! reaper's OS layer: the mechanisms reaper contains a process tree with, and no policy.
//!
//! Nothing here decides how long to wait, which signal to send first or when to escalate;
//! callers pass deadlines and signals in. Every cgroupfs access goes through [`linux::cgroupfs`],
//! every signal through [`linux::signal`].

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod tracker;

pub use rustix::process::{Pid, Signal};

/// How a process ended, as `waitid(2)` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// `exit(N)` / return from main.
    Code(i32),
    /// Killed by signal N (core dumped or not).
    Signal(i32),
}

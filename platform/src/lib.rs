//! reaper's OS layer: the mechanisms reaper contains a process tree with, and no policy.
//!
//! Nothing here decides how long to wait, which signal to send first or when to escalate;
//! callers pass deadlines and signals in. Every cgroupfs access goes through [`linux::cgroupfs`],
//! every signal through [`signal`], every reap through [`reap`].
//!
//! Linux and macOS. The run layer uses the portable part ([`process`], [`signal`], [`reap`],
//! [`proctable`]); cgroups, pidfds and the subreaper are in [`linux`], and `macos` is only
//! what macOS does differently (and is compiled, never run, in CI).

pub mod errno;
pub mod exit_watch;
pub mod group;
pub mod hangup;
pub mod identity;
pub mod job_control;
#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod process;
pub mod proctable;
pub mod reap;
pub mod sent;
pub mod signal;
pub mod stderr;
pub mod terminal;

use std::os::fd::OwnedFd;

pub use rustix::process::{Pid, Signal};
use tokio::io::unix::AsyncFd;

/// Registers an owned fd (pidfd, kqueue) with tokio's reactor for readability.
pub(crate) fn async_readable(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    async_fd(fd, tokio::io::Interest::READABLE)
}

/// Registers an owned fd with tokio's reactor for `interest`.
pub(crate) fn async_fd(
    fd: OwnedFd,
    interest: tokio::io::Interest,
) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it until dropped, so the raw
    // fd stays open and names the same file description for the registration's whole life.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

/// How a process ended, as `waitid(2)` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// `exit(N)` / return from main.
    Code(i32),
    /// Killed by signal N (core dumped or not).
    Signal(i32),
}

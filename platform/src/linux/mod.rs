//! Linux mechanisms: cgroup v2 files, pidfds, the subreaper, `/proc`.

pub mod cgroup;
pub mod cgroupfs;
pub mod errno;
pub mod mountinfo;
pub mod pidfd;
pub mod procfs;
pub mod reap;
pub mod signal;
pub mod subreaper;

use std::os::fd::OwnedFd;
use tokio::io::unix::AsyncFd;

/// Registers an owned fd (pidfd, inotify) with tokio's reactor for readability.
pub(crate) fn async_readable(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it until dropped, so the raw
    // fd stays open and names the same file description for the registration's whole life.
    Ok(unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?)
}

//! Process file descriptors: a handle on one process that a reused pid cannot redirect.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::process::{Pid, PidfdFlags};

use super::procfs;

/// An open pidfd and the pid it was opened for.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
    pid: Pid,
}

impl Pidfd {
    /// `pidfd_open(2)`. Only race-free for a child not yet reaped (its pid cannot be reused);
    /// for anything else use [`Pidfd::open_checked`].
    pub fn open(pid: Pid) -> std::io::Result<Self> {
        let fd = rustix::process::pidfd_open(pid, PidfdFlags::empty())?;
        Ok(Self { fd, pid })
    }

    /// A pidfd the kernel handed back with a new child (`clone3(CLONE_PIDFD)`).
    pub fn from_parts(fd: OwnedFd, pid: Pid) -> Self {
        Self { fd, pid }
    }

    /// Opens a pidfd for the process `(pid, starttime)`, or `None` when that process is gone
    /// (dead, or the pid now names another process). The start time is checked *after* opening:
    /// if it still matches, the pidfd was opened on that process.
    pub fn open_checked(pid: i32, starttime: u64) -> Option<Self> {
        let p = Pid::from_raw(pid)?;
        let fd = Self::open(p).ok()?;
        procfs::is_alive(pid, starttime).then_some(fd)
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// A second handle on the same process (the fd duplicated).
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self {
            fd: self.fd.try_clone()?,
            pid: self.pid,
        })
    }

    pub fn raw_pid(&self) -> i32 {
        self.pid.as_raw_nonzero().get()
    }

    /// Resolves once the process has exited (the pidfd polls readable, pidfd_open(2)).
    pub async fn exited(&self) -> std::io::Result<()> {
        let fd = crate::async_readable(self.fd.try_clone()?)?;
        let _ready = fd.readable().await?;
        Ok(())
    }

    /// One registration of the pidfd's readiness for many waits (see [`crate::exit_watch::ExitWatch`]).
    pub fn exit_watch(&self) -> std::io::Result<crate::exit_watch::ExitWatch> {
        crate::exit_watch::ExitWatch::new(Some(self.fd.try_clone()?))
    }

    /// Whether the process has exited (non-blocking poll of the pidfd).
    pub fn has_exited(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        matches!(poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0)
    }

    /// Whether this process, a child of the caller, is stopped by a signal right now.
    /// `waitid(P_PIDFD, WSTOPPED | WNOHANG | WNOWAIT)`: WNOWAIT leaves the stop to be reported
    /// again and never reaps, so asking takes nothing from another waiter. An error (ECHILD:
    /// not our child, or already reaped) answers `false`.
    pub fn is_stopped(&self) -> bool {
        use rustix::process::{WaitId, WaitIdOptions};
        let opts = WaitIdOptions::STOPPED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        matches!(
            rustix::process::waitid(WaitId::PidFd(self.fd.as_fd()), opts),
            Ok(Some(st)) if st.stopped()
        )
    }

    /// Whether any of the processes has exited: one non-blocking poll(2) on all their pidfds.
    /// An error (EINTR, ENOMEM) also answers `true`: it only means "look again".
    pub fn any_exited(fds: &[Pidfd]) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut polled: Vec<PollFd<'_>> =
            fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
        let now = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        !matches!(poll(&mut polled, Some(&now)), Ok(0))
    }
}

impl AsFd for Pidfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

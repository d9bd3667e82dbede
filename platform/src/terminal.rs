//! The controlling terminal's foreground process group, for a leader that starts a process group
//! of its own (every leader does: the tree never shares reaper's group).
//!
//! A terminal lets only its foreground group read from it: a process of a background group that
//! reads gets SIGTTIN and stops. A shell puts each job in a group of its own and hands it the
//! terminal; reaper, which the shell started as the job, must do the same for the leader's new
//! group, or an interactive command (an editor, a TUI agent, a password prompt) stops at its
//! first read and the run hangs. And it takes the terminal back when the run ends, and when the
//! leader is stopped by Ctrl-Z, so the job-control dance with the user's shell keeps working.
//!
//! `tcsetpgrp(3)` from a background group raises SIGTTOU unless it is blocked: every call here
//! blocks it around the call.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The controlling terminal, held while reaper's group was its foreground group at the start.
#[derive(Debug)]
pub struct Foreground {
    tty: OwnedFd,
    own_group: i32,
}

impl Foreground {
    /// The controlling terminal, if there is one, this process's group is its foreground group
    /// now (reaper runs as a foreground job), and reaper's stdout is not a pipe or a socket.
    /// `None` otherwise: nothing to hand over. In `reaper run -- cmd | less`, reaper's group is
    /// the whole pipeline: handing the terminal to `cmd` would stop `less` at its next read, so
    /// `cmd` there reads the terminal as timeout(1)'s COMMAND does, as a background job (a read
    /// stops it). A pipe into reaper (`ls | reaper run -- fzf`) comes from a program that
    /// rarely reads the terminal: the hand-over is right there.
    pub fn if_foreground() -> Option<Self> {
        let piped = rustix::fs::fstat(rustix::stdio::stdout()).is_ok_and(|st| {
            let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
            matches!(
                kind,
                rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
            )
        });
        if piped {
            return None;
        }
        let tty = rustix::fs::open(
            "/dev/tty",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()?;
        let own_group = crate::group::own_process_group();
        // SAFETY: tcgetpgrp(3) only reads the terminal's state.
        let fg = unsafe { libc::tcgetpgrp(tty.as_raw_fd()) };
        (own_group > 0 && fg == own_group).then_some(Self { tty, own_group })
    }

    /// The terminal's fd, for the child's side of the hand-over ([`child_take_foreground`]).
    pub fn raw_fd(&self) -> RawFd {
        self.tty.as_raw_fd()
    }

    /// The terminal's foreground group now.
    fn foreground(&self) -> i32 {
        // SAFETY: tcgetpgrp(3) only reads the terminal's state.
        unsafe { libc::tcgetpgrp(self.tty.as_raw_fd()) }
    }

    /// Makes `group` the terminal's foreground group — only while reaper's group holds it:
    /// a reaper continued in the background (`bg`, `kill %1`) must not take the terminal from
    /// the user's shell. Returns whether it moved.
    pub fn give_to(&self, group: i32) -> std::io::Result<bool> {
        if self.foreground() != self.own_group {
            return Ok(false);
        }
        set_foreground(self.tty.as_raw_fd(), group).map(|()| true)
    }

    /// Makes reaper's own group the foreground group again — only if `group` (the leader's)
    /// holds it; whoever else has it (the user's shell) keeps it.
    pub fn take_back_from(&self, group: i32) -> std::io::Result<bool> {
        if self.foreground() != group {
            return Ok(false);
        }
        set_foreground(self.tty.as_raw_fd(), self.own_group).map(|()| true)
    }

    /// After a spawn that failed between the child's hand-over and its exec: the foreground
    /// group is the dead child's, or still reaper's.
    pub fn take_back_after_failed_spawn(&self) {
        if self.foreground() != self.own_group {
            let _ = set_foreground(self.tty.as_raw_fd(), self.own_group);
        }
    }
}

fn set_foreground(tty: RawFd, group: i32) -> std::io::Result<()> {
    // SAFETY: plain libc calls on a valid fd and local signal sets.
    unsafe {
        let (mut ttou, mut old): (libc::sigset_t, libc::sigset_t) =
            (std::mem::zeroed(), std::mem::zeroed());
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, &mut old);
        let r = libc::tcsetpgrp(tty, group);
        let err = std::io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if r == 0 {
            Ok(())
        } else {
            Err(err)
        }
    }
}

/// In a child between fork and exec, after `setpgid(0, 0)`: makes the child's new group the
/// foreground group of `tty`, so it can read the terminal from its first instruction (the
/// parent does the same after the fork; whichever comes first wins the race harmlessly).
/// Async-signal-safe. Returns 0 or the errno.
///
/// # Safety
/// Only between fork and exec, with `tty` an open terminal fd.
pub unsafe fn child_take_foreground(tty: RawFd) -> i32 {
    // SAFETY: the signal sets are local plain data (valid zeroed, then initialized by
    // sigemptyset); tcsetpgrp gets the terminal fd the caller vouches for; no allocation, so
    // safe between fork and exec.
    unsafe {
        let (mut ttou, mut old): (libc::sigset_t, libc::sigset_t) =
            (std::mem::zeroed(), std::mem::zeroed());
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &ttou, &mut old);
        let r = libc::tcsetpgrp(tty, libc::getpid());
        let errno = if r == 0 {
            0
        } else {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        errno
    }
}

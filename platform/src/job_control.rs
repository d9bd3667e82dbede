//! The job-control stops this process gets (SIGTSTP, SIGTTIN, SIGTTOU), each with who sent it.
//!
//! A process that passes a Ctrl-Z on to a tree in another process group must tell the user's
//! stop from one the tree sends (`kill -TSTP $PPID`): tokio's signal streams say only that the
//! signal came, so the handler here reads the `siginfo` the kernel fills in. `si_code`
//! `SI_KERNEL` is the terminal (the line discipline's `kill_pgrp(…, priv=1)`: Ctrl-Z, a background
//! read or write); `SI_USER` (`kill`) and `SI_TKILL` (`tgkill`) carry the sender's pid as the
//! kernel wrote it (0 when the sender is not visible in this PID namespace); any other negative
//! code (`sigqueue`, `rt_sigqueueinfo`) carries a pid the sender chose. The handler writes one
//! fixed-size record per signal down a non-blocking pipe, with the time it arrived
//! (`CLOCK_BOOTTIME`, the clock of a process's start time in `/proc`), so that a pid reused
//! after the signal can be told from its sender.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::Signal;

/// The signals handled here.
pub const STOPS: [Signal; 3] = [Signal::TSTP, Signal::TTIN, Signal::TTOU];

/// Who sent a job-control stop, as far as the kernel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSender {
    /// The kernel, for the terminal: Ctrl-Z, or a background read or write of it.
    Terminal,
    /// A process, by `kill(2)` or `tgkill(2)`: `pid` as the kernel wrote it (0: a process this
    /// PID namespace does not see, so one outside it), `at` the signal's arrival, as time since
    /// boot (`CLOCK_BOOTTIME`).
    Process {
        /// The sender's pid in this process's PID namespace.
        pid: i32,
        /// When the signal arrived, since boot.
        at: Duration,
    },
    /// A sender that wrote its own `siginfo` (`sigqueue(3)`): nothing in it is proof.
    Unproven,
}

/// One job-control stop and its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStop {
    /// SIGTSTP, SIGTTIN or SIGTTOU.
    pub signal: Signal,
    /// Who sent it.
    pub sender: StopSender,
}

/// The pipe's write end, for the handler (-1 before [`install`]).
static WRITE_END: AtomicI32 = AtomicI32::new(-1);

/// What the handler writes: well under `PIPE_BUF`, so each write is whole or not at all.
const RECORD: usize = 24;

/// The read end of the pipe the handler writes each stop to.
pub struct JobStops {
    read: AsyncFd<OwnedFd>,
}

/// Installs the handler for [`STOPS`]. Once per process: a second call fails (the first one's
/// receiver is the only one). A handler, unlike `SIG_IGN`, is not inherited through exec.
pub fn install() -> io::Result<JobStops> {
    let (read, write) = crate::sent::nonblocking_pipe()?;
    if WRITE_END
        .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the job-control handler is installed already",
        ));
    }
    // The handler writes to it for the rest of the process's life.
    std::mem::forget(write);
    for sig in STOPS {
        // SAFETY: `on_stop` is async-signal-safe (atomics, clock_gettime(2), write(2)); the
        // struct is zeroed plain data, then filled.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig.as_raw(), &sa, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(JobStops {
        read: crate::async_readable(read)?,
    })
}

/// The clock `/proc/PID/stat`'s start time counts on.
#[cfg(target_os = "linux")]
const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(not(target_os = "linux"))]
const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;

extern "C" fn on_stop(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO; `si_pid` is read only for the
    // codes whose siginfo carries it (kill, tgkill, sigqueue).
    let (code, pid) = unsafe { info.as_ref() }.map_or((0, 0), |i| {
        let pid = if i.si_code <= 0 {
            // SAFETY: as above.
            unsafe { i.si_pid() }
        } else {
            0
        };
        (i.si_code, pid)
    });
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes a local; async-signal-safe.
    unsafe { libc::clock_gettime(CLOCK, &mut now) };
    let at = (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64);
    let mut rec = [0u8; RECORD];
    rec[0..4].copy_from_slice(&sig.to_ne_bytes());
    rec[4..8].copy_from_slice(&code.to_ne_bytes());
    rec[8..12].copy_from_slice(&pid.to_ne_bytes());
    rec[16..24].copy_from_slice(&at.to_ne_bytes());
    let fd = WRITE_END.load(Ordering::SeqCst);
    // SAFETY: write(2) of a local array to our own non-blocking pipe; a full pipe drops the
    // record (a flood of stops: the reader is behind on the same ones).
    unsafe {
        libc::write(fd, rec.as_ptr().cast(), RECORD);
    }
}

/// Who `si_code` and `si_pid` say sent a stop (Linux's codes; elsewhere a sender's pid is taken
/// as `kill(2)`'s, and anything else as the terminal's).
fn sender(code: i32, pid: i32, at: Duration) -> StopSender {
    #[cfg(target_os = "linux")]
    return match code {
        libc::SI_KERNEL => StopSender::Terminal,
        libc::SI_USER | libc::SI_TKILL => StopSender::Process { pid, at },
        _ => StopSender::Unproven,
    };
    // <sys/signal.h>: SI_USER is 0x10001 on macOS (the libc crate does not name it there).
    #[cfg(not(target_os = "linux"))]
    const SI_USER: i32 = 0x10001;
    #[cfg(not(target_os = "linux"))]
    match code {
        SI_USER if pid > 0 => StopSender::Process { pid, at },
        _ => StopSender::Terminal,
    }
}

impl JobStops {
    /// The next job-control stop.
    pub async fn recv(&mut self) -> io::Result<JobStop> {
        loop {
            let mut guard = self.read.readable().await?;
            let mut rec = [0u8; RECORD];
            match guard.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut rec)?)) {
                Ok(Ok(RECORD)) => {
                    let int = |at: usize| {
                        i32::from_ne_bytes([rec[at], rec[at + 1], rec[at + 2], rec[at + 3]])
                    };
                    let mut ns = [0u8; 8];
                    ns.copy_from_slice(&rec[16..24]);
                    let at = Duration::from_nanos(u64::from_ne_bytes(ns));
                    if let Some(signal) = crate::signal::from_raw(int(0)) {
                        return Ok(JobStop {
                            signal,
                            sender: sender(int(4), int(8), at),
                        });
                    }
                }
                Ok(Ok(0)) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                // Records are written whole: a short one cannot happen.
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn codes_name_the_sender() {
        let at = Duration::from_secs(7);
        assert_eq!(sender(libc::SI_KERNEL, 0, at), StopSender::Terminal);
        assert_eq!(
            sender(libc::SI_USER, 42, at),
            StopSender::Process { pid: 42, at }
        );
        assert_eq!(
            sender(libc::SI_TKILL, 42, at),
            StopSender::Process { pid: 42, at }
        );
        assert_eq!(sender(libc::SI_QUEUE, 42, at), StopSender::Unproven);
        assert_eq!(sender(-60, 42, at), StopSender::Unproven);
    }
}

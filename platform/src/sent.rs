//! Fault signals another process sent: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS and
//! SIGABRT end a process by default like SIGTERM does, and `kill -SEGV PID` is as much a request
//! to stop as `kill PID`. But the kernel raises the same signals for a real fault, which a
//! handler must never swallow (the faulting instruction would run again, for ever), so tokio
//! refuses some of them. The handler here tells the two apart by `si_code`: sent by a process
//! (`kill`, `sigqueue`, `tgkill`: `si_code <= 0`), the number goes down a pipe for the caller to
//! read; a fault, the default action is put back and the handler returns, so the instruction
//! faults again and the process dies of it as it would have without the handler.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use tokio::io::unix::AsyncFd;

use crate::Signal;

/// The signals handled here.
pub const FAULTS: [Signal; 7] = [
    Signal::SEGV,
    Signal::BUS,
    Signal::ILL,
    Signal::FPE,
    Signal::TRAP,
    Signal::SYS,
    Signal::ABORT,
];

/// The pipe's write end, for the handler (-1 before [`install`]).
static WRITE_END: AtomicI32 = AtomicI32::new(-1);

/// A close-on-exec, non-blocking pipe: `pipe2(2)` where there is one; macOS has none, and
/// nothing forks while `install` runs (it is called once, before any run).
pub(crate) fn nonblocking_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(not(target_os = "macos"))]
    {
        use rustix::pipe::PipeFlags;
        Ok(rustix::pipe::pipe_with(
            PipeFlags::CLOEXEC | PipeFlags::NONBLOCK,
        )?)
    }
    #[cfg(target_os = "macos")]
    {
        use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
        use rustix::io::{fcntl_setfd, FdFlags};
        let (read, write) = rustix::pipe::pipe()?;
        for fd in [&read, &write] {
            fcntl_setfd(fd, FdFlags::CLOEXEC)?;
            fcntl_setfl(fd, fcntl_getfl(fd)? | OFlags::NONBLOCK)?;
        }
        Ok((read, write))
    }
}

/// The read end of the pipe the handler writes sent signals to.
pub struct SentFaults {
    read: AsyncFd<OwnedFd>,
}

/// Installs the handler for [`FAULTS`]. Once per process: a second call fails (the first one's
/// receiver is the only one).
pub fn install() -> io::Result<SentFaults> {
    let (read, write) = nonblocking_pipe()?;
    if WRITE_END
        .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the fault-signal handler is installed already",
        ));
    }
    // The handler writes to it for the rest of the process's life.
    std::mem::forget(write);
    for sig in FAULTS {
        // SAFETY: `on_fault` is async-signal-safe (atomics, write(2), sigaction(2)); the struct
        // is zeroed plain data, then filled; SA_ONSTACK lets a stack overflow's SIGSEGV reach
        // it on the alternate stack std sets up.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig.as_raw(), &sa, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(SentFaults {
        read: crate::async_readable(read)?,
    })
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO; reading its code is plain.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    if code > 0 {
        // A fault: the default action again, and the instruction faults once more on return.
        // SAFETY: SIG_DFL installs no handler.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
        return;
    }
    let fd = WRITE_END.load(Ordering::SeqCst);
    let byte = sig as u8;
    // SAFETY: write(2) of one byte of a local to our own non-blocking pipe; a full pipe drops
    // the byte (a signal is pending already).
    unsafe {
        libc::write(fd, (&byte as *const u8).cast(), 1);
    }
}

impl SentFaults {
    /// The next fault signal another process sent.
    pub async fn recv(&mut self) -> io::Result<Signal> {
        loop {
            let mut guard = self.read.readable().await?;
            let mut byte = [0u8; 1];
            match guard.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut byte)?)) {
                Ok(Ok(1)) => {
                    if let Some(sig) = crate::signal::from_raw(i32::from(byte[0])) {
                        return Ok(sig);
                    }
                }
                Ok(Ok(_)) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }
}

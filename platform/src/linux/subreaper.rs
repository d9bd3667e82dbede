//! `PR_SET_CHILD_SUBREAPER`: orphans of our descendants reparent to us instead of to PID 1, so
//! the tree never leaves reaper's sight (prctl(2)). They must then be reaped by us: see
//! [`crate::reap`].

use std::io;

pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

pub fn is_subreaper() -> bool {
    matches!(rustix::process::child_subreaper(), Ok(Some(_)))
}

/// Whether this process may become a child subreaper, found without becoming one: it is one
/// already, or a forked child of it could become one (the attribute is per process, and
/// prctl(2) needs no privilege for it, so what the child may, this process may). A process
/// that becomes one keeps every orphan of its descendants that reparents meanwhile: a library
/// must not do that to a program's own children to answer a question.
pub fn allowed() -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    if is_subreaper() {
        return Ok(true);
    }
    let (from_child, to_parent) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // No reaping thread takes the probe's status before `reap` below.
    let spawning = crate::reap::hold();
    // SAFETY: the child of a multithreaded process calls only async-signal-safe functions
    // (prctl, write, _exit) on memory it owns (a stack byte, an fd it inherited), then exits
    // without running any destructor or atexit handler.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above: the forked child.
        unsafe {
            let ok = u8::from(libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
            libc::write(to_parent.as_raw_fd(), std::ptr::addr_of!(ok).cast(), 1);
            libc::_exit(0);
        }
    }
    let err = io::Error::last_os_error();
    drop(to_parent);
    let Some(child) = rustix::process::Pid::from_raw(pid) else {
        drop(spawning);
        return Err(err);
    };
    let mut answer = [0u8; 1];
    let read = loop {
        match rustix::io::read(&from_child, &mut answer) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r,
        }
    };
    spawning.reap(child);
    Ok(matches!(read, Ok(1)) && answer[0] == 1)
}

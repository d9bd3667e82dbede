//! Process groups and sessions: the caller's group, any process's session.

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

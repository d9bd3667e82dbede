//! Decoding "the process is already gone" in one place.
//!
//! std maps ESRCH to `ErrorKind::Uncategorized`, so a `NotFound` check silently misses it; decode
//! by errno here instead.

use std::io;

/// Whether an error means the target no longer exists: ESRCH (no such process), ECHILD (nothing
/// left to wait for) or ENOENT (its `/proc` or cgroupfs entry is gone). Callers treat these as
/// outcomes, not failures.
pub fn is_gone(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc_errno::ESRCH) | Some(libc_errno::ECHILD) | Some(libc_errno::ENOENT)
    )
}

/// The same for a rustix error.
pub fn is_gone_rustix(err: rustix::io::Errno) -> bool {
    err == rustix::io::Errno::SRCH
        || err == rustix::io::Errno::CHILD
        || err == rustix::io::Errno::NOENT
}

/// An error's words as strerror(3) has them, without std's ` (os error N)`.
pub fn strerror(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rsplit_once(" (os error") {
        Some((text, _)) => text.to_owned(),
        None => s,
    }
}

mod libc_errno {
    pub const ENOENT: i32 = rustix::io::Errno::NOENT.raw_os_error();
    pub const ESRCH: i32 = rustix::io::Errno::SRCH.raw_os_error();
    pub const ECHILD: i32 = rustix::io::Errno::CHILD.raw_os_error();
}

//! The calling thread's credentials, and only its own: Linux keeps credentials per thread, and
//! the raw `setres*id`/`setgroups` system calls change only the caller's (glibc's wrappers
//! change every thread's). A thread that became a user checks permissions — signals, files,
//! `/proc/PID/environ` — as that user, with no capability left.

use rustix::process::{Gid, Uid};

/// Makes the calling thread user `uid` with group `gid` and no supplementary groups, for good
/// (real, effective and saved ids: it cannot come back). Needs CAP_SETUID and CAP_SETGID.
pub fn become_on_this_thread(uid: u32, gid: u32) -> std::io::Result<()> {
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    rustix::thread::set_thread_groups(&[])?;
    rustix::thread::set_thread_res_gid(gid, gid, gid)?;
    rustix::thread::set_thread_res_uid(uid, uid, uid)?;
    Ok(())
}

//! `PR_SET_CHILD_SUBREAPER`: orphans of our descendants reparent to us instead of to PID 1, so
//! the tree never leaves reaper's sight (prctl(2)). They must then be reaped by us: see
//! [`crate::reap`], which also asks whether this process may become one.

use std::io;

pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

pub fn is_subreaper() -> bool {
    matches!(rustix::process::child_subreaper(), Ok(Some(_)))
}

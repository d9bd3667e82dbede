//! No guardian outside Linux. The guardian names a run's tree by its cgroup, and only Linux
//! has cgroups: the pgid backend's groups and sessions live in reaper's memory alone, so once
//! reaper is SIGKILLed nothing could find the tree again (README: what pgid does not contain).
//!
//! `Guardian` has no values, so every `Option<Arc<Guardian>>` of the shared run code is `None`
//! and that code needs no `cfg` of its own.

#[derive(Debug)]
pub enum Guardian {}

impl Guardian {
    pub fn spawn() -> Result<Guardian, String> {
        Err("the guardian is Linux-only (it cleans up cgroups)".into())
    }

    pub fn pid(&self) -> i32 {
        match *self {}
    }

    pub fn done(&self) {
        match *self {}
    }

    pub fn pausing(&self) {
        match *self {}
    }

    pub fn resumed(&self) {
        match *self {}
    }
}

/// Nothing to fork before the runtime: reaper is always the parent here.
pub fn fork_early() -> Option<u8> {
    None
}

/// `reaper guardian PID STARTTIME`, which reaper itself only starts on Linux.
pub fn main(_reaper_pid: i32, _reaper_start: u64) -> u8 {
    eprintln!("reaper: the guardian is Linux-only");
    125
}

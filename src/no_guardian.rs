//! No guardian outside Linux. The guardian names a run's tree by its cgroup, and only Linux
//! has cgroups: the pgid backend's groups and sessions live in this process's memory alone, so
//! once it is SIGKILLed nothing could find the tree again (what pgid does not contain).
//!
//! `Guardian` has no values, so every `Option<Arc<Guardian>>` of the shared run code is `None`
//! and that code needs no `cfg` of its own.

use std::path::Path;
use std::sync::Arc;

pub use crate::error::GuardianError;

/// What bounds a stop of this process's own job (the guardian's, Linux only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pause {
    pub job: Option<crate::Identity>,
    pub left: Option<std::time::Duration>,
}

/// The guardian, which exists on Linux only: here every way to start one fails with
/// [`GuardianError::NotLinux`].
#[derive(Debug)]
pub enum Guardian {}

impl Guardian {
    /// Fails: the guardian is Linux-only.
    pub fn fork() -> Result<Arc<Guardian>, GuardianError> {
        Err(GuardianError::NotLinux)
    }

    /// Fails: the guardian is Linux-only.
    pub fn exec(_command: std::process::Command) -> Result<Arc<Guardian>, GuardianError> {
        Err(GuardianError::NotLinux)
    }

    /// Says the guardian is Linux-only and returns 125.
    pub fn serve(_reaper_pid: i32, _reaper_starttime: u64) -> u8 {
        eprintln!("reaper: {}", GuardianError::NotLinux);
        125
    }

    /// The guardian's pid.
    pub fn pid(&self) -> i32 {
        match *self {}
    }

    /// This process's teardown is complete.
    pub fn done(&self) {
        match *self {}
    }

    pub(crate) fn pausing(&self, _pause: Pause) {
        match *self {}
    }

    pub(crate) fn resumed(&self) {
        match *self {}
    }
}

impl crate::containment::Watcher for Guardian {
    fn watch(&self, _dir: &Path) {
        match *self {}
    }

    fn process(&self) -> crate::Identity {
        match *self {}
    }
}

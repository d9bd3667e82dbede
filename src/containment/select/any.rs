//! [`AnyBackend`]: the backend a run got, one variant per backend.

use reaper_platform::{Pid, Signal};
use tokio::time::Instant;

#[cfg(target_os = "linux")]
use crate::containment::{cgroup, subreaper};
use crate::containment::{pgid, Backend, BackendKind, Capabilities, Error, Escapee, Kept, Process};

/// The backend a run got, as one type so the run layer needs no generics.
pub enum AnyBackend {
    #[cfg(target_os = "linux")]
    Cgroup(cgroup::CgroupBackend),
    #[cfg(target_os = "linux")]
    Subreaper(subreaper::SubreaperBackend),
    Pgid(pgid::PgidBackend),
}

impl AnyBackend {
    pub fn cgroup_path(&self) -> Option<&std::path::Path> {
        match self {
            #[cfg(target_os = "linux")]
            AnyBackend::Cgroup(b) => Some(b.cgroup().path()),
            _ => None,
        }
    }

    /// The run cgroup's directory, for a leader created inside it by
    /// `clone3(CLONE_INTO_CGROUP)` (see [`crate::containment::spawn`]).
    #[cfg(target_os = "linux")]
    pub fn clone_into_cgroup(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self {
            AnyBackend::Cgroup(b) => Some(b.dir_fd()),
            _ => None,
        }
    }
}

macro_rules! each {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            #[cfg(target_os = "linux")]
            AnyBackend::Cgroup($b) => $e,
            #[cfg(target_os = "linux")]
            AnyBackend::Subreaper($b) => $e,
            AnyBackend::Pgid($b) => $e,
        }
    };
}

impl Backend for AnyBackend {
    fn kind(&self) -> BackendKind {
        each!(self, b => b.kind())
    }
    fn capabilities(&self) -> Capabilities {
        each!(self, b => b.capabilities())
    }
    fn kill_label(&self) -> &'static str {
        each!(self, b => b.kill_label())
    }
    fn prepare(&self, cmd: &mut std::process::Command) {
        each!(self, b => b.prepare(cmd))
    }
    fn spawned(&mut self, leader: Pid) {
        each!(self, b => b.spawned(leader))
    }
    fn members(&self) -> Vec<Process> {
        each!(self, b => b.members())
    }
    fn escapees(&self) -> Vec<Escapee> {
        each!(self, b => b.escapees())
    }
    fn is_empty(&self) -> bool {
        each!(self, b => b.is_empty())
    }
    fn pids(&self) -> Vec<i32> {
        each!(self, b => b.pids())
    }
    fn signal_all(&self, sig: Signal) -> Vec<Process> {
        each!(self, b => b.signal_all(sig))
    }
    fn kill_all(&self) -> Vec<Process> {
        each!(self, b => b.kill_all())
    }
    async fn wait_empty(&mut self, deadline: Instant) -> bool {
        each!(self, b => b.wait_empty(deadline).await)
    }
    fn release(&mut self) -> Result<(), Error> {
        each!(self, b => b.release())
    }
    fn cleanup_later(&mut self) -> Option<Box<dyn FnOnce(std::time::Instant) + Send>> {
        each!(self, b => b.cleanup_later())
    }
    fn keep(&mut self, limits: &crate::limits::Limits) -> Result<Kept, Error> {
        each!(self, b => b.keep(limits))
    }
    fn spawn_error(&self, e: std::io::Error) -> std::io::Error {
        each!(self, b => b.spawn_error(e))
    }
}

//! `reaper audit --kill`: ends the processes the caller chose, each named by pid and start
//! time, through a pidfd opened and checked on that process — never a pid alone, never a
//! name. Each is stopped first (SIGSTOP: a stopped process cannot fork), then killed.

use serde::Serialize;

use crate::containment::{sigstop, Process};
use crate::Identity;
use reaper_platform::linux::procfs;

/// What [`kill`] did to one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Killed {
    /// The process.
    pub pid: i32,
    /// Its start time.
    pub starttime: u64,
    /// `killed`, or `gone` (it had exited, or its pid names another process now).
    pub result: &'static str,
}

/// SIGSTOPs, then SIGKILLs, each of `targets` that is still the process it names.
pub fn kill(targets: &[Identity]) -> Vec<Killed> {
    let live: Vec<Process> = targets
        .iter()
        .filter_map(|t| {
            procfs::stat(t.pid)
                .ok()
                .filter(|s| s.starttime == t.starttime && !s.is_dead())
                .map(Process::from)
        })
        .collect();
    let killed: Vec<Identity> =
        sigstop::stop(|round| if round == 0 { live.clone() } else { Vec::new() })
            .kill()
            .iter()
            .map(Process::identity)
            .collect();
    targets
        .iter()
        .map(|t| Killed {
            pid: t.pid,
            starttime: t.starttime,
            result: if killed.contains(t) { "killed" } else { "gone" },
        })
        .collect()
}

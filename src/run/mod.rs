//! A run's life: spawn into containment, watch the leader through its pidfd, stop the tree
//! (first signal to every member, grace, kill), report an [`Outcome`]. Crate-private: the
//! public handle is [`crate::Child`], whose supervisor (`crate::supervise`) drives this.
//!
//! ```text
//! spawn ─► Running ──leader exits──► Exited ─► Lingering (linger) ─► Stopping ─► Reaped
//!           │   └──stdin EOF──► Allowance ──leader exits──────────────► Stopping
//!           └── timeout / signal / cancel / parent died / shutdown ───► Stopping ─► Reaped
//! ```
//! This module owns the mechanics of each state; the supervisor decides every arrow from the
//! caller's [`crate::supervise::Plan`] and requests; the stop sequence (`stop`) executes the
//! Stopping state; `finish` the last.
//!
//! | module     | concern                                                              |
//! |------------|----------------------------------------------------------------------|
//! | `start`    | [`Run::start`]: containment, spawn, pidfd, the terminal handed over  |
//! | `spawn`    | the leader's spawn into containment (clone3, or a join before exec)  |
//! | `leader`   | the leader: pidfd wait, reaping, job control and the terminal        |
//! | `outside`  | whether a job-control stop came from outside the run                 |
//! | `stop`     | the stop sequence: first signal, grace, SIGKILL rounds; forwarding   |
//! | `priority` | reaper's own scheduling: raised for the run, real time to kill       |
//! | `finish`   | the run's end: survivors, cgroup removal, the [`Outcome`]; `keep`    |
//! | `dropped`  | a run dropped before its end: cleanup threads; the exit hook, which  |
//! |            | also kills the runs still alive at `exit`                            |

mod dropped;
mod finish;
mod leader;
mod outside;
mod priority;
pub(crate) mod spawn;
mod spec;
mod start;
mod stop;

use std::collections::HashSet;
use std::sync::Arc;

#[cfg(target_os = "linux")]
use crate::containment::cgroup::limits;
use crate::containment::select::AnyBackend;
use crate::containment::{self, Backend};
use crate::event::EventSink;
use crate::process::{Escapee, Process};
use crate::Guardian;
use leader::Leader;
use reaper_platform::{signal, ExitStatus, Signal};
pub(crate) use spec::Spec;
pub use spec::Stdio;
pub(crate) use start::Pipes;
use tokio::time::Instant;

/// A running, contained command.
pub(crate) struct Run {
    argv: Vec<String>,
    backend: AnyBackend,
    pub(crate) leader: Leader,
    pub(crate) sink: EventSink,
    started: Instant,
    stop_at: Option<Instant>,
    /// The processes a stop went for, by pid: every one alive when the stop began (whoever ended
    /// it: reaper's signals, or the leader stopping its own tree), and every one reaper killed
    /// after; `finish` counts those that are gone. A pid is not reused within one teardown: the
    /// killed processes are ours to reap, or PID 1's, and the tree forks no more.
    stopped: HashSet<i32>,
    /// `finish` or `keep` ran; otherwise dropping the run kills its tree (see `Drop`).
    ended: bool,
    /// Why `auto` fell back from the cgroup backend, if it did.
    pub warning: Option<crate::ContainError>,
    guardian: Option<Arc<Guardian>>,
    /// The limits set on the run cgroup.
    limits: crate::Limits,
    /// Whether the kill pass runs real time ([`crate::ContainOptions::raise_priority`]).
    raise_priority: bool,
    /// The run's record and control socket (see [`crate::runs`]).
    #[cfg(target_os = "linux")]
    registration: Option<crate::runs::registration::Registration>,
    /// A root sandbox's host ids, leased until the run is over.
    #[cfg(target_os = "linux")]
    sandbox_ids: Option<crate::containment::sandbox::IdLease>,
    /// Killed by the exit hook if this process exits while the run lives (see `dropped`).
    _live: dropped::Live,
}

impl Run {
    pub fn leader_pid(&self) -> i32 {
        self.leader.handle.raw_pid()
    }

    pub fn backend_kind(&self) -> containment::BackendKind {
        self.backend.kind()
    }

    pub fn cgroup_path(&self) -> Option<String> {
        self.backend.cgroup_path().map(|p| p.display().to_string())
    }

    /// The systemd unit delegated to reaper that holds the run cgroup, if any.
    pub fn scope(&self) -> Option<String> {
        #[cfg(target_os = "linux")]
        if self.backend.cgroup_path().is_some() {
            return containment::cgroup::delegate::done()
                .and_then(|d| d.unit())
                .map(str::to_owned);
        }
        None
    }

    /// Live processes of the run.
    pub fn members(&self) -> Vec<Process> {
        self.backend.members()
    }

    /// How many processes the run has, as cheaply as the backend can tell (for progress
    /// reports; may include one that is exiting).
    pub fn process_count(&self) -> usize {
        self.backend.pids().len()
    }

    /// The processes of the run seen outside its cgroup so far (see `Backend::escapees`).
    pub fn escapees(&self) -> Vec<Escapee> {
        self.backend.escapees()
    }

    /// Waits for the leader to exit and reaps it, reaping orphans meanwhile. Idempotent.
    pub(crate) async fn wait_leader(&mut self) -> Option<ExitStatus> {
        self.leader.wait().await
    }

    /// reaper is about to stop the leader itself (`reaper check`'s interrupt): such a stop is
    /// not the user's Ctrl-Z, so it is not passed on to reaper's job.
    pub fn end_job_control(&mut self) {
        self.leader.job_control = false;
    }

    /// Sends `sig` to the leader alone, through its handle.
    pub fn signal_leader(&self, sig: Signal) -> bool {
        !self.leader.gone
            && matches!(
                signal::to_handle(&self.leader.handle, sig),
                Ok(signal::Delivery::Sent)
            )
    }

    /// The run cgroup's statistics (cgroup backend only).
    fn usage(&self) -> Option<crate::Usage> {
        #[cfg(target_os = "linux")]
        if let Some(dir) = self.backend.cgroup_path() {
            return Some(crate::Usage::read(dir));
        }
        None
    }

    /// The run's memory now, when it has a memory limit.
    pub fn memory_now(&self) -> Option<u64> {
        #[cfg(target_os = "linux")]
        if let Some(dir) = self.backend.cgroup_path() {
            return limits::memory_now(dir);
        }
        None
    }

    pub fn limits(&self) -> crate::Limits {
        self.limits
    }

    /// The run's id, when it has one.
    #[cfg(target_os = "linux")]
    pub fn id(&self) -> Option<crate::runs::RunId> {
        self.registration.as_ref().map(|r| r.id())
    }

    /// Where requests from other processes come in (`reaper stop`, `reaper kill`).
    #[cfg(target_os = "linux")]
    pub(crate) fn control(&self) -> Option<Arc<crate::runs::control::Control>> {
        self.registration.as_ref().and_then(|r| r.control.clone())
    }

    /// The run is now in `phase`, as its record says.
    #[cfg(target_os = "linux")]
    pub(crate) fn set_phase(
        &mut self,
        phase: crate::runs::Phase,
        reason: Option<crate::StopReason>,
    ) {
        if let Some(r) = self.registration.as_mut() {
            r.phase(phase, reason);
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;

/// See [`crate::own_every_child`]: recorded in the reap layer, which then reaps any child, and
/// which the backend selection asks before it takes every orphan for a run's (subreaper).
pub(crate) fn own_every_child() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    reaper_platform::linux::subreaper::become_subreaper()?;
    reaper_platform::reap::reap_every_child(true);
    Ok(())
}

//! A run's life: spawn into containment, watch the leader through its pidfd, stop the tree
//! (first signal to every member, grace, kill), report an [`Outcome`].
//!
//! ```text
//! spawn ─► Running ──leader exits──► Exited ─► Lingering (--linger) ─► Stopping ─► Reaped
//!           │   └──stdin EOF──► Allowance ──leader exits──────────────► Stopping
//!           └── timeout / signal / cancel / parent died / shutdown ───► Stopping ─► Reaped
//! ```
//! This module owns the policy (which signal, how long to wait, when to escalate); the
//! containment backends only provide the mechanisms. The supervisor (`supervise`) decides every
//! arrow of the diagram from the face's [`Plan`] and [`Request`]s; the stop sequence (`stop`)
//! executes the Stopping state; `finish` the last.
//!
//! | module      | concern                                                               |
//! |-------------|-----------------------------------------------------------------------|
//! | `start`     | [`Run::start`]: containment, spawn, pidfd, the terminal handed over   |
//! | `command`   | the leader's command line and its spawn into containment              |
//! | `error`     | [`StartError`]: why a run could not start, typed until a face prints it |
//! | `leader`    | the leader: pidfd wait, reaping, job control and the terminal         |
//! | `supervise` | the one supervisor: what the run waits for, when and how it stops     |
//! | `stop`      | the stop sequence: first signal, grace, SIGKILL rounds; forwarding    |
//! | `finish`    | the run's end: survivors, cgroup removal, the [`Outcome`]; `keep`     |
//! | `event`     | the events a run emits                                                |
//! | `outcome`   | the outcome and the one exit-status translation                       |

pub mod command;
mod error;
pub mod event;
mod finish;
mod leader;
pub mod outcome;
mod start;
mod stop;
pub mod supervise;

use std::collections::HashSet;
use std::sync::Arc;

#[cfg(target_os = "linux")]
use crate::containment::limits;
use crate::containment::{self, Backend, Containment, Member};
use crate::guardian::Guardian;
pub use command::{Io, LeaderCommand};
pub use error::StartError;
pub use event::{Event, EventSink};
use leader::Leader;
pub use outcome::{Outcome, StopReason};
use reaper_platform::{signal, ExitStatus, Signal};
pub use start::Pipes;
pub use supervise::{Plan, Request, Requests, Step, StopSpec, Supervisor, Target};
use tokio::time::Instant;

/// A running, contained command.
pub struct Run {
    argv: Vec<String>,
    backend: Backend,
    leader: Leader,
    sink: EventSink,
    started: Instant,
    stop_at: Option<Instant>,
    /// The processes a stop went for, by pid: every one alive when the stop began (whoever ended
    /// it: reaper's signals, or the leader stopping its own tree), and every one reaper killed
    /// after; `finish` counts those that are gone. A pid is not reused within one teardown: the
    /// killed processes are ours to reap, or PID 1's, and the tree forks no more.
    stopped: HashSet<i32>,
    /// `finish` or `keep` ran; otherwise dropping the run kills its tree (see `Drop`).
    ended: bool,
    /// The fallback warning, if `auto` fell back.
    pub warning: Option<String>,
    guardian: Option<Arc<Guardian>>,
    /// The limits set on the run cgroup.
    limits: containment::limits::Limits,
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
            return containment::delegate::done()
                .and_then(|d| d.unit())
                .map(str::to_owned);
        }
        None
    }

    /// The leader's exit code or signal name, once it has been reaped.
    pub fn leader_status_parts(&self) -> (Option<i32>, Option<String>) {
        outcome::status_parts(self.leader.status)
    }

    /// Live processes of the run.
    pub fn members(&self) -> Vec<Member> {
        self.backend.members()
    }

    /// How many processes the run has, as cheaply as the backend can tell (for progress
    /// reports; may include one that is exiting).
    pub fn process_count(&self) -> usize {
        self.backend.pids().len()
    }

    /// The processes of the run seen outside its cgroup so far (see `Containment::escapees`).
    pub fn escapees(&self) -> Vec<containment::Escapee> {
        self.backend.escapees()
    }

    /// Waits for the leader to exit and reaps it, reaping orphans meanwhile. Idempotent.
    pub(super) async fn wait_leader(&mut self) -> Option<ExitStatus> {
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
    fn usage(&self) -> Option<containment::limits::Usage> {
        #[cfg(target_os = "linux")]
        if let Some(dir) = self.backend.cgroup_path() {
            return Some(containment::limits::Usage::read(dir));
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

    pub fn limits(&self) -> containment::limits::Limits {
        self.limits
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;

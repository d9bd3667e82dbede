//! A run's end: the tree reaped, survivors listed, the cgroup removed, the [`Outcome`] built;
//! or the run kept alive (`check --keep`); or, dropped unfinished, its tree killed.

use std::path::PathBuf;

use reaper_platform::{reap, ExitStatus, Signal};
use tokio::time::Instant;

use super::stop::KILL_DEADLINE;
use super::Run;
use crate::containment::{self, Backend};
use crate::{Event, Outcome, StopReason, TeardownError};

impl Run {
    /// Ends the run without stopping it: whatever is alive keeps running (`check --keep`).
    /// Returns where it lives: the cgroup, renamed so no sweep takes it, or `None` for the
    /// subreaper backend (the processes are reaper's descendants, reparented when it exits).
    pub fn keep(mut self) -> Result<Option<PathBuf>, containment::Error> {
        self.ended = true;
        // The kept cgroup's name (`reaper-kept-…`) is not one the guardian takes over.
        let kept = self.backend.keep(&self.limits)?;
        #[cfg(target_os = "linux")]
        if let Some(r) = self.registration.take() {
            r.kept(kept.at.clone());
        }
        if let Some(e) = kept.unlimited {
            say!("reaper: warning: the kept processes run without their limits: {e}");
        }
        reap::unregister_leader(self.leader.handle.pid());
        Ok(kept.at)
    }

    /// Ends the run: reaps, lists survivors, removes the cgroup, builds the outcome.
    pub(crate) async fn finish(
        mut self,
        reason: StopReason,
        received_signal: Option<Signal>,
    ) -> Outcome {
        self.ended = true;
        // Stopped directly from outside while this process could not answer: the leader's
        // "exit" was that stop.
        #[cfg(target_os = "linux")]
        let reason = match self
            .registration
            .as_ref()
            .and_then(|r| r.ended_from_outside())
        {
            Some(how) if reason == StopReason::Exited => how.reason(),
            _ => reason,
        };
        // The leader is dead by now (the tree was stopped); collect its status.
        if !self.leader.gone {
            let _ = tokio::time::timeout(KILL_DEADLINE, self.leader.wait()).await;
        }
        reap::reap_orphans();
        // A second look, even after an exact empty stop: `populated` drops when the last
        // member passes cgroup_exit, a moment before its exit hands a child that had left the
        // cgroup to reaper (exit_notify). This later look, after reaping, can still see it.
        let left = self.backend.members();
        // Only what is gone was killed: a process that outlived SIGKILL (frozen by the cgroup
        // v1 freezer, stuck in uninterruptible sleep) is a survivor, not one more killed.
        let killed = self
            .stopped
            .iter()
            .filter(|pid| !left.iter().any(|m| m.pid == **pid))
            .count();
        let survivors = left;
        // Read before the cgroup is removed with them.
        let usage = self.usage();
        let error = if survivors.is_empty() {
            self.backend.release().err().map(TeardownError::Release)
        } else {
            Some(TeardownError::Survivors {
                count: survivors.len(),
                waited: KILL_DEADLINE,
            })
        };
        reap::unregister_leader(self.leader.handle.pid());
        let end = Instant::now();
        let escapees = self.backend.escapees();
        self.sink.emit(Event::Reaped {
            killed,
            survivors: survivors.clone(),
            escapees: escapees.clone(),
            usage: usage.clone(),
        });
        let out = Outcome {
            argv: std::mem::take(&mut self.argv),
            backend: self.backend.kind(),
            cgroup: self.backend.cgroup_path().map(Into::into),
            scope: self.scope(),
            leader_pid: self.leader.handle.raw_pid(),
            leader_status: self.leader.status,
            stop_reason: if error.is_some() && reason == StopReason::Exited {
                StopReason::Error
            } else if reason == StopReason::Exited
                && usage.as_ref().is_some_and(|u| {
                    u.ended_by_oom(match self.leader.status {
                        Some(ExitStatus::Signal(s)) => Some(s),
                        _ => None,
                    })
                })
            {
                StopReason::Oom
            } else {
                reason
            },
            received_signal,
            duration: end - self.started,
            leader_ran: self.leader.at.map(|t| t - self.started),
            teardown: self.stop_at.map(|t| end - t).unwrap_or_default(),
            killed,
            survivors,
            escapees,
            error,
            guardian_pid: self.guardian.as_ref().map(|g| g.pid()),
            limits: (!self.limits.is_empty()).then_some(self.limits),
            usage,
        };
        #[cfg(target_os = "linux")]
        if let Some(r) = self.registration.take() {
            r.ended(&out);
        }
        #[cfg(target_os = "linux")]
        containment::cgroup::stale::sweep_finished().await;
        out
    }
}

/// A run dropped without `finish` (a [`crate::Child`] dropped, a panicking task, an early
/// return) must not leave its tree running: one synchronous SIGKILL of the whole tree
/// (`cgroup.kill` for the cgroup backend), then, on a thread of its own, the wait for the kernel
/// to empty it, the containment removed and the leader reaped, all bounded by
/// [`KILL_DEADLINE`].
impl Drop for Run {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let killed = self.backend.kill_all();
        tracing::debug!(
            "run of {:?} dropped before its end; killed {} process(es)",
            self.argv.first(),
            killed.len()
        );
        let cleanup = self.backend.cleanup_later();
        let leader = self.leader.handle.try_clone().ok();
        let pid = self.leader.handle.pid();
        let gone = self.leader.gone;
        let reap_leader = move |deadline: std::time::Instant| {
            if gone {
                reap::unregister_leader(pid);
                return;
            }
            let Some(h) = leader else { return };
            while std::time::Instant::now() < deadline {
                match reap::try_reap_leader(&h) {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) => std::thread::sleep(std::time::Duration::from_millis(2)),
                }
            }
            reap::unregister_leader(pid);
        };
        let deadline = std::time::Instant::now() + KILL_DEADLINE;
        // The sandbox's ids stay leased until its tree is gone.
        #[cfg(target_os = "linux")]
        let ids = self.sandbox_ids.take();
        super::dropped::clean_up(deadline, move || {
            if let Some(c) = cleanup {
                c(deadline);
            }
            reap_leader(deadline);
            #[cfg(target_os = "linux")]
            drop(ids);
        });
    }
}

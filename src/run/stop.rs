//! The stop sequence, as the supervisor orders it: the first signal (to every member or to the
//! leader alone, then SIGCONT), the grace, then SIGKILL rounds until the tree is empty or the
//! deadline passes. Also what does not stop the run: forwarding a signal, lingering.

use std::time::Duration;

use reaper_platform::{reap, Signal};
use tokio::time::Instant;

use super::Run;
use crate::containment::{self, Backend, Process};
use crate::Event;

/// After the final SIGKILL, how long the kernel gets to empty the tree before reaper reports
/// survivors (a process in uninterruptible sleep dies only when its I/O returns).
pub(crate) const KILL_DEADLINE: Duration = Duration::from_secs(5);
/// Subreaper and pgid backends: how long one SIGSTOP/SIGKILL pass waits before the next.
const KILL_ROUND: Duration = Duration::from_millis(200);

/// Who gets the first stop signal.
#[derive(Clone, Copy)]
enum FirstTo {
    All,
    Leader,
}

impl Run {
    /// Passes `sig` on, as an init does: to the leader alone, or to every member with
    /// `to_tree`. Not a stop: the run goes on, nothing is counted as stopped, and no SIGCONT
    /// follows. Returns how many processes it reached.
    pub(crate) fn forward(&self, sig: Signal, to_tree: bool) -> usize {
        let n = if to_tree {
            self.backend.signal_all(sig).len()
        } else {
            usize::from(self.signal_leader(sig))
        };
        self.sink.emit(Event::Forwarded { signal: sig, n });
        n
    }

    /// Lets the tree run on its own until it is empty or `linger` has passed.
    pub(crate) async fn linger(&mut self, linger: Duration) -> bool {
        self.backend.wait_empty(Instant::now() + linger).await
    }

    /// Stops the whole tree: `first` to every member (then SIGCONT, so a stopped process sees
    /// it), up to `grace` for them to exit, then SIGKILL for all (cgroup.kill, or the subreaper
    /// pass) until the tree is empty. `cut_short` ends the grace early (a second Ctrl-C).
    /// `first` may be `None` (timeout(1)'s signal 0): nothing is sent, the grace still runs.
    pub(crate) async fn stop(
        &mut self,
        first: impl Into<Option<Signal>>,
        grace: Duration,
        cut_short: impl std::future::Future<Output = ()>,
    ) {
        self.stop_with(first.into(), FirstTo::All, grace, cut_short)
            .await
    }

    /// Sends `sig` to every member (or to the leader alone), then SIGCONT so that a stopped
    /// process sees it; the tree is not waited for. Returns how many processes it reached.
    /// timeout(1)'s face signals first and waits for the leader only.
    pub(crate) fn signal(&mut self, sig: Signal, leader_only: bool) -> usize {
        self.stop_at.get_or_insert_with(Instant::now);
        // reaper's own signal may stop the leader: not a job-control stop to pass on.
        self.leader.job_control = false;
        let to = if leader_only {
            FirstTo::Leader
        } else {
            FirstTo::All
        };
        self.send_first(sig, to)
    }

    fn send_first(&mut self, first: Signal, to: FirstTo) -> usize {
        let reached = match to {
            // Each member is counted as it is reached: `signal_all` lists the members before it
            // signals them, so one that dies of the signal is counted too.
            FirstTo::All => {
                let reached = self.backend.signal_all(first);
                self.record(&reached);
                reached.len()
            }
            // Counted before the signal: the leader may die of it (and its tree with it) before
            // any later look, yet it was alive when the stop began.
            FirstTo::Leader => {
                let alive = self.backend.pids();
                let sent = self.signal_leader(first);
                self.stopped.extend(alive);
                usize::from(sent)
            }
        };
        self.sink.emit(Event::Signalled {
            signal: first,
            n: reached,
            via: containment::VIA_HANDLE,
        });
        if first != Signal::CONT && reached > 0 {
            self.backend.signal_all(Signal::CONT);
        }
        reached
    }

    /// [`Run::stop`], with the first signal to the leader alone: for a leader that stops its
    /// own tree gracefully on it (codex on SIGINT kills its tool process groups); whatever it
    /// leaves is killed after the grace like everything else.
    pub(crate) async fn stop_from_leader(
        &mut self,
        first: Signal,
        grace: Duration,
        cut_short: impl std::future::Future<Output = ()>,
    ) {
        self.stop_with(Some(first), FirstTo::Leader, grace, cut_short)
            .await
    }

    async fn stop_with(
        &mut self,
        first: Option<Signal>,
        to: FirstTo,
        grace: Duration,
        cut_short: impl std::future::Future<Output = ()>,
    ) {
        self.stop_at.get_or_insert_with(Instant::now);
        // reaper's own signals may stop the leader (SIGSTOP passes, `--signal TSTP`): not a
        // job-control stop to pass on.
        self.leader.job_control = false;
        // The common end: the leader exited and left nothing. Only the cgroup's `populated`
        // is atomic; a look at /proc can miss a process reparented to reaper while it reads,
        // so those backends need a second look (after reaping) to agree. Still far fewer than
        // the stop sequence's: the pgid backend's looks read the whole process table.
        if self.leader.gone && self.backend.is_empty() {
            let exact = self.backend.capabilities().exact_emptiness;
            if exact || {
                reap::reap_orphans();
                self.backend.is_empty()
            } {
                reap::reap_orphans();
                self.sink.emit(Event::TreeEmpty);
                return;
            }
        }
        if !grace.is_zero() && first != Some(Signal::KILL) {
            if let Some(first) = first {
                self.send_first(first, to);
            }
            let deadline = Instant::now() + grace;
            let empty = self.backend.wait_empty(deadline);
            tokio::pin!(empty, cut_short);
            loop {
                tokio::select! {
                    _ = &mut empty => break,
                    _ = &mut cut_short => break,
                    // Reap the leader as soon as it exits, so its status and time are exact.
                    _ = self.leader.wait(), if !self.leader.gone => {}
                }
            }
        }
        let final_deadline = Instant::now() + KILL_DEADLINE;
        // cgroup.kill is atomic: one write, then only waiting. Passes that a fork can outrun
        // (no cgroup.kill before Linux 5.14, subreaper, pgid) are repeated.
        let round = if self.backend.capabilities().atomic_kill {
            KILL_DEADLINE
        } else {
            KILL_ROUND
        };
        let mut first_pass = true;
        loop {
            // The first pass is not preceded by a look of its own: it finds the tree as well,
            // and meanwhile a fork storm grows (a pgid look reads the whole process table).
            if !first_pass && self.backend.is_empty() {
                break;
            }
            let killed = {
                let _real_time = self.raise_priority.then(super::priority::KillPass::begin);
                self.backend.kill_all()
            };
            if std::mem::take(&mut first_pass) && killed.is_empty() && self.backend.is_empty() {
                break;
            }
            self.record(&killed);
            let via = self.backend.kill_label();
            self.sink.emit(Event::Signalled {
                signal: Signal::KILL,
                n: killed.len(),
                via,
            });
            let now = Instant::now();
            if self
                .backend
                .wait_empty((now + round).min(final_deadline))
                .await
                || Instant::now() >= final_deadline
            {
                break;
            }
        }
        reap::reap_orphans();
        self.leader.poll();
        if self.backend.is_empty() {
            self.sink.emit(Event::TreeEmpty);
        }
    }

    fn record(&mut self, ms: &[Process]) {
        self.stopped.extend(ms.iter().map(|m| m.pid));
    }
}

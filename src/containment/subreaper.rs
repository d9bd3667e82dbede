//! The subreaper backend, for Linux without a writable cgroup: reaper is
//! `PR_SET_CHILD_SUBREAPER`, so a descendant whose parent exits (a double-forked daemon, a setsid
//! escapee) reparents to reaper instead of PID 1 and stays in reaper's subtree, where
//! `/proc/PID/task/*/children` finds it.
//!
//! Does not contain: a descendant that was reparented *above* reaper before reaper became a
//! subreaper (impossible for a run's tree), and the window of a fork racing the SIGKILL pass is
//! closed by repeating the pass until no new process appears. With several runs in one reaper
//! process (the MCP server), an orphan cannot be told apart from another run's: this backend
//! contains reaper's whole subtree as one.

use std::process::Command;

use reaper_platform::linux::{procfs, subreaper};
use reaper_platform::reap;
use reaper_platform::Signal;
use tokio::signal::unix::{signal as unix_signal, Signal as SignalStream, SignalKind};
use tokio::time::Instant;

use super::{Backend, BackendKind, Capabilities, Error, Identity, Process};

pub struct SubreaperBackend {
    self_pid: i32,
    /// Subtrees that are not the run's (reaper's guardian), by `(pid, starttime)`.
    exclude: Vec<Identity>,
    sigchld: Option<SignalStream>,
}

impl SubreaperBackend {
    pub fn new() -> std::io::Result<Self> {
        subreaper::become_subreaper()?;
        Ok(Self {
            self_pid: rustix::process::getpid().as_raw_nonzero().get(),
            exclude: Vec::new(),
            sigchld: unix_signal(SignalKind::child()).ok(),
        })
    }

    /// Leaves the subtree of `pid` (started at `starttime`) out of the run (reaper's own
    /// helpers). The start time matters: a helper that exits is reaped like any orphan, and its
    /// pid may then be reused by a process of the run.
    pub fn exclude(&mut self, process: Identity) {
        self.exclude.push(process);
    }

    /// Whether reaper has a live child outside `exclude`: the same answer as
    /// `!members().is_empty()` at the cost of reaper's children alone, not of the whole tree.
    /// Every descendant has a chain of live parents up to reaper (a zombie has no children: they
    /// were reparented to reaper when it exited), so the tree is empty exactly when no live
    /// direct child is left that is not excluded. A child seen dead may have died after the
    /// list was read, its children moving to reaper meanwhile (the kernel reparents them before
    /// the parent turns zombie), so the list is read again until a read shows nobody new.
    fn has_live_child(&self) -> bool {
        let mut seen = std::collections::HashSet::new();
        loop {
            let mut new = false;
            for c in procfs::children(self.self_pid) {
                if !seen.insert(c) {
                    continue;
                }
                new = true;
                // A listed pid reused meanwhile names a process with another parent.
                if procfs::stat(c).is_ok_and(|s| {
                    s.ppid == self.self_pid && !s.is_dead() && !self.exclude.contains(&s.identity())
                }) {
                    return true;
                }
            }
            if !new {
                return false;
            }
        }
    }
}

impl Backend for SubreaperBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Subreaper
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            atomic_kill: false,
            exact_emptiness: false,
            // reaper's whole subtree is one: stopping one run would stop the others.
            isolates_concurrent_runs: false,
            spawns_leader_inside: false,
        }
    }

    fn kill_label(&self) -> &'static str {
        super::VIA_HANDLE
    }

    fn prepare(&self, _cmd: &mut Command) {}

    fn members(&self) -> Vec<Process> {
        procfs::descendants(self.self_pid, &self.exclude)
            .into_iter()
            .filter(|s| !s.is_dead())
            .map(Process::from)
            .collect()
    }

    /// Reaper's own children only (see `has_live_child`), not a walk of the whole tree.
    fn is_empty(&self) -> bool {
        !self.has_live_child()
    }

    fn signal_all(&self, sig: Signal) -> Vec<Process> {
        super::signal_each(self.members(), sig)
    }

    /// SIGKILL every process as the walk finds it, look again until a pass finds nobody new
    /// (a killed process cannot fork, and its orphans come back to reaper, so the set
    /// converges).
    fn kill_all(&self) -> Vec<Process> {
        let killed = super::sigstop::kill_subtree(self.self_pid, &self.exclude);
        reap::reap_orphans();
        killed
    }

    async fn wait_empty(&mut self, deadline: Instant) -> bool {
        loop {
            reap::reap_orphans();
            if !self.has_live_child() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            // A grandchild's death signals its own parent, not us: wake on SIGCHLD (our
            // children, reparented orphans) or after a short look-again interval.
            let next_look = deadline.min(Instant::now() + LOOK_AGAIN);
            super::sigchld_or(self.sigchld.as_mut(), next_look).await;
        }
    }

    fn release(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// How often the subtree is re-read while waiting for it to empty.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(5);

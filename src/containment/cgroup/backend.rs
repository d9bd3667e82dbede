//! The cgroup backend: every process of the run lives in the run's own cgroup v2, whatever it
//! does with setsid/setpgid, so the kernel finds them all and `cgroup.kill` kills them all, even
//! a fork storm (a process forked during the kill is killed too). What left the cgroup is the
//! [`Escapees`]' to find.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::Ordering;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::procfs;
use reaper_platform::Signal;
use reaper_platform::{reap, signal};
use tokio::signal::unix::{signal as unix_signal, Signal as SignalStream, SignalKind};
use tokio::time::Instant;

use super::create::RunCgroup;
use super::escapees::{within, Escapees};
use super::limits;
use crate::containment::{
    Backend, BackendKind, Capabilities, Error, Escapee, Identity, Kept, Kind,
};
use crate::limits::Limits;
use crate::process::Process;

/// errno a failed cgroup join reports from `pre_exec`, so the spawn error is not mistaken for
/// a missing program (ENOENT) or an unexecutable one (EACCES).
const JOIN_FAILED_ERRNO: i32 = rustix::io::Errno::NOTRECOVERABLE.raw_os_error();

/// A run contained by a cgroup v2 of its own.
pub struct CgroupBackend {
    cgroup: Cgroup,
    /// The cgroup's path in the unified hierarchy (what `/proc/PID/cgroup` shows), to check
    /// that a pid we are about to signal is still ours.
    hierarchy_path: String,
    /// `cgroup.procs`, opened before fork so the child joins with one allocation-free write.
    procs_fd: OwnedFd,
    /// The cgroup's directory, with an exclusive flock held while this run lives: how a
    /// stale-cgroup sweep in another PID namespace tells this live run from an abandoned one.
    /// Also what `clone3(CLONE_INTO_CGROUP)` creates the leader in.
    dir: OwnedFd,
    released: bool,
    /// The processes of the run outside its cgroup.
    escapees: Escapees,
    /// Escapees are reaper's children once orphaned: their deaths wake `wait_empty`.
    sigchld: Option<SignalStream>,
}

impl CgroupBackend {
    /// The backend of a run cgroup just created; removes it again if that fails.
    pub fn new(run: RunCgroup) -> Result<Self, Error> {
        let RunCgroup { cgroup, path, lock } = run;
        let procs_fd = match cgroup.open_procs_for_join() {
            Ok(fd) => fd,
            Err(e) => {
                let _ = cgroup.remove();
                return Err(e.into());
            }
        };
        Ok(Self {
            escapees: Escapees::new(path.clone()),
            cgroup,
            hierarchy_path: path,
            procs_fd,
            dir: lock,
            released: false,
            sigchld: None,
        })
    }

    /// Leaves the subtree of `process` out of the run (reaper's guardian).
    pub fn exclude(&mut self, process: Identity) {
        self.escapees.exclude(process);
    }

    /// The live escapees; with `from_members`, also looked for down the subtree of every member
    /// in the cgroup (what finds an escapee whose parent is still in it). Without, an escapee
    /// under a live member is found once its parent dies and it is reaper's orphan.
    fn find_escapees(&self, from_members: bool) -> Vec<Escapee> {
        let members = if from_members {
            self.cgroup_pids()
        } else {
            Vec::new()
        };
        self.escapees.find(members)
    }

    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// Hands the processes over to the user, still running, in a new cgroup named out of
    /// reaper's run-cgroup scheme (`reaper-kept-…`) so no stale-cgroup sweep kills them.
    /// cgroup v2 cannot rename a cgroup (EPERM), so they are moved, with the source frozen.
    fn keep_in_new_cgroup(&mut self) -> Result<std::path::PathBuf, Error> {
        let parent = self
            .cgroup
            .path()
            .parent()
            .ok_or_else(|| {
                Error::new(
                    Kind::Io,
                    format!("run cgroup {} has no parent", self.cgroup.path().display()),
                )
                .on(self.cgroup.path())
            })?
            .to_owned();
        let name = crate::naming::kept_name(self.cgroup.name());
        let kept = Cgroup::create(&parent, &name)?;
        // Frozen processes cannot fork, so the set being moved holds still; each thaws as it
        // lands in the (unfrozen) kept cgroup.
        if let Err(e) = self.cgroup.freeze(true) {
            tracing::debug!("{e}; moving without freezing");
        }
        for _ in 0..MOVE_PASSES {
            let members = self.members();
            if members.is_empty() {
                break;
            }
            for m in members {
                if let Some(pid) = reaper_platform::Pid::from_raw(m.pid) {
                    // ESRCH: it exited meanwhile; nothing to keep.
                    let _ = kept.add_process(pid);
                }
            }
        }
        self.release()?;
        Ok(kept.path().to_owned())
    }

    /// Whether `pid` is (still) in this run's cgroup tree.
    fn owns(&self, pid: i32) -> bool {
        procfs::cgroup(pid).is_some_and(|p| self.owns_path(&p))
    }

    /// Whether the hierarchy path `cg` is this run's cgroup or below it.
    fn owns_path(&self, cg: &str) -> bool {
        within(cg, &self.hierarchy_path)
    }

    /// `cgroup.procs` of the run's cgroup and its descendants: one read each, no /proc walk.
    fn cgroup_pids(&self) -> Vec<i32> {
        self.cgroup
            .subtree_procs()
            .into_iter()
            .map(|p| p.as_raw_nonzero().get())
            .collect()
    }

    /// The processes in the run's cgroup tree (no escapee).
    fn in_cgroup(&self) -> Vec<Process> {
        Self::described(&self.cgroup_pids())
    }

    /// The live processes among `pids`, each with its name and start time.
    fn described(pids: &[i32]) -> Vec<Process> {
        pids.iter()
            .filter_map(|&pid| procfs::stat(pid).ok())
            .filter(|s| !s.is_dead())
            .map(Process::from)
            .collect()
    }

    /// Whether no process is left in the cgroup tree (`populated` covers the whole subtree; a
    /// vanished directory holds nobody).
    fn cgroup_empty(&self) -> bool {
        match self.cgroup.populated() {
            Ok(p) => !p,
            Err(e) => e.is_not_found() || self.in_cgroup().is_empty(),
        }
    }

    /// See [`AnyBackend::clone_into_cgroup`](crate::containment::AnyBackend::clone_into_cgroup).
    pub fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.dir)
    }
}

impl Backend for CgroupBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cgroup
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // No cgroup.kill before Linux 5.14: then a per-pid pass, which a fork can outrun.
            atomic_kill: self.cgroup.has_kill(),
            exact_emptiness: true,
            isolates_concurrent_runs: true,
            spawns_leader_inside: true,
        }
    }

    fn kill_label(&self) -> &'static str {
        "cgroup.kill"
    }

    fn prepare(&self, cmd: &mut Command) {
        let fd = self.procs_fd.as_raw_fd();
        // SAFETY: the closure runs between fork and exec and only calls write(2) on an fd that
        // `self` keeps open until the spawn returns; no allocation, no locks.
        unsafe {
            cmd.pre_exec(move || {
                let procs = std::os::fd::BorrowedFd::borrow_raw(fd);
                match rustix::io::write(procs, b"0") {
                    Ok(_) => Ok(()),
                    Err(_) => Err(std::io::Error::from_raw_os_error(JOIN_FAILED_ERRNO)),
                }
            });
        }
    }

    fn spawned(&mut self, leader: reaper_platform::Pid) {
        let pid = leader.as_raw_nonzero().get();
        self.escapees.spawned(pid);
        self.sigchld = unix_signal(SignalKind::child()).ok();
    }

    /// The cgroup's processes, and every escapee down their subtrees and reaper's orphans.
    fn members(&self) -> Vec<Process> {
        // One read of the cgroup tree serves both.
        let pids = self.cgroup_pids();
        let mut all = Self::described(&pids);
        all.extend(self.escapees.find(pids).into_iter().map(|e| e.process));
        all
    }

    fn escapees(&self) -> Vec<Escapee> {
        self.escapees.seen().clone()
    }

    /// The cgroup is empty and no escapee lives: `populated`, then one look at reaper's
    /// children (an escapee whose parent died is one of them).
    fn is_empty(&self) -> bool {
        self.cgroup_empty() && !self.escapees.outside_alive()
    }

    /// `cgroup.procs` of the run's cgroup and its descendants (one read each, no /proc walk),
    /// and the escapees found without walking the members.
    fn pids(&self) -> Vec<i32> {
        let mut pids = self.cgroup_pids();
        pids.extend(self.find_escapees(false).into_iter().map(|e| e.process.pid));
        pids
    }

    fn signal_all(&self, sig: Signal) -> Vec<Process> {
        let mut reached = crate::containment::signal_each(
            self.find_escapees(true)
                .into_iter()
                .map(|e| e.process)
                .collect(),
            sig,
        );
        for m in self.in_cgroup() {
            let Some(pidfd) =
                reaper_platform::Pid::from_raw(m.pid).and_then(|p| Pidfd::open(p).ok())
            else {
                continue;
            };
            // Opened by pid: make sure the pidfd names a process of this run before signalling.
            if !self.owns(m.pid) {
                continue;
            }
            if matches!(signal::to_pidfd(&pidfd, sig), Ok(signal::Delivery::Sent)) {
                reached.push(m);
            }
        }
        reached
    }

    /// With `cgroup.kill`: the members read, the cgroup killed, then the escapees below those
    /// members and reaper's orphans stopped until no new one appears (none of them can fork
    /// then) and killed through their pidfds. Killing first keeps a fork storm from growing
    /// during the walk (a look at every member's children, longer than the kill for a large
    /// tree); walking from the members read before the kill still finds an escapee whose
    /// parent has already left the cgroup. Without `cgroup.kill`: escapees stopped first, then
    /// one pidfd SIGKILL each. One a member forks and moves out after the walk is found once
    /// the kill has orphaned it, by the run layer's next pass.
    fn kill_all(&self) -> Vec<Process> {
        self.escapees.killing.store(true, Ordering::Relaxed);
        let (mut killed, escapees) = if self.cgroup.has_kill() {
            // Kill first, describe after: reading /proc/PID/stat for a thousand processes takes
            // longer than the kill, and the tree keeps running meanwhile. The pids are only
            // counted, so cgroup.procs alone names them (no start time, no name).
            let pids = self.cgroup_pids();
            if let Err(e) = signal::to_cgroup_kill(&self.cgroup) {
                tracing::warn!("{e}");
            }
            let escapees = self.escapees.stop(pids.clone());
            let killed = pids
                .into_iter()
                .map(|pid| Process {
                    pid,
                    starttime: 0,
                    comm: String::new(),
                })
                .collect();
            (killed, escapees)
        } else {
            // Before Linux 5.14 there is no cgroup.kill; one pidfd SIGKILL each, and the run
            // layer repeats the pass until the cgroup is empty.
            let escapees = self.escapees.stop(self.cgroup_pids());
            let before = self.in_cgroup();
            self.signal_all(Signal::KILL);
            (before, escapees)
        };
        for m in escapees.kill() {
            self.escapees.killed(m.identity());
            killed.push(m);
        }
        reap::reap_orphans();
        killed
    }

    async fn wait_empty(&mut self, deadline: Instant) -> bool {
        // Watch before the first check, so a change in between still wakes us.
        let mut watch = match self.cgroup.watch_events() {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!("{e}; polling instead");
                None
            }
        };
        loop {
            let cgroup_empty = match self.cgroup.populated() {
                Ok(false) => true,
                Ok(true) => false,
                // The directory is gone: nothing can be in it.
                Err(e) if e.is_not_found() => true,
                Err(e) => {
                    tracing::warn!("{e}");
                    false
                }
            };
            if cgroup_empty {
                reap::reap_orphans();
                if !self.escapees.outside_alive() {
                    return true;
                }
                // An escapee lives. During the kill, one not signalled yet needs a pass now.
                if self.escapees.killing.load(Ordering::Relaxed) && self.escapees.unkilled() {
                    return false;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                // Outside the cgroup, no `cgroup.events` tells its end: reaper's SIGCHLD (an
                // orphaned escapee is reaper's child) or a short look-again interval.
                let next_look = deadline.min(Instant::now() + LOOK_AGAIN);
                crate::containment::sigchld_or(self.sigchld.as_mut(), next_look).await;
                continue;
            }
            if Instant::now() >= deadline {
                return false;
            }
            match watch.as_mut() {
                Some(w) => {
                    if tokio::time::timeout_at(deadline, w.changed())
                        .await
                        .is_err()
                    {
                        // Deadline: one more look, then give up.
                        return !self.cgroup.populated().unwrap_or(true)
                            && !self.escapees.outside_alive();
                    }
                }
                None => {
                    tokio::time::sleep_until(deadline.min(Instant::now() + POLL_WITHOUT_INOTIFY))
                        .await
                }
            }
        }
    }

    fn release(&mut self) -> Result<(), Error> {
        if self.released {
            return Ok(());
        }
        // Children first, relative to directory fds: the tree may have nested sub-cgroups
        // past PATH_MAX.
        self.cgroup.remove_subtree()?;
        self.released = true;
        Ok(())
    }

    fn cleanup_later(&mut self) -> Option<Box<dyn FnOnce(std::time::Instant) + Send>> {
        if self.released {
            return None;
        }
        self.released = true;
        let cg = self.cgroup.clone();
        Some(Box::new(move |deadline| {
            // The tree was killed (`cgroup.kill`): it empties within milliseconds, or never
            // (a process in uninterruptible sleep), which the deadline bounds.
            while cg.populated().unwrap_or(false) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            if let Err(e) = cg.remove_subtree() {
                tracing::warn!("a dropped run's cgroup is left in place: {e}");
            }
        }))
    }

    fn keep(&mut self, limits: &Limits) -> Result<Kept, Error> {
        let at = self.keep_in_new_cgroup()?;
        // The kept cgroup is fresh: the run's limits go with its processes.
        let unlimited = limits::apply(&Cgroup::at(&at), limits).err();
        Ok(Kept {
            at: Some(at),
            unlimited,
        })
    }

    fn spawn_error(&self, e: std::io::Error) -> std::io::Error {
        if e.raw_os_error() == Some(JOIN_FAILED_ERRNO) {
            std::io::Error::other(Error::join_failed())
        } else {
            e
        }
    }
}

/// While an escapee lives outside the cgroup: how often `wait_empty` looks again.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(20);

/// Passes over the run's members when moving them to a kept cgroup.
const MOVE_PASSES: usize = 16;

/// Only when `cgroup.events` cannot be watched (fd limits): how often to re-read it.
const POLL_WITHOUT_INOTIFY: std::time::Duration = std::time::Duration::from_millis(5);

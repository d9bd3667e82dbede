//! The cgroup backend: every process of the run lives in the run's own cgroup v2, whatever it
//! does with setsid/setpgid, so the kernel finds them all and `cgroup.kill` kills them all, even
//! a fork storm (a process forked during the kill is killed too).
//!
//! Does not contain: a process with CAP_SYS_ADMIN (root) that writes itself into another
//! cgroup's `cgroup.procs` — cgroup namespaces do not stop that without `nsdelegate`.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::{procfs, signal};
use reaper_platform::Signal;
use tokio::time::Instant;

use super::{BackendKind, Containment, Member};

/// errno a failed cgroup join reports from `pre_exec`, so the spawn error is not mistaken for
/// a missing program (ENOENT) or an unexecutable one (EACCES).
pub const JOIN_FAILED_ERRNO: i32 = rustix::io::Errno::NOTRECOVERABLE.raw_os_error();

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
}

impl CgroupBackend {
    /// `owner_lock`: the cgroup's directory, locked by [`Cgroup::try_lock_owner`].
    pub fn new(
        cgroup: Cgroup,
        hierarchy_path: String,
        owner_lock: OwnedFd,
    ) -> Result<Self, String> {
        let procs_fd = cgroup.open_procs_for_join().map_err(|e| e.to_string())?;
        Ok(Self {
            cgroup,
            hierarchy_path,
            procs_fd,
            dir: owner_lock,
            released: false,
        })
    }

    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// Hands the processes over to the user, still running, in a new cgroup named out of
    /// reaper's run-cgroup scheme (`reaper-kept-…`) so no stale-cgroup sweep kills them.
    /// cgroup v2 cannot rename a cgroup (EPERM), so they are moved, with the source frozen.
    pub fn keep(&mut self) -> Result<std::path::PathBuf, String> {
        let parent = self
            .cgroup
            .path()
            .parent()
            .ok_or("run cgroup has no parent")?
            .to_owned();
        let name = format!(
            "reaper-kept-{}",
            self.cgroup.name().trim_start_matches("reaper-")
        );
        let kept = Cgroup::create(&parent, &name).map_err(|e| e.to_string())?;
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
        procfs::cgroup(pid).is_some_and(|p| {
            p == self.hierarchy_path
                || p.strip_prefix(self.hierarchy_path.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    }

    /// See [`Backend::clone_into_cgroup`](super::Backend::clone_into_cgroup).
    pub fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.dir)
    }
}

impl Containment for CgroupBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cgroup
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

    fn members(&self) -> Vec<Member> {
        self.cgroup
            .subtree_procs()
            .into_iter()
            .filter_map(|pid| procfs::stat(pid.as_raw_nonzero().get()).ok())
            .filter(|s| !s.is_dead())
            .map(|s| Member {
                pid: s.pid,
                starttime: s.starttime,
                comm: s.comm,
            })
            .collect()
    }

    fn is_empty(&self) -> bool {
        // `populated` covers the whole subtree; a vanished directory holds nobody.
        match self.cgroup.populated() {
            Ok(p) => !p,
            Err(e) => e.is_not_found() || self.members().is_empty(),
        }
    }

    /// `cgroup.procs` of the run's cgroup and its descendants: one read each, no /proc walk.
    fn pids(&self) -> Vec<i32> {
        self.cgroup
            .subtree_procs()
            .into_iter()
            .map(|p| p.as_raw_nonzero().get())
            .collect()
    }

    fn signal_all(&self, sig: Signal) -> Vec<Member> {
        let mut reached = Vec::new();
        for m in self.members() {
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

    fn kill_all(&self) -> Vec<Member> {
        if self.cgroup.has_kill() {
            // Kill first, describe after: reading /proc/PID/stat for a thousand processes takes
            // longer than the kill, and the tree keeps running meanwhile. The pids are only
            // counted, so cgroup.procs alone names them (no start time, no name).
            let pids = self.pids();
            if let Err(e) = signal::to_cgroup_kill(&self.cgroup) {
                tracing::warn!("{e}");
            }
            return pids
                .into_iter()
                .map(|pid| Member {
                    pid,
                    starttime: 0,
                    comm: String::new(),
                })
                .collect();
        }
        let before = self.members();
        {
            // Before Linux 5.14 there is no cgroup.kill; one pidfd SIGKILL each, and the run
            // layer repeats the sweep until the cgroup is empty.
            self.signal_all(Signal::KILL);
        }
        before
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
            match self.cgroup.populated() {
                Ok(false) => return true,
                Ok(true) => {}
                // The directory is gone: nothing can be in it.
                Err(e) if e.is_not_found() => return true,
                Err(e) => tracing::warn!("{e}"),
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
                        return !self.cgroup.populated().unwrap_or(true);
                    }
                }
                None => {
                    tokio::time::sleep_until(deadline.min(Instant::now() + POLL_WITHOUT_INOTIFY))
                        .await
                }
            }
        }
    }

    fn release(&mut self) -> Result<(), String> {
        if self.released {
            return Ok(());
        }
        // Children first, relative to directory fds: the tree may have nested sub-cgroups
        // past PATH_MAX.
        self.cgroup.remove_subtree().map_err(|e| e.to_string())?;
        self.released = true;
        Ok(())
    }
}

/// Passes over the run's members when moving them to a kept cgroup.
const MOVE_PASSES: usize = 16;

/// Only when `cgroup.events` cannot be watched (fd limits): how often to re-read it.
const POLL_WITHOUT_INOTIFY: std::time::Duration = std::time::Duration::from_millis(5);

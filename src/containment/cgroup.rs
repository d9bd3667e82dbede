//! The cgroup backend: every process of the run lives in the run's own cgroup v2, whatever it
//! does with setsid/setpgid, so the kernel finds them all and `cgroup.kill` kills them all, even
//! a fork storm (a process forked during the kill is killed too).
//!
//! A process can leave the cgroup: root can write itself into any `cgroup.procs`, and a user
//! into any below a cgroup it owns (systemd `Delegate=yes`). It is still the run's: it descends
//! from the leader, and reaper is a child subreaper, so while its parent lives it is found
//! through `/proc/PID/task/*/children` of the members, and once orphaned it is reaper's own
//! child. Such an escapee is stopped with the rest (SIGSTOP until no new one appears, SIGKILL
//! through pidfds) and named in every report. With several runs in one reaper process (`reaper
//! mcp`), an orphan outside every run cgroup that no run saw before it was orphaned cannot be
//! attributed to one of them: it is left to reaper's exit (then to PID 1).

use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::{procfs, reap, signal};
use reaper_platform::Signal;
use tokio::signal::unix::{signal as unix_signal, Signal as SignalStream, SignalKind};
use tokio::time::Instant;

use super::sweep::Stopped;
use super::{limits, Backend, BackendKind, Capabilities, Error, Escapee, Kept, Kind, Process};

/// A run cgroup this reaper process holds now.
struct LiveRun {
    id: u64,
    /// Its path in the unified hierarchy.
    path: String,
    /// No other run was live at any time since it started: an orphan outside every run cgroup
    /// that started after its leader can only be its.
    alone: bool,
}

/// Every run cgroup of this reaper process, so an orphan can be told from a member of another
/// run, and attributed only where that is certain.
static LIVE: Mutex<Vec<LiveRun>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn live() -> std::sync::MutexGuard<'static, Vec<LiveRun>> {
    // A panic while holding it leaves plain data; nothing to repair.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// reaper's pid, if `/proc` is of reaper's own PID namespace (`/proc/self` names it).
fn own_proc_pid() -> Option<i32> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let shown = std::fs::read_link("/proc/self").ok()?;
    let same = shown.to_str().and_then(|s| s.parse::<i32>().ok()) == Some(me);
    if !same {
        tracing::debug!(
            "/proc is not of reaper's PID namespace (/proc/self is {}, reaper is {me}): \
             processes that leave the run cgroup are not looked for",
            shown.display()
        );
    }
    same.then_some(me)
}

/// Whether the hierarchy path `cg` is `run` or below it.
fn within(cg: &str, run: &str) -> bool {
    cg == run || cg.strip_prefix(run).is_some_and(|r| r.starts_with('/'))
}

/// errno a failed cgroup join reports from `pre_exec`, so the spawn error is not mistaken for
/// a missing program (ENOENT) or an unexecutable one (EACCES).
const JOIN_FAILED_ERRNO: i32 = rustix::io::Errno::NOTRECOVERABLE.raw_os_error();

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
    /// This run in [`LIVE`].
    id: u64,
    /// reaper's pid, when `/proc` shows reaper's own PID namespace. Under `unshare --pid`
    /// without a fresh `/proc`, `/proc/1` is the host's init and every pid read from `/proc`
    /// names another process than the same number would here: then no escapee is looked for
    /// (anything found would be someone else's), and only the cgroup holds the run.
    self_pid: Option<i32>,
    /// The leader, `(pid, starttime)`, once spawned.
    leader: Option<(i32, u64)>,
    /// Subtrees that are not the run's (reaper's guardian), by `(pid, starttime)`.
    exclude: Vec<(i32, u64)>,
    /// Every escapee seen, in the order seen.
    seen: Mutex<Vec<Escapee>>,
    /// Set by `kill_all`: from then on an escapee nobody has signalled yet ends `wait_empty`,
    /// so the stop sweeps it.
    killing: AtomicBool,
    /// The escapees `kill_all` sent SIGKILL, by `(pid, starttime)`.
    killed: Mutex<HashSet<(i32, u64)>>,
    /// Escapees are reaper's children once orphaned: their deaths wake `wait_empty`.
    sigchld: Option<SignalStream>,
}

impl Drop for CgroupBackend {
    fn drop(&mut self) {
        live().retain(|r| r.id != self.id);
    }
}

impl CgroupBackend {
    /// `owner_lock`: the cgroup's directory, locked by [`Cgroup::try_lock_owner`].
    pub fn new(cgroup: Cgroup, hierarchy_path: String, owner_lock: OwnedFd) -> Result<Self, Error> {
        let procs_fd = cgroup.open_procs_for_join()?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        {
            let mut live = live();
            let alone = live.is_empty();
            for r in live.iter_mut() {
                r.alone = false;
            }
            live.push(LiveRun {
                id,
                path: hierarchy_path.clone(),
                alone,
            });
        }
        Ok(Self {
            cgroup,
            hierarchy_path,
            procs_fd,
            dir: owner_lock,
            released: false,
            id,
            self_pid: own_proc_pid(),
            leader: None,
            exclude: Vec::new(),
            seen: Mutex::new(Vec::new()),
            killing: AtomicBool::new(false),
            killed: Mutex::new(HashSet::new()),
            sigchld: None,
        })
    }

    /// Leaves the subtree of `(pid, starttime)` out of the run (reaper's guardian).
    pub fn exclude(&mut self, pid: i32, starttime: u64) {
        self.exclude.push((pid, starttime));
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Vec<Escapee>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// reaper's live children outside the run cgroup that are this run's: the leader, an
    /// escapee seen before, or — while this run has been reaper's only one — any process in no
    /// run cgroup of reaper's that started after the leader (an orphan of the tree, reparented
    /// to reaper the subreaper). One read of reaper's children when there is none: the common
    /// end pays only that.
    fn orphans(&self) -> Vec<(procfs::ProcStat, String)> {
        let Some(me) = self.self_pid else {
            return Vec::new();
        };
        let children = procfs::children(me);
        if children.is_empty() {
            return Vec::new();
        }
        let (alone, runs): (bool, Vec<String>) = {
            let live = live();
            (
                live.iter().any(|r| r.id == self.id && r.alone),
                live.iter().map(|r| r.path.clone()).collect(),
            )
        };
        let seen: HashSet<(i32, u64)> = self
            .seen()
            .iter()
            .map(|e| (e.process.pid, e.process.starttime))
            .collect();
        children
            .into_iter()
            .filter_map(|pid| procfs::stat(pid).ok())
            .filter(|s| !s.is_dead() && !self.exclude.contains(&(s.pid, s.starttime)))
            .filter_map(|s| {
                let cg = procfs::cgroup(s.pid)?;
                // In a run cgroup: a member (of this run or another), not an orphan outside.
                if runs.iter().any(|r| within(&cg, r)) {
                    return None;
                }
                let id = (s.pid, s.starttime);
                let ours = Some(id) == self.leader
                    || seen.contains(&id)
                    || (alone && self.leader.is_some_and(|(_, t)| s.starttime >= t));
                ours.then_some((s, cg))
            })
            .collect()
    }

    /// The live escapees, each recorded in `seen` at first sight. From reaper's orphans of the
    /// run and the escapees seen before, down their subtrees; with `from_members`, also down
    /// the subtree of every member in the cgroup (what finds an escapee whose parent is still
    /// in it). Without, an escapee under a live member is found once its parent dies and it is
    /// reaper's orphan.
    fn find_escapees(&self, from_members: bool) -> Vec<Escapee> {
        let members = if from_members {
            self.cgroup_pids()
        } else {
            Vec::new()
        };
        self.find_escapees_below(members)
    }

    /// [`Self::find_escapees`] from the subtrees of `members` (pids read from `cgroup.procs`,
    /// possibly before a kill) and of reaper's orphans of the run. The members' children are
    /// read first, reaper's children after: the kernel moves an orphan from its dying parent's
    /// children to reaper's in one step (`exit_notify`, under `tasklist_lock`), so a look at the
    /// parent followed by a look at reaper finds it in one of the two.
    fn find_escapees_below(&self, members: Vec<i32>) -> Vec<Escapee> {
        if self.self_pid.is_none() {
            return Vec::new();
        }
        let mut visited: HashSet<i32> = members.iter().copied().collect();
        let mut found: Vec<(procfs::ProcStat, String)> = Vec::new();
        let mut queue = members;
        self.walk_down(&mut queue, &mut visited, &mut found);
        let mut tops = self.orphans();
        let known: Vec<Escapee> = self.seen().clone();
        for e in known {
            if let Ok(s) = procfs::stat(e.process.pid) {
                if s.starttime == e.process.starttime && !s.is_dead() {
                    let cg = procfs::cgroup(s.pid).unwrap_or(e.to);
                    tops.push((s, cg));
                }
            }
        }
        for (s, cg) in tops {
            if visited.insert(s.pid) && !self.owns_path(&cg) {
                queue.push(s.pid);
                found.push((s, cg));
            }
        }
        self.walk_down(&mut queue, &mut visited, &mut found);
        self.name_escapees(found)
    }

    /// Walks down from `queue`: every live descendant outside the run's cgroups is `found`.
    fn walk_down(
        &self,
        queue: &mut Vec<i32>,
        visited: &mut HashSet<i32>,
        found: &mut Vec<(procfs::ProcStat, String)>,
    ) {
        while let Some(p) = queue.pop() {
            for c in procfs::children(p) {
                if !visited.insert(c) {
                    continue;
                }
                let Ok(s) = procfs::stat(c) else { continue };
                if s.is_dead() || self.exclude.contains(&(s.pid, s.starttime)) {
                    continue;
                }
                let Some(cg) = procfs::cgroup(c) else {
                    continue;
                };
                if self.owns_path(&cg) {
                    // A process: walked as one when `from_members`; its subtree is the run's
                    // either way.
                    queue.push(c);
                    continue;
                }
                queue.push(c);
                found.push((s, cg));
            }
        }
    }

    /// Records escapees in `seen` at first sight, and names them.
    fn name_escapees(&self, found: Vec<(procfs::ProcStat, String)>) -> Vec<Escapee> {
        let mut seen = self.seen();
        found
            .into_iter()
            .map(|(s, cg)| {
                let member = Process::from(s);
                match seen.iter().find(|e| {
                    e.process.pid == member.pid && e.process.starttime == member.starttime
                }) {
                    Some(e) => e.clone(),
                    None => {
                        let e = Escapee {
                            process: member,
                            to: cg,
                        };
                        // Bounded: an escapee that keeps starting short-lived children must not
                        // grow reaper without end. Past the bound they are still found (from
                        // their live ancestors) and killed, only no longer named.
                        if seen.len() < MAX_SEEN {
                            tracing::info!("{} of the run", e.label());
                            seen.push(e.clone());
                        }
                        e
                    }
                }
            })
            .collect()
    }

    /// Whether an escapee of this run may be alive: one cheap look at reaper's children (and
    /// the escapees seen so far). Meaningful once the cgroup is empty: then every live
    /// descendant of the run hangs below one of reaper's children.
    fn outside_alive(&self) -> bool {
        !self.orphans().is_empty()
            || self
                .seen()
                .iter()
                .any(|e| procfs::is_alive(e.process.pid, e.process.starttime))
    }

    /// Whether a live escapee has not been sent SIGKILL yet.
    fn unkilled_escapee(&self) -> bool {
        let escapees = self.find_escapees(false);
        let killed = self.killed.lock().unwrap_or_else(|e| e.into_inner());
        escapees
            .iter()
            .any(|e| !killed.contains(&(e.process.pid, e.process.starttime)))
    }

    /// SIGSTOP every live escapee, and look again until a look finds nobody new (a stopped
    /// process cannot fork, so the set converges).
    fn stop_escapees(&self, members: Vec<i32>) -> Stopped {
        let mut first = Some(members);
        super::sweep::stop(|_round| {
            // The first look also walks the members' children: an escapee below a member is
            // found there while its parent lives, or in reaper's children, read after, once
            // the parent has died. Without it, it would be reparented to reaper a moment after
            // the cgroup reads empty (the kernel leaves the cgroup before it hands the children
            // over), and could be missed.
            self.find_escapees_below(first.take().unwrap_or_default())
                .into_iter()
                .map(|e| e.process)
                .collect()
        })
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
        let name = format!(
            "reaper-kept-{}",
            self.cgroup.name().trim_start_matches("reaper-")
        );
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
        self.cgroup
            .subtree_procs()
            .into_iter()
            .filter_map(|pid| procfs::stat(pid.as_raw_nonzero().get()).ok())
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

    /// See [`AnyBackend::clone_into_cgroup`](super::AnyBackend::clone_into_cgroup).
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
            // No cgroup.kill before Linux 5.14: then a per-pid sweep, which a fork can outrun.
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
        self.leader = procfs::stat(pid).ok().map(|s| (pid, s.starttime));
        self.sigchld = unix_signal(SignalKind::child()).ok();
    }

    /// The cgroup's processes, and every escapee down their subtrees and reaper's orphans.
    fn members(&self) -> Vec<Process> {
        let mut all = self.in_cgroup();
        all.extend(self.find_escapees(true).into_iter().map(|e| e.process));
        all
    }

    fn escapees(&self) -> Vec<Escapee> {
        self.seen().clone()
    }

    /// The cgroup is empty and no escapee lives: `populated`, then one look at reaper's
    /// children (an escapee whose parent died is one of them).
    fn is_empty(&self) -> bool {
        self.cgroup_empty() && !self.outside_alive()
    }

    /// `cgroup.procs` of the run's cgroup and its descendants (one read each, no /proc walk),
    /// and the escapees found without walking the members.
    fn pids(&self) -> Vec<i32> {
        let mut pids = self.cgroup_pids();
        pids.extend(self.find_escapees(false).into_iter().map(|e| e.process.pid));
        pids
    }

    fn signal_all(&self, sig: Signal) -> Vec<Process> {
        let mut reached = super::signal_each(
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
    /// the kill has orphaned it, by the run layer's next sweep.
    fn kill_all(&self) -> Vec<Process> {
        self.killing.store(true, Ordering::Relaxed);
        let (mut killed, escapees) = if self.cgroup.has_kill() {
            // Kill first, describe after: reading /proc/PID/stat for a thousand processes takes
            // longer than the kill, and the tree keeps running meanwhile. The pids are only
            // counted, so cgroup.procs alone names them (no start time, no name).
            let pids = self.cgroup_pids();
            if let Err(e) = signal::to_cgroup_kill(&self.cgroup) {
                tracing::warn!("{e}");
            }
            let escapees = self.stop_escapees(pids.clone());
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
            // layer repeats the sweep until the cgroup is empty.
            let escapees = self.stop_escapees(self.cgroup_pids());
            let before = self.in_cgroup();
            self.signal_all(Signal::KILL);
            (before, escapees)
        };
        let mut signalled = self.killed.lock().unwrap_or_else(|e| e.into_inner());
        for m in escapees.kill() {
            signalled.insert((m.pid, m.starttime));
            killed.push(m);
        }
        drop(signalled);
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
                if !self.outside_alive() {
                    return true;
                }
                // An escapee lives. During the kill, one not signalled yet needs a sweep now.
                if self.killing.load(Ordering::Relaxed) && self.unkilled_escapee() {
                    return false;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                // Outside the cgroup, no `cgroup.events` tells its end: reaper's SIGCHLD (an
                // orphaned escapee is reaper's child) or a short look-again interval.
                let next_look = deadline.min(Instant::now() + LOOK_AGAIN);
                super::sigchld_or(self.sigchld.as_mut(), next_look).await;
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
                        return !self.cgroup.populated().unwrap_or(true) && !self.outside_alive();
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

    fn keep(&mut self, limits: &limits::Limits) -> Result<Kept, Error> {
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

/// How many escapees a run remembers by name.
const MAX_SEEN: usize = 10_000;
/// While an escapee lives outside the cgroup: how often `wait_empty` looks again.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(20);

/// Passes over the run's members when moving them to a kept cgroup.
const MOVE_PASSES: usize = 16;

/// Only when `cgroup.events` cannot be watched (fd limits): how often to re-read it.
const POLL_WITHOUT_INOTIFY: std::time::Duration = std::time::Duration::from_millis(5);

//! The run's escapees: processes of the tree that left the run's cgroup.
//!
//! Root can write itself into any `cgroup.procs`, and a user into any below a cgroup it owns
//! (systemd `Delegate=yes`). Such a process is still the run's: it descends from the leader, so
//! while its parent lives it is found by walking down from the run's members
//! (`/proc/PID/task/*/children`, each step's parent checked), and once seen it is remembered by
//! pid and start time. It is stopped with the rest (SIGSTOP until no new one appears, SIGKILL
//! through pidfds) and named in every report.
//!
//! An escapee whose parent dies before a look saw it is an orphan. It reparents to the nearest
//! child subreaper: this process only after `own_every_child` (the declaration that this
//! process starts no children of its own), and then, while the run is this process's only one,
//! any child of it outside every run cgroup that started after the leader is the run's. Without
//! the declaration such a child may be the program's own, and nothing tells them apart: the
//! orphan is not looked for (it went to PID 1, or to a subreaper above). With several runs in one
//! reaper process (`reaper mcp`), an orphan that no run saw before it was orphaned cannot be
//! attributed to one of them either: it is left to reaper's exit (then to PID 1).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use reaper_platform::linux::procfs;
use reaper_platform::reap;

use crate::containment::sigstop::{self, Stopped};
use crate::process::{Escapee, Identity, Process};

/// A run cgroup this reaper process holds now.
struct LiveRun {
    id: u64,
    /// Its path in the unified hierarchy.
    path: String,
    /// No other run was live at any time since it started: after `own_every_child`, an orphan
    /// outside every run cgroup that started after its leader can only be its.
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
pub fn within(cg: &str, run: &str) -> bool {
    cg == run || cg.strip_prefix(run).is_some_and(|r| r.starts_with('/'))
}

/// A process the escapee walk goes down from.
struct Walk {
    process: Identity,
    /// Proved the run's: in its cgroup, or below a process that is. `false` for a pid read
    /// from `cgroup.procs` (a claim until [`Escapees::was_member`] says otherwise).
    ours: bool,
    /// Its children list, when it was read already.
    listed: Option<Vec<i32>>,
}

impl Walk {
    fn ours(process: Identity) -> Self {
        Self {
            process,
            ours: true,
            listed: None,
        }
    }
}

/// How many escapees a run remembers by name.
const MAX_SEEN: usize = 10_000;

/// One run's escapees: what is known of them, and how to find the rest.
pub struct Escapees {
    /// This run in [`LIVE`].
    id: u64,
    /// The run cgroup's path in the unified hierarchy (what `/proc/PID/cgroup` shows).
    path: String,
    /// reaper's pid, when `/proc` shows reaper's own PID namespace. Under `unshare --pid`
    /// without a fresh `/proc`, `/proc/1` is the host's init and every pid read from `/proc`
    /// names another process than the same number would here: then no escapee is looked for
    /// (anything found would be someone else's), and only the cgroup holds the run.
    self_pid: Option<i32>,
    /// The leader, once spawned.
    leader: Option<Identity>,
    /// Subtrees that are not the run's (reaper's guardian).
    exclude: Vec<Identity>,
    /// Every escapee seen, in the order seen.
    seen: Mutex<Vec<Escapee>>,
    /// Set once the kill began: from then on an escapee nobody has signalled yet ends
    /// `wait_empty`, so the stop's kill passes reach it.
    pub killing: AtomicBool,
    /// The escapees the kill sent SIGKILL.
    killed: Mutex<HashSet<Identity>>,
}

impl Drop for Escapees {
    fn drop(&mut self) {
        live().retain(|r| r.id != self.id);
    }
}

impl Escapees {
    /// The escapees of the run in the cgroup at hierarchy path `path`, registered in [`LIVE`].
    pub fn new(path: String) -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        {
            let mut live = live();
            let alone = live.is_empty();
            for r in live.iter_mut() {
                r.alone = false;
            }
            live.push(LiveRun {
                id,
                path: path.clone(),
                alone,
            });
        }
        Self {
            id,
            path,
            self_pid: own_proc_pid(),
            leader: None,
            exclude: Vec::new(),
            seen: Mutex::new(Vec::new()),
            killing: AtomicBool::new(false),
            killed: Mutex::new(HashSet::new()),
        }
    }

    /// Leaves the subtree of `process` out of the run (reaper's guardian).
    pub fn exclude(&mut self, process: Identity) {
        self.exclude.push(process);
    }

    /// The leader runs: orphans that started after it may be the run's.
    pub fn spawned(&mut self, leader: i32) {
        self.leader = procfs::stat(leader).ok().map(|s| s.identity());
    }

    /// Every escapee seen so far.
    pub fn seen(&self) -> std::sync::MutexGuard<'_, Vec<Escapee>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that the kill sent SIGKILL to `process`.
    pub fn killed(&self, process: Identity) {
        self.killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(process);
    }

    /// reaper's live children outside the run cgroup that are this run's: the leader, an
    /// escapee seen before, or — after `own_every_child`, and while this run has been reaper's
    /// only one — any process in no run cgroup of reaper's that started after the leader (an
    /// orphan of the tree, reparented to reaper the subreaper). Without the declaration such a
    /// child may be the program's own: never taken. One read of reaper's children when there
    /// is none: the common end pays only that.
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
                reap::reaps_every_child() && live.iter().any(|r| r.id == self.id && r.alone),
                live.iter().map(|r| r.path.clone()).collect(),
            )
        };
        let seen: HashSet<Identity> = self.seen().iter().map(|e| e.process.identity()).collect();
        children
            .into_iter()
            .filter_map(|pid| procfs::stat(pid).ok())
            // A listed pid reused meanwhile names a process with another parent.
            .filter(|s| s.ppid == me)
            .filter(|s| !s.is_dead() && !self.exclude.contains(&s.identity()))
            .filter_map(|s| {
                let cg = procfs::cgroup(s.pid)?;
                // In a run cgroup: a member (of this run or another), not an orphan outside.
                if runs.iter().any(|r| within(&cg, r)) {
                    return None;
                }
                let id = s.identity();
                let ours = Some(id) == self.leader
                    || seen.contains(&id)
                    || (alone && self.leader.is_some_and(|l| s.starttime >= l.starttime));
                ours.then_some((s, cg))
            })
            .collect()
    }

    /// The live escapees, each recorded in `seen` at first sight: from the subtrees of `members` (pids read from `cgroup.procs`,
    /// possibly before a kill) and of reaper's orphans of the run. The members' children are
    /// read first, reaper's children after: the kernel moves an orphan from its dying parent's
    /// children to reaper's in one step (`exit_notify`, under `tasklist_lock`), so a look at the
    /// parent followed by a look at reaper finds it in one of the two.
    pub fn find(&self, members: Vec<i32>) -> Vec<Escapee> {
        if self.self_pid.is_none() {
            return Vec::new();
        }
        let mut visited: HashSet<i32> = members.iter().copied().collect();
        let mut found: Vec<(procfs::ProcStat, String)> = Vec::new();
        let mut queue: Vec<Walk> = Vec::new();
        for pid in members {
            // Most members have no children (the leaves of a tree): one read tells.
            let listed = procfs::children(pid);
            if listed.is_empty() {
                continue;
            }
            // A zombie has no children: they were reparented when it exited.
            if let Some(s) = procfs::stat(pid).ok().filter(|s| !s.is_dead()) {
                queue.push(Walk {
                    process: s.identity(),
                    ours: false,
                    listed: Some(listed),
                });
            }
        }
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
            if visited.insert(s.pid) && !within(&cg, &self.path) {
                queue.push(Walk::ours(s.identity()));
                found.push((s, cg));
            }
        }
        self.walk_down(&mut queue, &mut visited, &mut found);
        self.name(found)
    }

    /// Whether `process`, a pid read from `cgroup.procs`, was in the run's cgroup while it held
    /// that pid: its cgroup read, then its start time read again (a zombie still holds its pid,
    /// and its cgroup until it is reaped).
    fn was_member(&self, process: Identity) -> bool {
        procfs::cgroup(process.pid).is_some_and(|cg| within(&cg, &self.path))
            && procfs::stat(process.pid).is_ok_and(|s| s.starttime == process.starttime)
    }

    /// Walks down from `queue`: every live descendant outside the run's cgroups is `found`.
    /// Each step is proved ([`procfs::children_among`]): a pid reused meanwhile is not followed.
    /// A process in the run's cgroup is the run's (its cgroup is read while it holds its pid:
    /// the next step checks that it still does), and so is one outside whose parent is; a pid
    /// read from `cgroup.procs` is proved a member only once a child of it is found outside,
    /// which is rare, so the common walk reads no member's cgroup.
    fn walk_down(
        &self,
        queue: &mut Vec<Walk>,
        visited: &mut HashSet<i32>,
        found: &mut Vec<(procfs::ProcStat, String)>,
    ) {
        while let Some(w) = queue.pop() {
            let listed = w.listed.unwrap_or_else(|| procfs::children(w.process.pid));
            let mut ours = w.ours.then_some(true);
            // Only a proved child is marked visited: one listed here that had been reparented
            // to reaper meanwhile is still found among reaper's children, looked at after.
            for s in procfs::children_among(w.process, listed, |c| !visited.contains(&c)) {
                if !visited.insert(s.pid) || s.is_dead() || self.exclude.contains(&s.identity()) {
                    continue;
                }
                let Some(cg) = procfs::cgroup(s.pid) else {
                    continue;
                };
                if within(&cg, &self.path) {
                    queue.push(Walk::ours(s.identity()));
                    continue;
                }
                if !*ours.get_or_insert_with(|| self.was_member(w.process)) {
                    // Not the run's to follow; another look may reach it otherwise.
                    visited.remove(&s.pid);
                    continue;
                }
                queue.push(Walk::ours(s.identity()));
                found.push((s, cg));
            }
        }
    }

    /// Records escapees in `seen` at first sight, and names them.
    fn name(&self, found: Vec<(procfs::ProcStat, String)>) -> Vec<Escapee> {
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
    pub fn outside_alive(&self) -> bool {
        !self.orphans().is_empty()
            || self
                .seen()
                .iter()
                .any(|e| procfs::is_alive(e.process.pid, e.process.starttime))
    }

    /// Whether a live escapee has not been sent SIGKILL yet.
    pub fn unkilled(&self) -> bool {
        let escapees = self.find(Vec::new());
        let killed = self.killed.lock().unwrap_or_else(|e| e.into_inner());
        escapees
            .iter()
            .any(|e| !killed.contains(&e.process.identity()))
    }

    /// SIGSTOP every live escapee, and look again until a look finds nobody new (a stopped
    /// process cannot fork, so the set converges).
    pub fn stop(&self, members: Vec<i32>) -> Stopped {
        let mut first = Some(members);
        sigstop::stop(|_round| {
            // The first look also walks the members' children: an escapee below a member is
            // found there while its parent lives, or (after `own_every_child`) in reaper's
            // children, read after, once the parent has died. Without it, it would be
            // reparented to reaper a moment after the cgroup reads empty (the kernel leaves
            // the cgroup before it hands the children over), and could be missed.
            self.find(first.take().unwrap_or_default())
                .into_iter()
                .map(|e| e.process)
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid read from `cgroup.procs` may name another process by the time it is walked (freed
    /// and reused): the children of a process that is not in the run's cgroup are not the
    /// run's escapees. Here the "member" is this test process, which is in no such cgroup.
    #[test]
    fn the_children_of_a_listed_pid_that_is_no_member_are_not_escapees() {
        let escapees = Escapees::new("/reaper-test-no-such-run".into());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let me = std::process::id() as i32;
        let found = escapees.find(vec![me]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.is_empty(), "{found:?}");
        assert!(escapees.seen().is_empty());
    }
}

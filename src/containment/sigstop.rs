//! The SIGSTOP sweep every backend ends a run's stragglers with: SIGSTOP every process a look
//! finds, look again until a look finds nobody new (a stopped process cannot fork, so the set
//! converges), then SIGKILL them all through the handles the STOP went through, so a pid reused
//! meanwhile is never signalled.

use std::collections::HashSet;

use reaper_platform::process::Handle;
use reaper_platform::{signal, Signal};

use super::{Identity, Process};

/// Rounds of looking at the most: each round stops every process it finds, and only a process
/// still running can add new ones, so a fork storm converges in a few.
const MAX_STOP_ROUNDS: usize = 64;

/// The processes a [`stop`] stopped, each with the handle it was stopped through.
pub(crate) struct Stopped(Vec<(Process, Handle)>);

/// SIGSTOPs every process `look` returns, and calls it again (with the round's number, from
/// 0) until it returns nobody it had not returned before. `look` may do more each round (the
/// pgid backend SIGSTOPs its remembered groups there). A process that exits or whose pid was
/// reused before it could be stopped is left out.
pub(crate) fn stop(mut look: impl FnMut(usize) -> Vec<Process>) -> Stopped {
    let mut seen: HashSet<Identity> = HashSet::new();
    let mut held: Vec<(Process, Handle)> = Vec::new();
    for round in 0..MAX_STOP_ROUNDS {
        let fresh: Vec<Process> = look(round)
            .into_iter()
            .filter(|m| seen.insert(m.identity()))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for m in fresh {
            if let Some(fd) = Handle::open_checked(m.pid, m.starttime) {
                let _ = signal::to_handle(&fd, Signal::STOP);
                held.push((m, fd));
            }
        }
    }
    Stopped(held)
}

/// The sweep of a whole subtree of reaper's, reading each process once: a process is stopped
/// before its children are listed, and once SIGSTOP is pending `copy_process` fails (with
/// ERESTARTNOINTR, on every thread of the target) unless the child is already on its parent's
/// list, so that list is final. What a listing can still miss, and is looked for:
/// - a sibling made with `CLONE_PARENT` by a child not yet stopped: each parent's list is read
///   again after its children were stopped, until a read finds nobody new;
/// - an orphan: a process that exits before it is stopped (or is killed by someone else) hands
///   its children to reaper, the subreaper, so reaper's own children are looked at again after
///   the walk, until a look finds nobody new.
///
/// `exclude` prunes the subtree of each process it names (reaper's guardian); zombies are left
/// out (their children were reparented when they exited). The same result as [`stop`] with a
/// full walk as its look, which lists every process at least twice (to find it, then to confirm
/// nothing new appeared) and reads each `stat` three times (two walks, [`Handle::open_checked`]).
#[cfg(target_os = "linux")]
pub(crate) fn stop_subtree(root: i32, exclude: &[Identity]) -> Stopped {
    use reaper_platform::linux::procfs;
    let mut seen: HashSet<Identity> = HashSet::new();
    let mut held: Vec<(Process, Handle)> = Vec::new();
    let mut stopped_pids: HashSet<i32> = HashSet::new();
    // Stops each new process of `pids`; returns the ones it stopped.
    let mut stop_new = |pids: Vec<i32>| -> Vec<i32> {
        let mut stopped = Vec::new();
        for pid in pids {
            // Stopped by this sweep, so alive: its parent is stopped too (or is reaper, which
            // reaps nothing meanwhile), so nothing can have reaped it and reused its pid.
            if stopped_pids.contains(&pid) {
                continue;
            }
            let Some(p) = reaper_platform::Pid::from_raw(pid) else {
                continue;
            };
            // The pidfd first, then `stat`: if the pid was reused in between, the pidfd names
            // the process that has exited, and the STOP below fails on it.
            let Ok(fd) = Handle::open(p) else {
                continue;
            };
            let Ok(st) = procfs::stat(pid) else {
                continue;
            };
            let id = st.identity();
            if st.is_dead() || exclude.contains(&id) || seen.contains(&id) {
                continue;
            }
            if matches!(
                signal::to_handle(&fd, Signal::STOP),
                Ok(signal::Delivery::Sent)
            ) {
                seen.insert(id);
                stopped_pids.insert(pid);
                stopped.push(pid);
                held.push((Process::from(st), fd));
            }
        }
        stopped
    };
    let mut parents = vec![root];
    for _ in 0..MAX_STOP_ROUNDS {
        while let Some(parent) = parents.pop() {
            for _ in 0..MAX_STOP_ROUNDS {
                let found = stop_new(procfs::children(parent));
                if found.is_empty() {
                    break;
                }
                parents.extend(found);
            }
        }
        let orphans = stop_new(procfs::children(root));
        if orphans.is_empty() {
            break;
        }
        parents.extend(orphans);
    }
    Stopped(held)
}

impl Stopped {
    /// SIGKILLs every stopped process through its handle; returns them.
    pub(crate) fn kill(self) -> Vec<Process> {
        for (_, fd) in &self.0 {
            let _ = signal::to_handle(fd, Signal::KILL);
        }
        self.0.into_iter().map(|(m, _)| m).collect()
    }
}

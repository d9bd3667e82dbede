//! The SIGSTOP pass the backends end a run's stragglers with: SIGSTOP every process a look
//! finds, look again until a look finds nobody new (a stopped process cannot fork, so the set
//! converges), then SIGKILL them all through the handles the STOP went through, so a pid reused
//! meanwhile is never signalled. The subreaper backend, whose orphans all come back to reaper,
//! kills as it walks instead ([`kill_subtree`]).

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

/// The SIGKILL pass of a whole subtree of reaper's (the subreaper backend, whose orphans all
/// come back to reaper), reading each process once and killing it as it is found: the tree
/// starts dying during the walk instead of after it, and each process is signalled once, not
/// stopped and then killed. A process is killed before its children are listed, and once
/// SIGKILL is pending `copy_process` fails (on every thread of the target) unless the child is
/// already on its parent's list, so that list is final until the process exits; then its
/// children move to reaper, the subreaper. What a listing can still miss, and is looked for:
/// - a sibling made with `CLONE_PARENT` by a child not yet killed: each parent's list is read
///   again after its children were killed, until a read finds nobody new;
/// - an orphan: the children of a process that exited before (or while) its list was read are
///   reaper's, so reaper's own children are looked at again after the walk, until a look finds
///   nobody new.
///
/// Nothing reaper does not own is signalled: a pid is taken only from the children list of a
/// process of the tree (killed, so it forks no more) or of reaper, which reaps nothing during
/// the walk; the pidfd is opened first, then `stat` must show a live process whose parent is
/// that process or reaper. A pid freed and reused in between (the killed parent reaping a
/// zombie child in the moment before it dies) names a process with another parent, which is
/// left alone. `exclude` prunes the subtree of each process it names (reaper's guardian).
/// Returns the processes killed.
#[cfg(target_os = "linux")]
pub(crate) fn kill_subtree(root: i32, exclude: &[Identity]) -> Vec<Process> {
    use reaper_platform::linux::procfs;
    let mut killed: Vec<Process> = Vec::new();
    let mut killed_pids: HashSet<i32> = HashSet::new();
    // Kills each new process of `pids`, children of `parent`; returns the ones it killed.
    let mut kill_new = |parent: i32, pids: Vec<i32>| -> Vec<i32> {
        let mut fresh = Vec::new();
        for pid in pids {
            // Killed by this pass: its pid stays its own until reaper reaps it, after the walk
            // (or its killed parent, in the moment before it dies: a process of the tree
            // handed that pid before the walk ends, which needs the pid counter to wrap, is
            // missed here and found by the run layer's next pass).
            if killed_pids.contains(&pid) {
                continue;
            }
            let Some(p) = reaper_platform::Pid::from_raw(pid) else {
                continue;
            };
            // The pidfd first, then `stat`: if the pid was reused in between, the pidfd names
            // the process that has exited, and the KILL below fails on it.
            let Ok(fd) = Handle::open(p) else {
                continue;
            };
            let Ok(st) = procfs::stat(pid) else {
                continue;
            };
            if st.is_dead()
                || (st.ppid != parent && st.ppid != root)
                || exclude.contains(&st.identity())
            {
                continue;
            }
            if matches!(
                signal::to_handle(&fd, Signal::KILL),
                Ok(signal::Delivery::Sent)
            ) {
                killed_pids.insert(pid);
                fresh.push(pid);
                killed.push(Process::from(st));
            }
        }
        fresh
    };
    let mut parents = vec![root];
    for _ in 0..MAX_STOP_ROUNDS {
        while let Some(parent) = parents.pop() {
            for _ in 0..MAX_STOP_ROUNDS {
                let found = kill_new(parent, procfs::children(parent));
                if found.is_empty() {
                    break;
                }
                parents.extend(found);
            }
        }
        let orphans = kill_new(root, procfs::children(root));
        if orphans.is_empty() {
            break;
        }
        parents.extend(orphans);
    }
    killed
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

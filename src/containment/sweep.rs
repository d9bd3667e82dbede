//! The SIGSTOP sweep every backend ends a run's stragglers with: SIGSTOP every process a look
//! finds, look again until a look finds nobody new (a stopped process cannot fork, so the set
//! converges), then SIGKILL them all through the handles the STOP went through, so a pid reused
//! meanwhile is never signalled.

use std::collections::HashSet;

use reaper_platform::process::Handle;
use reaper_platform::{signal, Signal};

use super::Member;

/// Rounds of looking at the most: each round stops every process it finds, and only a process
/// still running can add new ones, so a fork storm converges in a few.
const MAX_STOP_ROUNDS: usize = 64;

/// The processes a [`stop`] stopped, each with the handle it was stopped through.
pub(crate) struct Stopped(Vec<(Member, Handle)>);

/// SIGSTOPs every process `look` returns, and calls it again (with the round's number, from
/// 0) until it returns nobody it had not returned before. `look` may do more each round (the
/// pgid backend SIGSTOPs its remembered groups there). A process that exits or whose pid was
/// reused before it could be stopped is left out.
pub(crate) fn stop(mut look: impl FnMut(usize) -> Vec<Member>) -> Stopped {
    let mut seen: HashSet<(i32, u64)> = HashSet::new();
    let mut held: Vec<(Member, Handle)> = Vec::new();
    for round in 0..MAX_STOP_ROUNDS {
        let fresh: Vec<Member> = look(round)
            .into_iter()
            .filter(|m| seen.insert((m.pid, m.starttime)))
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

impl Stopped {
    /// SIGKILLs every stopped process through its handle; returns them.
    pub(crate) fn kill(self) -> Vec<Member> {
        for (_, fd) in &self.0 {
            let _ = signal::to_handle(fd, Signal::KILL);
        }
        self.0.into_iter().map(|(m, _)| m).collect()
    }
}

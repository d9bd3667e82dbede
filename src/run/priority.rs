//! reaper's own scheduling during a run. A stop must not wait for the CPU behind the tree it
//! stops: a fork storm keeps every core busy, and a woken reaper at nice 0 waited for hundreds of
//! milliseconds before it could act, then was preempted by each process its kill woke. Where
//! permitted (`CAP_SYS_NICE`, or an `RLIMIT_NICE` / `RLIMIT_RTPRIO` that allows it), the runtime
//! thread, which reacts to the stop and kills, runs at nice -10 from the start and round-robin
//! real time during the kill pass; both with `SCHED_RESET_ON_FORK`, so nothing reaper starts
//! inherits them. Only from the default (`SCHED_OTHER` at nice 0): a reaper started niced keeps
//! that, and so does its tree.

#[cfg(target_os = "linux")]
use reaper_platform::linux::sched::{self, Raise, Saved};

/// The runtime thread's nice value during a run.
#[cfg(target_os = "linux")]
const RUN_NICE: i32 = -10;
/// Its round-robin priority during the kill pass: the lowest, above every `SCHED_OTHER` task.
#[cfg(target_os = "linux")]
const KILL_RR_PRIORITY: u32 = 1;

/// Raises the calling (runtime) thread for the run, when it runs at the default priority and
/// may be raised; otherwise leaves it.
pub(crate) fn at_start() {
    #[cfg(target_os = "linux")]
    if sched::is_default() {
        if let Err(e) = sched::raise(Raise::Nice(RUN_NICE)) {
            tracing::debug!("runtime thread stays at nice 0: {e}");
        }
    }
}

/// Round-robin real time for the calling thread until the guard is dropped, when [`at_start`]
/// raised it (so it may be raised, and was not niced by the user).
pub(crate) struct KillPass {
    #[cfg(target_os = "linux")]
    saved: Option<Saved>,
}

impl KillPass {
    pub(crate) fn begin() -> KillPass {
        #[cfg(target_os = "linux")]
        {
            let saved = sched::is_raised_nice(RUN_NICE)
                .then(|| sched::raise(Raise::RoundRobin(KILL_RR_PRIORITY)).ok())
                .flatten();
            KillPass { saved }
        }
        #[cfg(not(target_os = "linux"))]
        KillPass {}
    }
}

impl Drop for KillPass {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(s) = self.saved.take() {
            if let Err(e) = sched::restore(s) {
                tracing::debug!("runtime thread stays round-robin after the kill pass: {e}");
            }
        }
    }
}

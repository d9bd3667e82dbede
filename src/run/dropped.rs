//! The cleanup of runs dropped before their end, on threads of their own — and an exit hook, so
//! that a process that drops a [`crate::Child`] and returns from `main` at once still removes
//! the run's cgroup: `exit` waits (bounded) for the cleanups under way.
//!
//! The same hook stops the runs still alive at `exit`: `std::process::exit` runs no destructor,
//! and a `Child` that was `mem::forget`ten or lives in a `static` is never dropped. Each live
//! run registers what kills its tree from any thread ([`alive`]): on the cgroup backend
//! `cgroup.kill`, the wait for the cgroup to empty and its removal (the whole tree but a
//! process that left the cgroup); elsewhere SIGKILL to the leader and its process group. What no
//! hook can cover: `abort`, a death by signal, SIGKILL (the [`crate::Guardian`] is for those), a
//! forgotten `Child` in a process that never exits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::Instant;

use reaper_platform::process::Handle;
use reaper_platform::signal;

use crate::containment::select::AnyBackend;

/// Cleanups under way, and the process that counts them (a forked child inherits the count, not
/// the threads).
static PENDING: Mutex<(usize, u32)> = Mutex::new((0, 0));
static DONE: Condvar = Condvar::new();
static HOOK: Once = Once::new();
/// The latest deadline of any cleanup under way: the exit hook waits no longer.
static LATEST: Mutex<Option<Instant>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What kills one live run's tree, from any thread, bounded by a deadline.
type Kill = Arc<dyn Fn(Instant) + Send + Sync>;

/// The runs alive in this process (by a number of their own), and the process they are alive
/// in (a forked child inherits the list, not the runs).
static LIVE: Mutex<(u32, Vec<(u64, Kill)>)> = Mutex::new((0, Vec::new()));
static NEXT: AtomicU64 = AtomicU64::new(0);

fn hook() {
    HOOK.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that neither unwinds (it only locks,
        // signals, waits and returns) nor calls `exit`.
        if unsafe { libc::atexit(at_exit) } != 0 {
            tracing::debug!(
                "no exit hook: a run dropped just before exit may leave its cgroup, and one \
                 alive at exit its tree"
            );
        }
    });
}

/// A run alive in this process: killed by the exit hook unless dropped first (its `Run` ended,
/// was kept, or was dropped and killed).
pub(super) struct Live(u64);

impl Drop for Live {
    fn drop(&mut self) {
        lock(&LIVE).1.retain(|(n, _)| *n != self.0);
    }
}

/// Registers a run that has just started in `backend`, led by `leader`.
pub(super) fn alive(backend: &AnyBackend, leader: &Handle) -> Live {
    hook();
    let kill: Kill = match (backend.cgroup_path(), leader.try_clone()) {
        #[cfg(target_os = "linux")]
        (Some(path), _) => {
            let cg = reaper_platform::linux::cgroup::Cgroup::at(path);
            Arc::new(move |deadline| {
                let _ = signal::to_cgroup_kill(&cg);
                while cg.populated().unwrap_or(false) && Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                let _ = cg.remove_subtree();
            })
        }
        (_, Ok(h)) => Arc::new(move |_| {
            // Not reaped yet (the signal reached it, alive or a zombie): its pid is still its
            // own, and so is the group it leads, which the spawn created.
            if matches!(
                signal::to_handle(&h, reaper_platform::Signal::KILL),
                Ok(signal::Delivery::Sent)
            ) {
                if let Some(g) = reaper_platform::Pid::from_raw(h.raw_pid()) {
                    let _ = signal::to_process_group(g, reaper_platform::Signal::KILL);
                }
            }
        }),
        _ => Arc::new(|_| {}),
    };
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut live = lock(&LIVE);
    if live.0 != std::process::id() {
        *live = (std::process::id(), Vec::new());
    }
    live.1.push((n, kill));
    Live(n)
}

/// Runs `work` on a thread of its own; `exit` waits for it until `deadline`.
pub(super) fn clean_up(deadline: Instant, work: impl FnOnce() + Send + 'static) {
    hook();
    {
        let mut p = lock(&PENDING);
        p.0 += 1;
        p.1 = std::process::id();
        let mut latest = lock(&LATEST);
        *latest = Some(latest.map_or(deadline, |l| l.max(deadline)));
    }
    let counted = move || {
        let _done = Done;
        work();
    };
    if let Err(e) = std::thread::Builder::new()
        .name("reaper-cleanup".into())
        .spawn(counted)
    {
        // The closure (and its `Done`) was dropped with the error: the count is right again.
        tracing::warn!("cannot clean up after a dropped run ({e}): its cgroup is left to the guardian or the next sweep");
    }
}

/// Counts a cleanup done when dropped, whether the work returned or panicked.
struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        let mut p = lock(&PENDING);
        p.0 = p.0.saturating_sub(1);
        if p.0 == 0 {
            DONE.notify_all();
        }
    }
}

/// At `exit`: the live runs' trees killed (bounded), then the cleanups under way awaited.
extern "C" fn at_exit() {
    kill_live();
    wait_for_cleanups();
}

fn kill_live() {
    let kills: Vec<Kill> = {
        let live = lock(&LIVE);
        if live.0 != std::process::id() {
            return;
        }
        live.1.iter().map(|(_, k)| Arc::clone(k)).collect()
    };
    let deadline = Instant::now() + super::stop::KILL_DEADLINE;
    for kill in kills {
        kill(deadline);
    }
}

fn wait_for_cleanups() {
    let deadline = *lock(&LATEST);
    let Some(deadline) = deadline else { return };
    let mut p = lock(&PENDING);
    if p.1 != std::process::id() {
        return;
    }
    while p.0 > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        p = match DONE.wait_timeout(p, left) {
            Ok((g, _)) => g,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

//! The cleanup of runs dropped before their end, on threads of their own — and an exit hook, so
//! that a process that drops a [`crate::Child`] and returns from `main` at once still removes
//! the run's cgroup: `exit` waits (bounded) for the cleanups under way.

use std::sync::{Condvar, Mutex, Once};
use std::time::Instant;

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

/// Runs `work` on a thread of its own; `exit` waits for it until `deadline`.
pub(super) fn clean_up(deadline: Instant, work: impl FnOnce() + Send + 'static) {
    HOOK.call_once(|| {
        // SAFETY: `wait_at_exit` is an `extern "C" fn()` that neither unwinds (it only locks,
        // waits and returns) nor calls `exit`.
        if unsafe { libc::atexit(wait_at_exit) } != 0 {
            tracing::debug!("no exit hook: a run dropped just before exit may leave its cgroup");
        }
    });
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

extern "C" fn wait_at_exit() {
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

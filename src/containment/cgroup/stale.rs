//! The stale-cgroup sweep: run cgroups whose reaper is provably gone are killed and removed
//! ([`sweep_stale`]); [`remove_tree`] is also the guardian's way to remove its reaper's.

use std::path::{Path, PathBuf};

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::procfs;
use reaper_platform::signal;
use tokio::time::Instant;

use crate::error::{ContainError as Error, ContainErrorKind as Kind};
use crate::naming::{me, owner_of};

/// How long the sweep waits for a stale cgroup to empty.
const SWEEP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// The stale sweep of this process, while it runs.
static SWEEP: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>> = std::sync::Mutex::new(None);

/// Stale cgroups are swept once per reaper process, under the first parent it uses (`dir`), once
/// a run cgroup was made there (where reaper cannot write, nothing could be removed anyway). In the
/// background: a stale cgroup that cannot be emptied (a process in uninterruptible sleep, a
/// frozen one) must not delay the run; [`sweep_finished`] waits for it. `forget` is told each removed cgroup's name.
pub fn sweep_once(dir: &std::path::Path, forget: fn(&str)) {
    static SWEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SWEPT.swap(true, std::sync::atomic::Ordering::SeqCst) {
        let dir = dir.to_owned();
        let task = tokio::spawn(async move {
            for removed in sweep_stale(&dir, Instant::now() + SWEEP_DEADLINE).await {
                if let Some(name) = removed.file_name().and_then(|n| n.to_str()) {
                    forget(name);
                }
            }
        });
        *SWEEP.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }
}

/// Waits for the stale sweep this process started, if it still runs (at most its deadline), so
/// that reaper does not exit in the middle of it.
pub async fn sweep_finished() {
    let task = SWEEP.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(t) = task {
        let _ = t.await;
    }
}

/// Removes run cgroups under `dir` whose owning reaper is provably gone: kills what is left in
/// them, waits (until `deadline`) for them to empty, removes them. Returns the paths removed.
pub async fn sweep_stale(dir: &Path, deadline: Instant) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(names) = Cgroup::at(dir).children() else {
        return removed;
    };
    // The namespace whose pids this sweep can check: its own, unless /proc shows another.
    let seen_pidns = me()
        .ok()
        .and_then(|me| me.pidns)
        .filter(|_| !procfs::is_foreign());
    for name in names {
        let Some(owner) = owner_of(&name) else {
            continue;
        };
        let cg = Cgroup::at(dir.join(&name));
        if procfs::is_alive(owner.process.pid, owner.process.starttime) {
            continue;
        }
        // The claim is this sweep's owner lock, held until the cgroup is removed: a creator in
        // another PID namespace that has made the directory but not locked it yet then fails
        // its lock and makes another (see `create_owned`), rather than running in a cgroup
        // being killed.
        let _claim = match cg.try_lock_owner() {
            Ok(Some(lock)) => Some(lock),
            // An owner of this sweep's namespace is gone: no process has its pid and start
            // time. Whoever holds its lock took it after it (a process of its run waiting in
            // `flock`, the kernel handing it the lock at the owner's death; a guardian or
            // another sweep at work on it), and is no proof of life.
            _ if owner.pidns.is_some() && owner.pidns == seen_pidns => None,
            // An owner this sweep cannot see (another namespace, or a name without one): only
            // a free lock says it is gone. Not acquired: a live owner holds it (or the cgroup
            // is already gone).
            _ => continue,
        };
        if let Err(e) = remove_tree(&cg, deadline).await {
            tracing::warn!("stale cgroup {} left in place: {e}", cg.path().display());
        } else {
            tracing::info!(
                "removed stale cgroup {} (its reaper, pid {}, is gone)",
                cg.path().display(),
                owner.process.pid
            );
            removed.push(cg.path().to_owned());
        }
    }
    tracing::debug!(
        "stale-cgroup sweep of {} done: {} removed",
        dir.display(),
        removed.len()
    );
    removed
}

/// Kills everything in `cg` and below, waits for it to empty, removes it and its children.
pub async fn remove_tree(cg: &Cgroup, deadline: Instant) -> Result<(), Error> {
    loop {
        let mut watch = match cg.watch_events() {
            Ok(w) => Some(w),
            Err(e) if e.is_not_found() => return Ok(()),
            Err(_) => None,
        };
        // Kill even when `populated` says 0: a leader between fork and its pre_exec join is not
        // in the cgroup yet, and joins right after.
        match signal::to_cgroup_kill(cg) {
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
            Ok(()) => {}
        }
        loop {
            match cg.populated() {
                Ok(false) => break,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.into()),
                Ok(true) => {}
            }
            let woke = match watch.as_mut() {
                Some(w) => tokio::time::timeout_at(deadline, w.changed()).await.is_ok(),
                None => {
                    tokio::time::sleep(RETRY).await;
                    Instant::now() < deadline
                }
            };
            if !woke {
                return Err(Error::new(
                    Kind::CgroupUnusable,
                    format!("{} still populated after cgroup.kill", cg.path().display()),
                ));
            }
        }
        // Children first, relative to directory fds (the tree may nest sub-cgroups past
        // PATH_MAX). EBUSY: a late joiner has populated it again; kill and try again.
        match cg.remove_subtree() {
            Ok(()) => return Ok(()),
            Err(e) if !e.is_busy() || Instant::now() >= deadline => return Err(e.into()),
            Err(_) => {}
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Between two attempts to remove a cgroup that is busy again.
const RETRY: std::time::Duration = std::time::Duration::from_millis(5);

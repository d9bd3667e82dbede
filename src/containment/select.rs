//! Backend selection: which containment a run gets (`auto`, an explicit backend, the fallback
//! from cgroup to subreaper and its reason), and the stale-cgroup sweep before the first run
//! cgroup. `run`, `check`, `mcp` and `doctor` all choose here.

use std::time::Duration;

use super::pgid::Schedule;
#[cfg(target_os = "linux")]
use tokio::time::Instant;

#[cfg(target_os = "linux")]
use super::cgroup::{create, delegate, limits, place, stale, CgroupBackend};
use super::{AnyBackend, Backend, BackendKind, Error, Kind};
use crate::containment;
use crate::options::{ContainOptions, Containment, Options};

/// pgid backend: how often the process table is read right after the spawn and while the tree
/// is changing (backing off to `--poll` when it is quiet), and the fastest `--poll` allowed.
const POLL_FAST: Duration = Duration::from_millis(5);
const POLL_MIN: Duration = Duration::from_millis(1);
/// How long the stale-cgroup sweep waits for a stale cgroup to empty.
#[cfg(target_os = "linux")]
const SWEEP_DEADLINE: Duration = Duration::from_secs(1);

/// Creates the run's containment as requested; for `auto`, falls back from cgroup to subreaper
/// and says why in the returned warning.
pub async fn contain(opts: &Options) -> Result<(AnyBackend, Option<String>), Error> {
    #[cfg(target_os = "linux")]
    let cgroup = || async {
        if opts.cgroup_parent.is_none() {
            let ask = opts.delegation == crate::Delegation::Auto;
            if let delegate::Delegated::Failed { why } = delegate::ensure(ask).await {
                return Err(Error::new(
                    Kind::NotDelegated,
                    format!(
                    "{why}; reaper does not create run cgroups in a cgroup systemd manages for \
                     another unit (--delegate never does it anyway; --cgroup-parent names a \
                     cgroup of yours)"
                ),
                ));
            }
        }
        let env = place::discover()?;
        let placement = env.placement(opts.cgroup_parent.as_deref())?;
        // Before any cgroup is created there (the supervisor leaf included), so a process killed
        // right after the mkdir still has its watcher looking in the right place.
        if let Some(w) = opts.watcher() {
            w.watch(&placement.dir);
        }
        let delegated = delegate::done().is_some_and(|d| d.unit().is_some());
        let enable = limits::check(
            &opts.limits,
            &env,
            &placement,
            limits::ownership(opts.cgroup_parent.is_some(), delegated),
        )?;
        create::ensure_leaf(&env, &placement, !enable.is_empty())?;
        if !enable.is_empty() {
            limits::enable(&placement, &enable)?;
        }
        let mut backend = CgroupBackend::new(create::create_run_cgroup(&placement)?)?;
        sweep_once(&placement.dir);
        // The watcher is this process's child outside every run cgroup, like an orphan of the
        // run: never one of its processes.
        if let Some(w) = opts.watcher() {
            backend.exclude(w.process());
        }
        if let Err(e) = limits::apply(backend.cgroup(), &opts.limits) {
            let _ = backend.release();
            return Err(e);
        }
        Ok::<_, Error>(backend)
    };
    // A limit needs the cgroup backend: never a silent run without it.
    let no_limits = |backend: &str| -> Result<(), Error> {
        if opts.limits.is_empty() {
            Ok(())
        } else {
            Err(Error::new(
                Kind::LimitUnavailable,
                format!(
                    "{} needs the cgroup backend (cgroup v2); --containment {backend} cannot \
                 enforce it; a limit is never dropped, so the run did not start",
                    opts.limits.flags()
                ),
            ))
        }
    };
    #[cfg(target_os = "linux")]
    let subreaper = || {
        if !reaper_platform::reap::reaps_every_child() {
            return Err(Error::new(
                Kind::ChildrenNotOwned,
                "the subreaper backend takes every orphan that comes back to this process for \
                 the run's, so it needs `reaper::own_every_child()` (a process that starts no \
                 children of its own); use the cgroup backend, or pgid",
            ));
        }
        foreign_proc("subreaper")?;
        containment::subreaper::SubreaperBackend::new()
            .map(|mut b| {
                if let Some(w) = opts.watcher() {
                    b.exclude(w.process());
                }
                AnyBackend::Subreaper(b)
            })
            .map_err(|e| {
                Error::new(
                    Kind::NoSubreaper,
                    format!("cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): {e}"),
                )
            })
    };
    let pgid = || {
        #[cfg(target_os = "linux")]
        foreign_proc("pgid")?;
        let schedule = Schedule::new(POLL_FAST, opts.poll.max(POLL_MIN));
        containment::pgid::PgidBackend::new(schedule)
            .map(AnyBackend::Pgid)
            .map_err(|e| {
                Error::new(
                    Kind::NoProcessTable,
                    format!("cannot read the process table for the pgid backend: {e}"),
                )
            })
    };
    match opts.containment {
        #[cfg(target_os = "linux")]
        Containment::Cgroup => cgroup().await.map(|b| (AnyBackend::Cgroup(b), None)),
        #[cfg(target_os = "linux")]
        Containment::Subreaper => {
            no_limits("subreaper")?;
            subreaper().map(|b| (b, None))
        }
        #[cfg(not(target_os = "linux"))]
        Containment::Cgroup => Err(Error::new(
            Kind::Unsupported,
            "--containment cgroup is Linux-only (cgroup v2); on macOS use pgid, which auto picks",
        )),
        #[cfg(not(target_os = "linux"))]
        Containment::Subreaper => Err(Error::new(
            Kind::Unsupported,
            "--containment subreaper is Linux-only (PR_SET_CHILD_SUBREAPER); on macOS use pgid, \
             which auto picks",
        )),
        Containment::Pgid => {
            no_limits("pgid")?;
            pgid().map(|b| (b, None))
        }
        // No cgroups and no subreaper on macOS: the process table is all there is.
        #[cfg(not(target_os = "linux"))]
        Containment::Auto => {
            no_limits("auto (pgid on macOS)")?;
            pgid().map(|b| (b, None))
        }
        #[cfg(target_os = "linux")]
        Containment::Auto => match cgroup().await {
            // A `--cgroup-parent` that is not a cgroup2 directory is the caller's mistake, not
            // a host without cgroups: refused (and nothing created) rather than a fallback.
            Err(why) if why.kind() == Kind::ParentRefused => Err(why),
            Ok(b) => Ok((AnyBackend::Cgroup(b), None)),
            // No fallback: the subreaper cannot enforce a limit.
            Err(why) if !opts.limits.is_empty() => Err(why),
            Err(why) if reaper_platform::reap::reaps_every_child() => subreaper().map(|b| {
                let warning = format!(
                    "reaper: warning: no cgroup for this run ({why}); using the subreaper backend instead; run `reaper doctor` for details"
                );
                (b, Some(warning))
            }),
            // A library in a process with children of its own: not the subreaper, which would
            // take them for the run's.
            Err(why) => pgid().map(|b| {
                let warning = format!(
                    "reaper: warning: no cgroup for this run ({why}); using the pgid backend instead; run `reaper doctor` for details"
                );
                (b, Some(warning))
            }),
        },
    }
}

/// What a machine offers, as `reaper doctor` found it by trying (a run cgroup really created
/// and removed, the subreaper really asked for).
#[derive(Debug, Clone, Copy, Default)]
// macOS reads `pgid` alone: it has no cgroups, no subreaper and no pidfd.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub struct Found {
    /// A run cgroup could be created.
    pub run_cgroup: bool,
    /// reaper could become a child subreaper.
    pub subreaper: bool,
    /// pidfds work: every run watches its leader through one (`Run::start` refuses without).
    pub pidfd: bool,
    /// The pgid backend can read the process table (auto's pick on macOS only: on Linux it is
    /// the weakest backend, asked for by name).
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    pub pgid: bool,
}

/// The backend `--containment auto` picks given `found` (without limits), in [`contain`]'s
/// order: the cgroup backend, else the subreaper (Linux); the pgid backend (macOS). `None`:
/// no run can start here.
pub fn auto_choice(found: Found) -> Option<BackendKind> {
    #[cfg(target_os = "linux")]
    {
        if !found.pidfd {
            None
        } else if found.run_cgroup {
            Some(BackendKind::Cgroup)
        } else if found.subreaper {
            Some(BackendKind::Subreaper)
        } else {
            None
        }
    }
    #[cfg(not(target_os = "linux"))]
    found.pgid.then_some(BackendKind::Pgid)
}

/// The subreaper and pgid backends find the tree in `/proc` by the pids it lists: under a
/// `/proc` of another PID namespace those name other processes (the parent namespace's: as
/// PID 1, "descendants of 1" would be the host's whole tree), so they refuse it.
#[cfg(target_os = "linux")]
fn foreign_proc(backend: &str) -> Result<(), Error> {
    if reaper_platform::linux::procfs::is_foreign() {
        return Err(Error::new(
            Kind::NoProcessTable,
            format!(
                "the {backend} backend cannot work here: /proc shows another PID namespace than \
             reaper's (a PID namespace entered without a /proc of its own); mount one for this \
             namespace (`unshare --pid --fork --mount-proc`; container runtimes do)"
            ),
        ));
    }
    Ok(())
}

/// The stale sweep of this process, while it runs.
#[cfg(target_os = "linux")]
static SWEEP: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>> = std::sync::Mutex::new(None);

/// Stale cgroups are swept once per reaper process, under the first parent it uses, once a run
/// cgroup was made there (where reaper cannot write, nothing could be removed anyway). In the
/// background: a stale cgroup that cannot be emptied (a process in uninterruptible sleep, a
/// frozen one) must not delay the run; [`sweep_finished`] waits for it.
#[cfg(target_os = "linux")]
fn sweep_once(dir: &std::path::Path) {
    static SWEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SWEPT.swap(true, std::sync::atomic::Ordering::SeqCst) {
        let dir = dir.to_owned();
        let task = tokio::spawn(async move {
            stale::sweep_stale(&dir, Instant::now() + SWEEP_DEADLINE).await;
        });
        *SWEEP.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }
}

/// Waits for the stale sweep this process started, if it still runs (at most its deadline), so
/// that reaper does not exit in the middle of it.
pub async fn sweep_finished() {
    #[cfg(target_os = "linux")]
    {
        let task = SWEEP.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }
}

/// Whether concurrent runs in this process get trees of their own. They do with cgroups; the
/// subreaper backend contains reaper's whole subtree as one, so under it stopping one run would
/// stop the others too. Tries the containment the runs will get (a cgroup is made and removed).
/// When `auto` got a backend that keeps runs apart, pins `opts` to it: a run that later cannot
/// get it fails and says why, instead of falling back into the subtree it would share with the
/// others. Fails when `opts` has limits and no run could get them: a server whose every run
/// would fail says so once, at the start.
pub async fn isolated(opts: &mut Options) -> Result<bool, Error> {
    let (mut backend, _) = match contain(opts).await {
        Ok(b) => b,
        Err(e) if !opts.limits.is_empty() => return Err(e),
        // Every run will fail to start, and say why.
        Err(_) => return Ok(true),
    };
    let apart = backend.capabilities().isolates_concurrent_runs;
    #[cfg(target_os = "linux")]
    if let AnyBackend::Cgroup(_) = backend {
        if opts.containment == Containment::Auto {
            opts.containment = Containment::Cgroup;
        }
    }
    if let Err(e) = backend.release() {
        tracing::debug!("removing the probe's containment: {e}");
    }
    Ok(apart)
}

impl ContainOptions {
    /// Tries the containment these options get (a run cgroup is made and removed) and says
    /// whether concurrent runs get trees of their own: they do with cgroups; the subreaper
    /// backend holds this process's whole subtree as one, so stopping one run would stop the
    /// others. When `Auto` got a cgroup, pins these options to [`Containment::Cgroup`]: a run
    /// that later cannot get one fails and says why, instead of falling back into a subtree it
    /// would share. Fails when there are limits and no run could get them. For a server that
    /// runs commands side by side; runs them one at a time when this says false.
    pub async fn keep_runs_apart(&mut self) -> Result<bool, crate::ContainError> {
        isolated(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `doctor` says what `contain` would pick: the cgroup backend first, then the subreaper,
    /// and nothing without pidfds (Linux); the pgid backend on macOS.
    #[test]
    fn auto_picks_in_contains_order() {
        let found = |run_cgroup, subreaper, pidfd| Found {
            run_cgroup,
            subreaper,
            pidfd,
            pgid: true,
        };
        #[cfg(target_os = "linux")]
        {
            let pick = |f| auto_choice(f).map(BackendKind::as_str);
            assert_eq!(pick(found(true, true, true)), Some("cgroup"));
            assert_eq!(pick(found(false, true, true)), Some("subreaper"));
            assert_eq!(pick(found(false, false, true)), None);
            assert_eq!(pick(found(true, true, false)), None);
        }
        #[cfg(not(target_os = "linux"))]
        assert_eq!(
            auto_choice(found(false, false, false)),
            Some(BackendKind::Pgid)
        );
    }
}

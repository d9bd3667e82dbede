//! Backend selection: which containment a run gets (`auto`, an explicit backend, the fallback
//! from cgroup to subreaper and its reason), made from a [`Request`]. `run`, `check`, `mcp` and
//! `doctor` all choose here.

mod any;

#[cfg(target_os = "linux")]
use super::cgroup::{create, delegate, limits, place, stale, CgroupBackend};
use super::pgid::{PgidBackend, Schedule};
#[cfg(target_os = "linux")]
use super::subreaper::SubreaperBackend;
use super::{Backend, BackendKind, Containment, Error, Kind, Request};
use crate::error::Refusal;
pub use any::AnyBackend;

/// Creates the run's containment as requested; for `auto`, falls back from cgroup to subreaper
/// (or pgid) and returns why.
pub async fn contain(req: &Request) -> Result<(AnyBackend, Option<Error>), Error> {
    match req.containment.backend() {
        None => auto(req).await,
        Some(kind) => make(kind, req).await.map(|b| (b, None)),
    }
}

/// The backends `auto` tries, in order: the first that works is the run's. Without
/// [`crate::own_every_child`], not the subreaper, which would take this process's own children
/// for the run's. [`contain`] and [`auto_choice`] (doctor) both follow it.
fn auto_order(owns_every_child: bool) -> &'static [BackendKind] {
    #[cfg(target_os = "linux")]
    {
        if owns_every_child {
            &[BackendKind::Cgroup, BackendKind::Subreaper]
        } else {
            &[BackendKind::Cgroup, BackendKind::Pgid]
        }
    }
    // No cgroups and no subreaper on macOS: the process table is all there is.
    #[cfg(not(target_os = "linux"))]
    {
        let _ = owns_every_child;
        &[BackendKind::Pgid]
    }
}

/// `auto`: the first backend of [`auto_order`] that works; a fallback returns why the first
/// did not.
async fn auto(req: &Request) -> Result<(AnyBackend, Option<Error>), Error> {
    let mut first: Option<Error> = None;
    let mut last = None;
    for &kind in auto_order(reaper_platform::reap::reaps_every_child()) {
        match make(kind, req).await {
            Ok(b) => return Ok((b, first)),
            // A `cgroup_parent` that is not a cgroup2 directory is the caller's mistake, not
            // a host without cgroups: refused (and nothing created) rather than a fallback. And
            // no fallback with limits: only the first backend enforces them.
            Err(why)
                if first.is_none()
                    && (why.kind() == Kind::ParentRefused || !req.limits.is_empty()) =>
            {
                return Err(why)
            }
            Err(why) if first.is_none() => first = Some(why),
            Err(why) => last = Some(why),
        }
    }
    Err(last
        .or(first)
        .unwrap_or_else(|| Error::new(Kind::Unsupported, "no containment backend here")))
}

/// Makes one backend for `req`.
async fn make(kind: BackendKind, req: &Request) -> Result<AnyBackend, Error> {
    match kind {
        #[cfg(target_os = "linux")]
        BackendKind::Cgroup => cgroup(req).await.map(AnyBackend::Cgroup),
        #[cfg(target_os = "linux")]
        BackendKind::Subreaper => {
            no_limits(req, kind)?;
            subreaper(req).map(AnyBackend::Subreaper)
        }
        BackendKind::Pgid => {
            no_limits(req, kind)?;
            pgid(req).map(AnyBackend::Pgid)
        }
        #[cfg(not(target_os = "linux"))]
        BackendKind::Cgroup => Err(Error::new(
            Kind::Unsupported,
            "the cgroup backend is Linux-only (cgroup v2); on macOS use pgid, which auto picks",
        )
        .refused(Refusal::Unsupported { backend: kind })),
        #[cfg(not(target_os = "linux"))]
        BackendKind::Subreaper => Err(Error::new(
            Kind::Unsupported,
            "the subreaper backend is Linux-only (PR_SET_CHILD_SUBREAPER); on macOS use pgid, \
             which auto picks",
        )
        .refused(Refusal::Unsupported { backend: kind })),
    }
}

/// A limit needs the cgroup backend: never a silent run without it.
fn no_limits(req: &Request, backend: BackendKind) -> Result<(), Error> {
    if req.limits.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            Kind::LimitUnavailable,
            format!(
                "{} needs the cgroup backend (cgroup v2); the {} backend cannot enforce it; a \
                 limit is never dropped, so the run did not start",
                req.limits.files(),
                backend.as_str()
            ),
        )
        .refused(Refusal::NeedsCgroups {
            limits: req.limits,
            asked: req.containment.backend(),
        }))
    }
}

/// The cgroup backend: a run cgroup of its own, where `req` places it, with its limits.
#[cfg(target_os = "linux")]
async fn cgroup(req: &Request) -> Result<CgroupBackend, Error> {
    if req.cgroup_parent.is_none() {
        let ask = req.delegation == crate::Delegation::Auto;
        if let delegate::Delegated::Failed { why } = delegate::ensure(ask).await {
            return Err(Error::new(
                Kind::NotDelegated,
                format!(
                    "{why}; reaper does not create run cgroups in a cgroup systemd manages for \
                     another unit"
                ),
            ));
        }
    }
    let env = place::discover()?;
    let placement = env.placement(req.cgroup_parent.as_deref())?;
    // Before any cgroup is created there (the supervisor leaf included), so a process killed
    // right after the mkdir still has its watcher looking in the right place.
    if let Some(w) = &req.watcher {
        w.watch(&placement.dir);
    }
    let delegated = delegate::done().is_some_and(|d| d.unit().is_some());
    let enable = limits::check(
        &req.limits,
        &env,
        &placement,
        limits::ownership(req.cgroup_parent.is_some(), delegated),
    )?;
    create::ensure_leaf(&env, &placement, !enable.is_empty())?;
    if !enable.is_empty() {
        limits::enable(&placement, &enable)?;
    }
    let mut backend = CgroupBackend::new(create::create_run_cgroup(&placement)?)?;
    stale::sweep_once(&placement.dir, req.forget_stale);
    // The watcher is this process's child outside every run cgroup, like an orphan of the
    // run: never one of its processes.
    if let Some(w) = &req.watcher {
        backend.exclude(w.process());
    }
    if let Err(e) = limits::apply(backend.cgroup(), &req.limits) {
        let _ = backend.release();
        return Err(e);
    }
    Ok(backend)
}

/// The subreaper backend: this process as child subreaper.
#[cfg(target_os = "linux")]
fn subreaper(req: &Request) -> Result<SubreaperBackend, Error> {
    if !reaper_platform::reap::reaps_every_child() {
        return Err(Error::new(
            Kind::ChildrenNotOwned,
            "the subreaper backend takes every orphan that comes back to this process for \
             the run's, so it needs `reaper::own_every_child()` (a process that starts no \
             children of its own); use the cgroup backend, or pgid",
        ));
    }
    foreign_proc("subreaper")?;
    SubreaperBackend::new()
        .map(|mut b| {
            if let Some(w) = &req.watcher {
                b.exclude(w.process());
            }
            b
        })
        .map_err(|e| {
            Error::new(
                Kind::NoSubreaper,
                format!("cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): {e}"),
            )
        })
}

/// The pgid backend: the process table, polled.
fn pgid(req: &Request) -> Result<PgidBackend, Error> {
    #[cfg(target_os = "linux")]
    foreign_proc("pgid")?;
    let schedule = Schedule::backing_off_to(req.poll);
    PgidBackend::new(schedule).map_err(|e| {
        Error::new(
            Kind::NoProcessTable,
            format!("cannot read the process table for the pgid backend: {e}"),
        )
    })
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

/// The backend `--containment auto` picks given `found` (without limits), by [`contain`]'s own
/// order ([`auto_order`]) and this process's ownership of its children. `None`: no run can
/// start here.
pub fn auto_choice(found: Found) -> Option<BackendKind> {
    choice(found, reaper_platform::reap::reaps_every_child())
}

fn choice(found: Found, owns_every_child: bool) -> Option<BackendKind> {
    // Every run watches its leader through a pidfd (macOS has none, and needs none).
    if cfg!(target_os = "linux") && !found.pidfd {
        return None;
    }
    auto_order(owns_every_child)
        .iter()
        .copied()
        .find(|&kind| match kind {
            BackendKind::Cgroup => found.run_cgroup,
            BackendKind::Subreaper => found.subreaper,
            BackendKind::Pgid => found.pgid,
        })
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

/// Whether concurrent runs in this process get trees of their own. They do with cgroups; the
/// subreaper backend contains reaper's whole subtree as one, so under it stopping one run would
/// stop the others too. Tries the containment the runs will get (a cgroup is made and removed).
/// When `auto` got a backend that keeps runs apart, also says which to pin the request to: a
/// run that later cannot get it fails and says why, instead of falling back into the subtree it
/// would share with the others. Fails when `req` has limits and no run could get them: a
/// server whose every run would fail says so once, at the start.
pub(crate) async fn isolated(req: &Request) -> Result<(bool, Option<Containment>), Error> {
    let (mut backend, _) = match contain(req).await {
        Ok(b) => b,
        Err(e) if !req.limits.is_empty() => return Err(e),
        // Every run will fail to start, and say why.
        Err(_) => return Ok((true, None)),
    };
    let apart = backend.capabilities().isolates_concurrent_runs;
    let pin = (req.containment == Containment::Auto && backend.kind() == BackendKind::Cgroup)
        .then_some(Containment::Cgroup);
    if let Err(e) = backend.release() {
        tracing::debug!("removing the probe's containment: {e}");
    }
    Ok((apart, pin))
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
            let pick = |f| choice(f, true).map(BackendKind::as_str);
            assert_eq!(pick(found(true, true, true)), Some("cgroup"));
            assert_eq!(pick(found(false, true, true)), Some("subreaper"));
            assert_eq!(pick(found(false, false, true)), None);
            assert_eq!(pick(found(true, true, false)), None);
        }
        #[cfg(not(target_os = "linux"))]
        assert_eq!(
            choice(found(false, false, false), true),
            Some(BackendKind::Pgid)
        );
    }
}

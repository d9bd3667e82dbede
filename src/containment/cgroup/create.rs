//! Creating reaper's cgroups: a run's own ([`create_run_cgroup`]), and the leaf reaper moves
//! itself into when its cgroup may not hold processes ([`ensure_leaf`]). Each is made and
//! locked by [`create_owned`], so a stale-cgroup sweep never takes a live one.

use std::os::fd::OwnedFd;
use std::path::Path;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::cgroupfs;

use super::place::{me_or_err, CgroupEnv, Placement};
use crate::error::{ContainError as Error, ContainErrorKind as Kind};
use crate::naming::supervisor_name;

/// A run cgroup just created, and its owner lock (held for the run's life).
#[derive(Debug)]
pub struct RunCgroup {
    /// The cgroup.
    pub cgroup: Cgroup,
    /// Its path in the unified hierarchy, as `/proc/PID/cgroup` shows it.
    pub path: String,
    /// Its directory, flocked (see [`create_owned`]).
    pub lock: OwnedFd,
}

/// Creates a fresh run cgroup under `placement`, named after the run it is for: its number is
/// the next run's of this process (`crate::naming::RunId`).
pub fn create_run_cgroup(placement: &Placement) -> Result<RunCgroup, Error> {
    let me = me_or_err()?;
    let next_name = || me.name(&crate::naming::next_seq().to_string());
    let (cgroup, lock) = create_owned(&placement.dir, next_name, Cgroup::create)?;
    let path = format!("{}/{}", placement.path.trim_end_matches('/'), cgroup.name());
    Ok(RunCgroup { cgroup, path, lock })
}

/// If the parent has controllers enabled for its children, or reaper is about to enable some
/// (`enabling`: limits), it may not also hold processes (the no-internal-processes rule), and
/// reaper itself lives there: move reaper into a leaf of its own first. The root cgroup is
/// exempt from the rule.
pub fn ensure_leaf(
    env: &CgroupEnv,
    placement: &Placement,
    enabling: bool,
) -> Result<Option<Cgroup>, Error> {
    if env.own_path == "/" || placement.dir != env.own_dir {
        return Ok(None);
    }
    let parent = Cgroup::at(&placement.dir);
    if !enabling && parent.subtree_control()?.is_empty() {
        return Ok(None);
    }
    let me = rustix::process::getpid();
    // Already moved (an earlier run of this reaper).
    if parent.procs()?.iter().all(|p| *p != me) {
        return Ok(None);
    }
    let name = supervisor_name(me_or_err()?);
    let (leaf, lock) = create_owned(&placement.dir, || name.clone(), Cgroup::create)?;
    // Locked before reaper moves in, and for as long as reaper lives: a sweep that cannot see
    // this process (another PID namespace) would otherwise take the leaf for a stale one and
    // kill reaper with it. reaper cannot remove the cgroup it lives in:
    // its guardian does once reaper has exited, or else the next reaper's stale sweep.
    static SUPERVISOR_LOCK: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();
    let _ = SUPERVISOR_LOCK.set(lock);
    leaf.add_process(me)?;
    Ok(Some(leaf))
}

/// Creates a cgroup of ours (`mkdir` with a name from `next_name`) and takes its owner lock.
///
/// The two steps cannot be one, and between them a stale-cgroup sweep that cannot see this
/// process (it runs in another PID namespace, or reads a `/proc` of another one, so the owner
/// pid in the name proves nothing to it) finds a directory nobody has locked. The sweep claims
/// a cgroup by taking that lock and holds it until the cgroup is removed, so exactly one side
/// gets it: if we do, no such sweep will touch the cgroup while we live; if the sweep does, the
/// directory is its to remove and we make a fresh one. (A sweep that can see us leaves the
/// cgroup alone by our pid and start time, lock or no lock.) Each retry needs a sweep to win
/// the race again, so a few suffice; no wait is involved, so a stopped sweeper cannot hold us
/// up.
fn create_owned(
    dir: &Path,
    mut next_name: impl FnMut() -> String,
    mut mkdir: impl FnMut(&Path, &str) -> cgroupfs::Result<Cgroup>,
) -> Result<(Cgroup, OwnedFd), Error> {
    for _ in 0..CLAIM_ATTEMPTS {
        let cg = match mkdir(dir, &next_name()) {
            Ok(cg) => cg,
            // Not ours to use, whoever made it (a dead reaper of a namespace whose inode ours
            // reuses, with our pid and start time); the next name is.
            Err(e) if e.source.raw_os_error() == Some(libc::EEXIST) => {
                tracing::debug!("{e}; creating another");
                continue;
            }
            Err(e) => return Err(Error::from(e).of_kind(Kind::CgroupUnusable)),
        };
        match cg.try_lock_owner() {
            Ok(Some(lock)) => return Ok((cg, lock)),
            // Claimed by a sweep (or already removed by one): not ours to touch any more.
            Ok(None) => tracing::debug!(
                "{} was claimed by a stale-cgroup sweep before its owner lock; creating another",
                cg.path().display()
            ),
            Err(e) => {
                let _ = cg.remove();
                return Err(e.into());
            }
        }
    }
    Err(Error::new(
        Kind::Claimed,
        format!(
            "every cgroup reaper created under {} was claimed by another reaper's stale-cgroup \
         sweep before reaper could lock it ({CLAIM_ATTEMPTS} tries); try again",
            dir.display()
        ),
    ))
}

/// How many fresh cgroups [`create_owned`] makes before giving up to sweeps that claim them.
const CLAIM_ATTEMPTS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    /// Two reapers in different PID namespaces can share a pid and start time (two PID 1s
    /// started in the same clock tick), and so the names of their cgroups: one made
    /// `reaper-1-2-1` first. The other must move on to the next name, never fail the run nor
    /// take the existing directory.
    #[test]
    fn a_name_another_reaper_made_first_is_skipped() {
        let tmp = std::env::temp_dir().join(format!("reaper-unit-exists-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("reaper-1-2-1")).unwrap();
        let mut seq = 0;
        let next_name = || {
            seq += 1;
            format!("reaper-1-2-{seq}")
        };
        let (cg, _lock) = create_owned(&tmp, next_name, Cgroup::create).unwrap();
        assert_eq!(cg.name(), "reaper-1-2-2");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Issue 10, "the stale sweep's flock probe": a sweep in another PID namespace cannot see a
    /// new run cgroup's creator, so it may find the directory between the creator's `mkdir` and
    /// its lock. Whoever locks first owns it: here the sweep does (and holds the lock until it
    /// has removed the directory), so the creator must neither fail the run nor use that
    /// cgroup, but make a fresh one — which no sweep can then claim.
    #[test]
    fn a_cgroup_claimed_by_a_sweep_before_its_creator_locked_it_is_left_to_the_sweep() {
        let tmp = std::env::temp_dir().join(format!("reaper-unit-claim-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut seq = 0;
        let mut next_name = || {
            seq += 1;
            format!("reaper-1-2-{seq}")
        };
        let mut sweeps_claim = None;
        let mkdir_then_a_sweep_claims_the_first = |dir: &Path, name: &str| {
            let cg = Cgroup::create(dir, name)?;
            if sweeps_claim.is_none() {
                sweeps_claim = Some(cg.try_lock_owner().unwrap().expect("the sweep's claim"));
            }
            Ok(cg)
        };
        let (cg, _lock) =
            create_owned(&tmp, &mut next_name, mkdir_then_a_sweep_claims_the_first).unwrap();
        assert_eq!(
            cg.name(),
            "reaper-1-2-2",
            "the creator moved on to a fresh cgroup"
        );
        assert!(
            tmp.join("reaper-1-2-1").exists(),
            "the claimed one is the sweep's to remove"
        );
        assert!(
            cg.try_lock_owner().unwrap().is_none(),
            "a later sweep cannot claim the creator's cgroup"
        );
        // Bounded: a sweep that wins every race ends the attempts with an error, not a wait.
        let mut claims = Vec::new();
        let err = create_owned(&tmp, &mut next_name, |dir: &Path, name: &str| {
            let cg = Cgroup::create(dir, name)?;
            claims.push(cg.try_lock_owner().unwrap());
            Ok(cg)
        })
        .unwrap_err()
        .to_string();
        assert_eq!(claims.len(), CLAIM_ATTEMPTS);
        assert!(
            err.contains("stale-cgroup sweep") && err.contains("try again"),
            "{err}"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}

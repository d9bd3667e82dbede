//! Choosing and creating a run's containment: find the cgroup2 mount and reaper's own cgroup,
//! pick the parent for run cgroups, clear stale ones, create the run's cgroup — or explain why
//! not, so `auto` can fall back and `doctor` can tell the user.
//!
//! Run cgroups are named `reaper-PIDNS-PID-STARTTIME-SEQ` after the reaper process that owns
//! them: the inode of its PID namespace, its pid and start time there. A later reaper of the
//! same namespace proves the owner gone by pid and start time before removing one; the owner
//! lock (an exclusive `flock` on the directory) speaks only for an owner it cannot see. Nothing
//! else is ever touched.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::cgroupfs;
use reaper_platform::linux::mountinfo::{self, Cgroup2Mount};
use reaper_platform::linux::{procfs, signal};
use tokio::time::Instant;

use super::cgroup::CgroupBackend;
use super::{Error, Kind};
use crate::error::RUN_DOCTOR;

/// What reaper found out about the cgroup2 hierarchy it runs in.
#[derive(Debug, Clone)]
pub struct CgroupEnv {
    pub mount: Cgroup2Mount,
    /// Whether cgroup v1 hierarchies are mounted too.
    pub hybrid: bool,
    /// reaper's own cgroup, as `/proc/self/cgroup` names it.
    pub own_path: String,
    /// …and on disk.
    pub own_dir: PathBuf,
}

/// Finds the cgroup2 mount and reaper's cgroup in it.
pub fn discover() -> Result<CgroupEnv, Error> {
    let (mount, hybrid) = mounts()?;
    // Read at every discovery: reaper's own cgroup can change under it (systemd delegation
    // moves it into a scope; anyone with the right may move it). One read for the usual size.
    let pc = read_small("/proc/self/cgroup").map_err(|e| {
        Error::io(Kind::NoCgroup2, "cannot read /proc/self/cgroup", &e).on("/proc/self/cgroup")
    })?;
    let mut own_path = mountinfo::unified_cgroup_path(&pc).ok_or_else(|| {
        Error::new(
            Kind::NoCgroup2,
            "/proc/self/cgroup has no cgroup v2 (0::) line",
        )
    })?;
    // After `ensure_leaf` reaper lives in its supervisor leaf; its cgroup, for placing runs and
    // enabling controllers, is still the one above (else every later run would nest a level
    // deeper, inside a cgroup that holds reaper).
    if let Ok(me) = me() {
        let leaf = format!("/{}", supervisor_name(me));
        if let Some(parent) = own_path.strip_suffix(&leaf) {
            own_path = if parent.is_empty() {
                "/".to_owned()
            } else {
                parent.to_owned()
            };
        }
    }
    let own_dir = mountinfo::cgroup_dir(&mount, &own_path).ok_or_else(|| {
        Error::new(
            Kind::NoCgroup2,
            format!(
                "reaper's cgroup {own_path} is not visible under the cgroup2 mount {}",
                mount.mount_point.display()
            ),
        )
    })?;
    Ok(CgroupEnv {
        hybrid,
        mount,
        own_path,
        own_dir,
    })
}

/// The cgroup2 mount and whether cgroup v1 is mounted too, read from /proc/self/mountinfo once
/// per process (the first successful read is kept; a failure is read again next time). reaper
/// never leaves its mount namespace (only a sandboxed leader unshares one, after its fork), so
/// the mount point is taken to stay for reaper's life (a cgroup2 file system mounted or moved
/// later is seen by the next reaper), unlike reaper's own cgroup, which is read every time (see
/// [`discover`]). An `mcp` server read it for every call: 8 reads of a growing buffer.
fn mounts() -> Result<(Cgroup2Mount, bool), Error> {
    static MOUNTS: OnceLock<(Cgroup2Mount, bool)> = OnceLock::new();
    if let Some(m) = MOUNTS.get() {
        return Ok(m.clone());
    }
    let mi = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| {
        Error::io(Kind::NoCgroup2, "cannot read /proc/self/mountinfo", &e)
            .on("/proc/self/mountinfo")
    })?;
    let mount = mountinfo::find_cgroup2_mount(&mi).ok_or_else(|| {
        Error::new(
            Kind::NoCgroup2,
            "no cgroup2 file system is mounted (mount -t cgroup2 none /sys/fs/cgroup)",
        )
    })?;
    let found = (mount, mountinfo::has_cgroup_v1(&mi));
    // Another thread may have set it meanwhile: the same file, the same answer.
    let _ = MOUNTS.set(found.clone());
    Ok(found)
}

/// This reaper as its names carry it: its PID namespace, pid and start time, read once (none
/// of them changes for a process's life). Kept with the pid it was read for, so a forked child
/// (the guardian) that inherited the cell reads its own.
pub fn me() -> std::io::Result<Owner> {
    static ME: OnceLock<Owner> = OnceLock::new();
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    match ME.get() {
        Some(&me) if me.pid == pid => Ok(me),
        _ => {
            let (pid, start) = procfs::self_identity()?;
            let me = Owner {
                pidns: Some(procfs::pid_namespace()?),
                pid,
                start,
            };
            if me.pid == pid {
                let _ = ME.set(me);
            }
            Ok(me)
        }
    }
}

/// [`me`], for an error that says what could not be read.
fn me_or_err() -> Result<Owner, Error> {
    me().map_err(|e| {
        Error::io(
            Kind::Io,
            "cannot read reaper's identity (/proc/self/stat, /proc/self/ns/pid)",
            &e,
        )
    })
}

/// A small /proc file whole, in one read when it fits 4 KiB (`read_to_string` starts at 32
/// bytes and grows, a read each time).
fn read_small(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::with_capacity(4096);
    std::fs::File::open(path)?.read_to_string(&mut s)?;
    Ok(s)
}

/// Where run cgroups are created: a directory and its path in the hierarchy.
#[derive(Debug, Clone)]
pub struct Placement {
    pub dir: PathBuf,
    pub path: String,
}

impl CgroupEnv {
    /// The parent for run cgroups: `--cgroup-parent` (a directory under the mount, or a path
    /// relative to it), else reaper's own cgroup. Only a directory on the cgroup2 file system,
    /// under the discovered mount, is accepted: anything else (a path that leaves the mount
    /// through `..`, a cgroup v1 hierarchy, a plain directory) is the caller's mistake.
    pub fn placement(&self, cgroup_parent: Option<&Path>) -> Result<Placement, Error> {
        self.placement_checked(cgroup_parent, cgroupfs::is_cgroup2)
    }

    /// [`CgroupEnv::placement`] with the file-system check as a parameter, so the layout logic
    /// is unit-tested against a temporary directory standing in for the mount.
    fn placement_checked(
        &self,
        cgroup_parent: Option<&Path>,
        is_cgroup2: impl Fn(&Path) -> std::io::Result<bool>,
    ) -> Result<Placement, Error> {
        let Some(requested) = cgroup_parent else {
            return Ok(Placement {
                dir: self.own_dir.clone(),
                path: self.own_path.clone(),
            });
        };
        let mp = &self.mount.mount_point;
        let joined = match requested.strip_prefix(mp) {
            Ok(r) => mp.join(r),
            Err(_) => mp.join(requested.strip_prefix("/").unwrap_or(requested)),
        };
        let refuse = |why: String| {
            Error::new(
                Kind::ParentRefused,
                format!(
                    "--cgroup-parent {} is not a cgroup2 directory ({why}); give a cgroup under \
                 the cgroup2 mount {} (create it first: mkdir)",
                    requested.display(),
                    mp.display()
                ),
            )
            .on(requested)
        };
        // Resolved first (`..`, symlinks), so what is checked is what will be used, and no
        // `..` reaches the run cgroup's path or the report.
        let dir = std::fs::canonicalize(&joined).map_err(|e| {
            // An absolute path is also tried as a path in the hierarchy (`/ci`, as
            // /proc/PID/cgroup shows it); when that fails, say so about the path as given.
            if requested.is_absolute() && !requested.starts_with(mp) && requested.exists() {
                refuse(format!(
                    "it is outside the mount, and {} does not exist",
                    joined.display()
                ))
            } else {
                refuse(format!("{}: {e}", joined.display()))
            }
        })?;
        let mount_dir = std::fs::canonicalize(mp).unwrap_or_else(|_| mp.clone());
        let Ok(rel) = dir.strip_prefix(&mount_dir) else {
            return Err(refuse(format!(
                "it resolves to {}, outside the mount",
                dir.display()
            )));
        };
        if !dir.is_dir() {
            return Err(refuse(format!("{} is not a directory", dir.display())));
        }
        match is_cgroup2(&dir) {
            Ok(true) => {}
            Ok(false) => {
                return Err(refuse(format!(
                    "{} is not on the cgroup2 file system",
                    dir.display()
                )))
            }
            Err(e) => return Err(refuse(format!("statfs {}: {e}", dir.display()))),
        }
        let rel = rel.to_string_lossy();
        let root = self.mount.root.trim_end_matches('/');
        let path = if rel.is_empty() {
            format!("{root}/")
        } else {
            format!("{root}/{rel}")
        };
        Ok(Placement { dir, path })
    }
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

/// The name of the leaf reaper `owner` moves itself into (see [`ensure_leaf`]).
pub fn supervisor_name(owner: Owner) -> String {
    owner.name("supervisor")
}

static SEQ: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "reaper-";

/// Creates a fresh run cgroup under `placement`.
pub fn create_run_cgroup(placement: &Placement) -> Result<CgroupBackend, Error> {
    let me = me_or_err()?;
    let next_name = || me.name(&SEQ.fetch_add(1, Ordering::Relaxed).to_string());
    let (cg, lock) = create_owned(&placement.dir, next_name, Cgroup::create)?;
    let path = format!("{}/{}", placement.path.trim_end_matches('/'), cg.name());
    CgroupBackend::new(cg.clone(), path, lock).inspect_err(|_| {
        let _ = cg.remove();
    })
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
            Err(e) => return Err(Error::from(e).hint(RUN_DOCTOR)),
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

/// The reaper a run cgroup's name says owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The inode of its PID namespace; `None` in a name of the older form
    /// `reaper-PID-STARTTIME-…`, which did not carry it.
    pub pidns: Option<u64>,
    /// Its pid and start time, in that namespace.
    pub pid: i32,
    pub start: u64,
}

impl Owner {
    /// The name of its cgroup `tail` (a sequence number, or `supervisor`).
    fn name(&self, tail: &str) -> String {
        let Owner { pidns, pid, start } = self;
        match pidns {
            Some(ns) => format!("{PREFIX}{ns}-{pid}-{start}-{tail}"),
            None => format!("{PREFIX}{pid}-{start}-{tail}"),
        }
    }
}

/// The owner encoded in a name of ours (`reaper-PIDNS-PID-START-SEQ` or `…-supervisor`, or the
/// older form without PIDNS), or `None` for anything else.
pub fn owner_of(name: &str) -> Option<Owner> {
    let fields: Vec<&str> = name.strip_prefix(PREFIX)?.split('-').collect();
    let (pidns, rest) = match fields.as_slice() {
        [ns, pid, start, tail] => (Some(ns.parse().ok()?), [*pid, *start, *tail]),
        [pid, start, tail] => (None, [*pid, *start, *tail]),
        _ => return None,
    };
    let [pid, start, tail] = rest;
    let owner = Owner {
        pidns,
        pid: pid.parse().ok()?,
        start: start.parse().ok()?,
    };
    (tail == "supervisor" || (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit())))
        .then_some(owner)
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
        if procfs::is_alive(owner.pid, owner.start) {
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
                owner.pid
            );
            removed.push(cg.path().to_owned());
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_ours_carry_the_owner() {
        let owner = |pidns, pid, start| Some(Owner { pidns, pid, start });
        let me = Owner {
            pidns: Some(4026531836),
            pid: 123,
            start: 456,
        };
        assert_eq!(owner_of(&me.name("0")), Some(me));
        assert_eq!(owner_of(&supervisor_name(me)), Some(me));
        assert_eq!(
            owner_of("reaper-4026531836-123-456-17"),
            owner(Some(4026531836), 123, 456)
        );
        assert_eq!(supervisor_name(me), "reaper-4026531836-123-456-supervisor");
        // The older form, without the PID namespace.
        assert_eq!(owner_of("reaper-123-456-0"), owner(None, 123, 456));
        assert_eq!(owner_of("reaper-123-456-supervisor"), owner(None, 123, 456));
    }

    #[test]
    fn names_not_ours_are_left_alone() {
        for n in [
            "reaper",
            "reaper-",
            "reaper-1",
            "reaper-1-2",
            "reaper-1-2-",
            "reaper-1-2-x",
            "reaper-a-2-3",
            "user.slice",
            "myreaper-1-2-3",
            "reaper-1-2-3-4-5",
            "reaper-x-1-2-3",
            "reaper-1-2-3-",
            "reaper-kept-1-2-3",
            "reaper-kept-1-2-3-4",
            "reaper-1-2.scope",
        ] {
            assert_eq!(owner_of(n), None, "{n}");
        }
    }

    fn env_at(mount: &str, root: &str, own: &str) -> CgroupEnv {
        let mount = Cgroup2Mount {
            mount_point: mount.into(),
            root: root.into(),
        };
        let own_dir = mountinfo::cgroup_dir(&mount, own).unwrap();
        CgroupEnv {
            mount,
            hybrid: false,
            own_path: own.into(),
            own_dir,
        }
    }

    #[test]
    fn default_placement_is_own_cgroup() {
        let env = env_at("/sys/fs/cgroup/unified", "/", "/");
        let p = env.placement(None).unwrap();
        assert_eq!(
            (p.dir, p.path),
            (PathBuf::from("/sys/fs/cgroup/unified"), "/".to_owned())
        );
    }

    /// The temporary directory stands in for the mount, so the cgroup2 file-system check (a
    /// statfs(2) that a temporary directory fails) is replaced here by one that accepts it; what
    /// remains is the layout: resolution, staying under the mount, the hierarchy path.
    #[test]
    fn cgroup_parent_relative_or_absolute() {
        let tmp = std::env::temp_dir().join(format!("reaper-unit-place-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("ci/sub")).unwrap();
        let tmp = std::fs::canonicalize(&tmp).unwrap();
        let env = env_at(tmp.to_str().unwrap(), "/", "/");
        let any_fs = |_: &Path| Ok(true);
        for req in [
            PathBuf::from("ci"),
            PathBuf::from("/ci"),
            tmp.join("ci"),
            // `..` that stays inside the mount is resolved away.
            PathBuf::from("ci/sub/.."),
            tmp.join("ci/sub/../../ci"),
        ] {
            let p = env.placement_checked(Some(&req), any_fs).unwrap();
            assert_eq!(
                (p.dir.clone(), p.path.as_str()),
                (tmp.join("ci"), "/ci"),
                "{}",
                req.display()
            );
        }
        let err = env
            .placement_checked(Some(Path::new("missing")), any_fs)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--cgroup-parent missing is not a cgroup2 directory (")
                && err.contains("mkdir"),
            "{err}"
        );
        // Issue 10 item 2: `..` that leaves the mount is refused, whatever is there.
        std::fs::write(tmp.join("ci/cgroup.procs"), "").unwrap();
        let outside = tmp.join("ci/../..");
        let err = env
            .placement_checked(Some(&outside), any_fs)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{} is not a cgroup2 directory", outside.display()))
                && err.contains("outside the mount"),
            "{err}"
        );
        // …and so is a directory under it that is not on the cgroup2 file system.
        let err = env
            .placement_checked(Some(Path::new("ci")), |_| Ok(false))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ci is not a cgroup2 directory")
                && err.contains("not on the cgroup2 file system"),
            "{err}"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Two reapers in different PID namespaces can share a pid and start time (two PID 1s
    /// started in the same clock tick), and so the names of their cgroups: one made
    /// `reaper-1-2-1` first. The other must move on to the next name, never fail the run nor
    /// take the existing directory. (`pid1_fallback_line_names_the_pid_namespace` fell back to
    /// the subreaper backend when two such tests started in one tick.)
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

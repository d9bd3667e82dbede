//! Choosing and creating a run's containment: find the cgroup2 mount and reaper's own cgroup,
//! pick the parent for run cgroups, clear stale ones, create the run's cgroup — or explain why
//! not, so `auto` can fall back and `doctor` can tell the user.
//!
//! Run cgroups are named `reaper-PID-STARTTIME-SEQ` after the reaper process that owns them, so
//! a later reaper can prove the owner is gone (pid and start time) before removing one, and
//! never touches anything else.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::mountinfo::{self, Cgroup2Mount};
use reaper_platform::linux::{procfs, signal};
use tokio::time::Instant;

use super::cgroup::CgroupBackend;

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
pub fn discover() -> Result<CgroupEnv, String> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mount = mountinfo::find_cgroup2_mount(&mi).ok_or_else(|| {
        "no cgroup2 file system is mounted (mount -t cgroup2 none /sys/fs/cgroup)".to_owned()
    })?;
    let pc = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let own_path = mountinfo::unified_cgroup_path(&pc)
        .ok_or_else(|| "/proc/self/cgroup has no cgroup v2 (0::) line".to_owned())?;
    let own_dir = mountinfo::cgroup_dir(&mount, &own_path).ok_or_else(|| {
        format!(
            "reaper's cgroup {own_path} is not visible under the cgroup2 mount {}",
            mount.mount_point.display()
        )
    })?;
    Ok(CgroupEnv {
        hybrid: mountinfo::has_cgroup_v1(&mi),
        mount,
        own_path,
        own_dir,
    })
}

/// Where run cgroups are created: a directory and its path in the hierarchy.
#[derive(Debug, Clone)]
pub struct Placement {
    pub dir: PathBuf,
    pub path: String,
}

impl CgroupEnv {
    /// The parent for run cgroups: `--cgroup-parent` (a directory under the mount, or a path
    /// relative to it), else reaper's own cgroup.
    pub fn placement(&self, cgroup_parent: Option<&Path>) -> Result<Placement, String> {
        let Some(requested) = cgroup_parent else {
            return Ok(Placement {
                dir: self.own_dir.clone(),
                path: self.own_path.clone(),
            });
        };
        let mp = &self.mount.mount_point;
        let rel = match requested.strip_prefix(mp) {
            Ok(r) => r.to_owned(),
            Err(_) => requested.strip_prefix("/").unwrap_or(requested).to_owned(),
        };
        let dir = mp.join(&rel);
        if !dir.join("cgroup.procs").exists() {
            return Err(format!(
                "cgroup parent {} is not a cgroup under the cgroup2 mount {}; create it first (mkdir)",
                dir.display(),
                mp.display()
            ));
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

/// If the parent has controllers enabled for its children, it may not also hold processes (the
/// no-internal-processes rule), and reaper itself lives there: move reaper into a leaf of its own
/// first. The root cgroup is exempt from the rule.
pub fn ensure_leaf(env: &CgroupEnv, placement: &Placement) -> Result<Option<Cgroup>, String> {
    if env.own_path == "/" || placement.dir != env.own_dir {
        return Ok(None);
    }
    let parent = Cgroup::at(&placement.dir);
    if parent
        .subtree_control()
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        return Ok(None);
    }
    let (pid, start) =
        procfs::self_identity().map_err(|e| format!("cannot read /proc/self/stat: {e}"))?;
    let leaf =
        Cgroup::create(&placement.dir, &supervisor_name(pid, start)).map_err(|e| e.to_string())?;
    // The owner lock, held for reaper's whole life, tells a stale sweep in another PID namespace
    // (where reaper's pid means nothing) that this leaf's owner is alive; otherwise that sweep
    // would cgroup.kill the leaf, and reaper in it. reaper cannot remove the cgroup it lives in:
    // its guardian does once reaper has exited, or else the next reaper's stale sweep.
    static LEAF_LOCK: std::sync::OnceLock<std::os::fd::OwnedFd> = std::sync::OnceLock::new();
    let lock = leaf.lock_owner().map_err(|e| e.to_string())?;
    let _ = LEAF_LOCK.set(lock);
    let me = rustix::process::getpid();
    leaf.add_process(me).map_err(|e| e.to_string())?;
    Ok(Some(leaf))
}

/// The name of the leaf reaper `(pid, start)` moves itself into (see [`ensure_leaf`]).
pub fn supervisor_name(pid: i32, start: u64) -> String {
    format!("{PREFIX}{pid}-{start}-supervisor")
}

static SEQ: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "reaper-";

/// Creates a fresh run cgroup under `placement`.
pub fn create_run_cgroup(placement: &Placement) -> Result<CgroupBackend, String> {
    let (pid, start) =
        procfs::self_identity().map_err(|e| format!("cannot read /proc/self/stat: {e}"))?;
    let name = format!(
        "{PREFIX}{pid}-{start}-{}",
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let cg =
        Cgroup::create(&placement.dir, &name).map_err(|e| format!("{e}; run `reaper doctor`"))?;
    let path = format!("{}/{name}", placement.path.trim_end_matches('/'));
    match CgroupBackend::new(cg.clone(), path) {
        Ok(b) => Ok(b),
        Err(e) => {
            let _ = cg.remove();
            Err(e)
        }
    }
}

/// The owner `(pid, starttime)` encoded in a name of ours, or `None` for anything else.
pub fn owner_of(name: &str) -> Option<(i32, u64)> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.splitn(3, '-');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    let tail = parts.next()?;
    (tail == "supervisor" || (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit())))
        .then_some((pid, start))
}

/// Removes run cgroups under `dir` whose owning reaper is provably gone: kills what is left in
/// them, waits (until `deadline`) for them to empty, removes them. Returns the paths removed.
pub async fn sweep_stale(dir: &Path, deadline: Instant) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(names) = Cgroup::at(dir).children() else {
        return removed;
    };
    for name in names {
        let Some((pid, start)) = owner_of(&name) else {
            continue;
        };
        let cg = Cgroup::at(dir.join(&name));
        // Gone means both: no process with that pid and start time here, and nobody holding
        // the owner lock (a reaper in another PID namespace shows neither pid nor start time).
        if procfs::is_alive(pid, start) || cg.owner_lock_held() {
            continue;
        }
        if let Err(e) = remove_tree(&cg, deadline).await {
            tracing::warn!("stale cgroup {} left in place: {e}", cg.path().display());
        } else {
            tracing::info!(
                "removed stale cgroup {} (its reaper, pid {pid}, is gone)",
                cg.path().display()
            );
            removed.push(cg.path().to_owned());
        }
    }
    removed
}

/// Kills everything in `cg` and below, waits for it to empty, removes it and its children.
pub async fn remove_tree(cg: &Cgroup, deadline: Instant) -> Result<(), String> {
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
            Err(e) => return Err(e.to_string()),
            Ok(()) => {}
        }
        loop {
            match cg.populated() {
                Ok(false) => break,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.to_string()),
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
                return Err(format!(
                    "{} still populated after cgroup.kill",
                    cg.path().display()
                ));
            }
        }
        // Children first: rmdir(2) refuses a cgroup with children (EBUSY), as it refuses one
        // that a late joiner has just populated again.
        let mut busy = None;
        for c in cg.subtree().iter().rev() {
            match c.remove() {
                Ok(()) => {}
                Err(e) if e.is_busy() => busy = Some(e),
                Err(e) => return Err(e.to_string()),
            }
        }
        let Some(e) = busy else { return Ok(()) };
        if Instant::now() >= deadline {
            return Err(e.to_string());
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
        assert_eq!(owner_of("reaper-123-456-0"), Some((123, 456)));
        assert_eq!(owner_of("reaper-123-456-17"), Some((123, 456)));
        assert_eq!(owner_of("reaper-123-456-supervisor"), Some((123, 456)));
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
            "reaper-1-2-3-4",
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

    #[test]
    fn cgroup_parent_relative_or_absolute() {
        let tmp = std::env::temp_dir().join(format!("reaper-unit-place-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("ci")).unwrap();
        std::fs::write(tmp.join("ci/cgroup.procs"), "").unwrap();
        let env = env_at(tmp.to_str().unwrap(), "/", "/");
        for req in [PathBuf::from("ci"), PathBuf::from("/ci"), tmp.join("ci")] {
            let p = env.placement(Some(&req)).unwrap();
            assert_eq!(
                (p.dir.clone(), p.path.as_str()),
                (tmp.join("ci"), "/ci"),
                "{}",
                req.display()
            );
        }
        let err = env.placement(Some(Path::new("missing"))).unwrap_err();
        assert!(
            err.contains("is not a cgroup") && err.contains("mkdir"),
            "{err}"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}

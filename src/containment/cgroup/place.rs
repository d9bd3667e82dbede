//! Where run cgroups go, and whose they are: the cgroup2 mount and reaper's own cgroup
//! ([`discover`]), the parent for run cgroups ([`CgroupEnv::placement`]), and the names that
//! say which reaper owns a cgroup ([`Owner`], [`owner_of`]). Reads only; creates nothing.
//!
//! Run cgroups are named `reaper-PIDNS-PID-STARTTIME-SEQ` after the reaper process that owns
//! them: the inode of its PID namespace, its pid and start time there. A later reaper of the
//! same namespace proves the owner gone by pid and start time before removing one; the owner
//! lock (an exclusive `flock` on the directory) speaks only for an owner it cannot see. Nothing
//! else is ever touched.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use reaper_platform::linux::cgroupfs;
use reaper_platform::linux::mountinfo::{self, Cgroup2Mount};

use crate::error::{ContainError as Error, ContainErrorKind as Kind};
use crate::naming::{me, supervisor_name, Owner};

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

/// Where the cgroup2 file system is mounted.
pub fn mount_point() -> Result<PathBuf, Error> {
    Ok(mounts()?.0.mount_point)
}

/// [`me`], for an error that says what could not be read.
pub fn me_or_err() -> Result<Owner, Error> {
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
                    "{} is not a cgroup2 directory ({why}); give a cgroup under the cgroup2 \
                     mount {} (create it first: mkdir)",
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

#[cfg(test)]
mod tests {
    use super::*;

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
            err.starts_with("missing is not a cgroup2 directory (") && err.contains("mkdir"),
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
}

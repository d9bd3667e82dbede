//! One cgroup v2 directory: create, join, list, kill, watch for empty, remove.
//!
//! The cgroup's path is a parameter (no assumed `/sys/fs/cgroup`), so layout logic is testable
//! against a temporary directory; the integration tests are what touch the real mount.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::process::Pid;
use tokio::io::unix::AsyncFd;

use super::cgroupfs::{self, CgroupFsError, Op};

/// A cgroup v2 directory this process created or was handed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// A handle to an existing cgroup directory (nothing is checked).
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// `mkdir` a new child cgroup named `name` under `parent`. Fails with EEXIST if it exists:
    /// a run never shares a cgroup.
    pub fn create(parent: &Path, name: &str) -> cgroupfs::Result<Self> {
        let path = parent.join(name);
        cgroupfs::mkdir(&path)?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn name(&self) -> &str {
        self.path.file_name().and_then(|n| n.to_str()).unwrap_or("")
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// `cgroup.procs` opened for writing, so a child can join with one allocation-free
    /// `write("0")` between fork and exec (cgroup-v2.rst: writing 0 migrates the writer).
    pub fn open_procs_for_join(&self) -> cgroupfs::Result<OwnedFd> {
        cgroupfs::open_for_write(&self.file("cgroup.procs"))
    }

    /// Move an existing process into this cgroup.
    pub fn add_process(&self, pid: Pid) -> cgroupfs::Result<()> {
        cgroupfs::write(
            &self.file("cgroup.procs"),
            &pid.as_raw_nonzero().to_string(),
        )
    }

    /// The processes in this cgroup (not its descendants). Exited processes have already left it:
    /// the kernel unlinks a task from its cgroup in `do_exit`, so zombies are not listed.
    pub fn procs(&self) -> cgroupfs::Result<Vec<Pid>> {
        Ok(parse_pids(&cgroupfs::read(&self.file("cgroup.procs"))?))
    }

    /// `populated` from `cgroup.events`: whether any live process is in this cgroup or below.
    pub fn populated(&self) -> cgroupfs::Result<bool> {
        let path = self.file("cgroup.events");
        let text = cgroupfs::read(&path)?;
        parse_events_flag(&text, "populated").ok_or_else(|| {
            CgroupFsError::new(
                Op::Read,
                &path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, "no `populated` line"),
            )
        })
    }

    /// Whether the kernel has `cgroup.kill` (Linux 5.14+).
    pub fn has_kill(&self) -> bool {
        self.file("cgroup.kill").exists()
    }

    /// SIGKILL every process in this cgroup and its descendants, atomically against fork: a
    /// process forked during the kill is killed too (cgroup-v2.rst, `cgroup.kill`).
    pub fn kill(&self) -> cgroupfs::Result<()> {
        cgroupfs::write(&self.file("cgroup.kill"), "1")
    }

    /// Controllers enabled for this cgroup's children.
    pub fn subtree_control(&self) -> cgroupfs::Result<Vec<String>> {
        Ok(cgroupfs::read(&self.file("cgroup.subtree_control"))?
            .split_whitespace()
            .map(str::to_owned)
            .collect())
    }

    /// Controllers available in this cgroup.
    pub fn controllers(&self) -> cgroupfs::Result<Vec<String>> {
        Ok(cgroupfs::read(&self.file("cgroup.controllers"))?
            .split_whitespace()
            .map(str::to_owned)
            .collect())
    }

    /// Child cgroups (directory names).
    pub fn children(&self) -> cgroupfs::Result<Vec<String>> {
        let rd = std::fs::read_dir(&self.path)
            .map_err(|e| CgroupFsError::new(Op::Read, &self.path, e))?;
        Ok(rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
    }

    /// The processes in this cgroup and every cgroup below it, however deep (the walk is
    /// relative to directory fds: see [`cgroupfs::walk_subtree`]). Best effort: a cgroup that
    /// cannot be read (removed meanwhile) contributes nobody.
    pub fn subtree_procs(&self) -> Vec<Pid> {
        let mut pids = Vec::new();
        let _ = cgroupfs::walk_subtree(
            &self.path,
            false,
            Some(&mut |procs: &str| pids.extend(parse_pids(procs))),
        );
        pids
    }

    /// `rmdir` every cgroup below this one, children first, then this one, however deep the
    /// subtree (see [`cgroupfs::walk_subtree`]). Already gone counts as removed. EBUSY means a
    /// cgroup is still populated (or got a new child meanwhile): the caller may retry.
    pub fn remove_subtree(&self) -> cgroupfs::Result<()> {
        // The common case, a cgroup without children, takes one rmdir(2). One with children
        // fails with EBUSY (cgroupfs) or ENOTEMPTY (a plain directory standing in for one).
        match self.remove() {
            Err(e)
                if e.is_busy()
                    || e.source.raw_os_error()
                        == Some(rustix::io::Errno::NOTEMPTY.raw_os_error()) => {}
            r => return r,
        }
        let below = cgroupfs::walk_subtree(&self.path, true, None);
        // Try this one even if something below failed: the error to report is the first one.
        let this = self.remove();
        below.and(this)
    }

    /// Takes an exclusive `flock` on the cgroup's directory and returns the fd that holds it:
    /// the lock lives exactly as long as the owning process (the kernel drops it when the fd
    /// closes, however the process dies), and it is visible across PID namespaces, where a
    /// pid is not.
    ///
    /// `Ok(None)` when the directory is not there to be owned: someone else holds the lock, or
    /// the directory was removed (also between our open and our lock — a lock on a removed
    /// directory guards nothing, so that is checked after locking).
    pub fn try_lock_owner(&self) -> cgroupfs::Result<Option<OwnedFd>> {
        use rustix::fs::{flock, FlockOperation, Mode, OFlags};
        let err = |e: rustix::io::Errno| CgroupFsError::new(Op::Open, &self.path, e.into());
        let fd = match rustix::fs::open(
            &self.path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(err(e)),
        };
        match flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
            Err(e) => return Err(err(e)),
        }
        let locked = rustix::fs::fstat(&fd).map_err(err)?;
        match rustix::fs::stat(&self.path) {
            Ok(now) if (now.st_dev, now.st_ino) == (locked.st_dev, locked.st_ino) => Ok(Some(fd)),
            Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Freezes (`true`) or thaws the cgroup and its descendants (`cgroup.freeze`): a frozen
    /// process cannot fork; moving it to an unfrozen cgroup thaws it.
    pub fn freeze(&self, frozen: bool) -> cgroupfs::Result<()> {
        cgroupfs::write(&self.file("cgroup.freeze"), if frozen { "1" } else { "0" })
    }

    /// `rmdir` the cgroup. Already gone counts as removed. EBUSY means it is still populated
    /// or has children.
    pub fn remove(&self) -> cgroupfs::Result<()> {
        match cgroupfs::rmdir(&self.path) {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        }
    }

    /// A watch on `cgroup.events`: the kernel wakes pollers of the file with POLLPRI whenever
    /// `populated` or `frozen` changes (cgroup-v2.rst, "cgroup.events"; kernfs_poll). Polling
    /// the file itself rather than an inotify instance: closing an inotify fd waits for an SRCU
    /// grace period (~10 ms here), closing this one does not.
    pub fn watch_events(&self) -> cgroupfs::Result<EventsWatch> {
        use rustix::fs::{Mode, OFlags};
        let path = self.file("cgroup.events");
        let err = |e: std::io::Error| CgroupFsError::new(Op::Watch, &path, e);
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err(e.into()))?;
        // Reading syncs this open file with the current state, so only later changes wake it.
        let mut buf = [0u8; 256];
        rustix::io::pread(&fd, &mut buf, 0).map_err(|e| err(e.into()))?;
        let fd = crate::async_fd(fd, tokio::io::Interest::PRIORITY).map_err(err)?;
        Ok(EventsWatch { fd })
    }
}

/// Wakes when `cgroup.events` changes. Create the watch, *then* check the state you care about,
/// then await [`EventsWatch::changed`]: a change between the check and the await still wakes it.
pub struct EventsWatch {
    fd: AsyncFd<OwnedFd>,
}

impl EventsWatch {
    /// Waits for the next change of `cgroup.events`.
    pub async fn changed(&mut self) -> std::io::Result<()> {
        let mut guard = self.fd.ready(tokio::io::Interest::PRIORITY).await?;
        // Re-read to re-arm: kernfs reports POLLPRI until this open file has seen the change.
        let mut buf = [0u8; 256];
        let _ = rustix::io::pread(guard.get_inner().as_fd(), &mut buf, 0);
        guard.clear_ready();
        Ok(())
    }
}

fn parse_pids(text: &str) -> Vec<Pid> {
    text.lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .filter_map(Pid::from_raw)
        .collect()
}

/// A `KEY 0|1` line of `cgroup.events`.
pub fn parse_events_flag(text: &str, key: &str) -> Option<bool> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim() == "1")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_flags() {
        let t = "populated 1\nfrozen 0\n";
        assert_eq!(parse_events_flag(t, "populated"), Some(true));
        assert_eq!(parse_events_flag(t, "frozen"), Some(false));
        assert_eq!(parse_events_flag(t, "other"), None);
    }

    #[test]
    fn pids_parse_and_skip_garbage() {
        let pids: Vec<i32> = parse_pids("12\n345\n\nx\n0\n")
            .iter()
            .map(|p| p.as_raw_nonzero().get())
            .collect();
        assert_eq!(pids, vec![12, 345]);
    }

    #[test]
    fn layout_against_a_temporary_directory() {
        let dir = std::env::temp_dir().join(format!("reaper-unit-cg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cg = Cgroup::create(&dir, "run-1").unwrap();
        assert_eq!(cg.name(), "run-1");
        assert!(
            Cgroup::create(&dir, "run-1").is_err(),
            "a run never reuses a cgroup"
        );
        std::fs::write(cg.path().join("cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
        std::fs::write(cg.path().join("cgroup.procs"), "7\n9\n").unwrap();
        assert!(!cg.populated().unwrap());
        assert_eq!(cg.procs().unwrap().len(), 2);
        let err = cg.kill().unwrap_err().to_string();
        assert!(
            err.starts_with("failed to write \"1\" to ") && err.contains("cgroup.kill"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            Cgroup::at(dir.join("run-1")).remove().is_ok(),
            "already gone counts as removed"
        );
    }

    /// Issue 10 item 4: a subtree nested past PATH_MAX (25 levels of 200-byte names) is read and
    /// removed relative to directory fds; an error deep in it names a shortened path.
    #[test]
    fn a_subtree_deeper_than_path_max_is_walked_and_removed() {
        use rustix::fs::{openat, unlinkat, AtFlags, Mode, OFlags};
        let root = std::env::temp_dir().join(format!("reaper-unit-deep-{}", std::process::id()));
        std::fs::create_dir(&root).unwrap();
        let name = "d".repeat(200);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut dir = rustix::fs::open(&root, flags, Mode::empty()).unwrap();
        for _ in 0..25 {
            rustix::fs::mkdirat(&dir, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
            dir = openat(&dir, name.as_str(), flags, Mode::empty()).unwrap();
        }
        // The deepest level holds a member (and, being a plain directory, is not removable
        // while that file is in it).
        let procs = openat(
            &dir,
            "cgroup.procs",
            OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        rustix::io::write(&procs, b"4242\n").unwrap();
        drop(procs);
        let cg = Cgroup::at(&root);
        let pids: Vec<i32> = cg
            .subtree_procs()
            .iter()
            .map(|p| p.as_raw_nonzero().get())
            .collect();
        assert_eq!(pids, vec![4242], "the member 25 levels down is found");
        let err = cg.remove_subtree().unwrap_err().to_string();
        let shown = format!("{}/…(24 levels)…/{name}", root.display());
        assert!(err.starts_with(&format!("cannot remove {shown}:")), "{err}");
        unlinkat(&dir, "cgroup.procs", AtFlags::empty()).unwrap();
        cg.remove_subtree().unwrap();
        assert!(!root.exists());
        assert!(
            cg.remove_subtree().is_ok(),
            "already gone counts as removed"
        );
    }

    #[test]
    fn the_owner_lock_is_exclusive_and_guards_only_a_live_directory() {
        let dir = std::env::temp_dir().join(format!("reaper-unit-lock-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let cg = Cgroup::at(&dir);
        let held = cg
            .try_lock_owner()
            .unwrap()
            .expect("a fresh directory can be locked");
        assert!(
            cg.try_lock_owner().unwrap().is_none(),
            "the lock is exclusive"
        );
        drop(held);
        let again = cg.try_lock_owner().unwrap();
        assert!(again.is_some(), "released when its fd closes");
        drop(again);
        std::fs::remove_dir(&dir).unwrap();
        assert!(
            cg.try_lock_owner().unwrap().is_none(),
            "a removed directory"
        );
    }
}

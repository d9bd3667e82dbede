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

    /// This cgroup and every cgroup below it, parents before children (so removing in reverse
    /// order works: rmdir(2) refuses a cgroup that has children).
    pub fn subtree(&self) -> Vec<Cgroup> {
        let mut all = vec![self.clone()];
        let mut i = 0;
        while i < all.len() {
            let base = all[i].path.clone();
            let children = all[i].children().unwrap_or_default();
            all.extend(children.into_iter().map(|c| Cgroup::at(base.join(c))));
            i += 1;
        }
        all
    }

    /// Takes an exclusive `flock` on the cgroup's directory and returns the fd that holds it:
    /// the lock lives exactly as long as the owning process (the kernel drops it when the fd
    /// closes, however the process dies), and it is visible across PID namespaces, where a
    /// pid is not.
    pub fn lock_owner(&self) -> cgroupfs::Result<OwnedFd> {
        use rustix::fs::{flock, FlockOperation, Mode, OFlags};
        let err = |e: rustix::io::Errno| CgroupFsError::new(Op::Open, &self.path, e.into());
        let fd = rustix::fs::open(
            &self.path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(err)?;
        flock(&fd, FlockOperation::NonBlockingLockExclusive).map_err(err)?;
        Ok(fd)
    }

    /// Whether some live process holds [`Cgroup::lock_owner`]'s lock.
    pub fn owner_lock_held(&self) -> bool {
        use rustix::fs::{flock, FlockOperation, Mode, OFlags};
        let Ok(fd) = rustix::fs::open(
            &self.path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return false;
        };
        // Acquired means nobody holds it; closing `fd` releases it again.
        flock(&fd, FlockOperation::NonBlockingLockExclusive) == Err(rustix::io::Errno::WOULDBLOCK)
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
}

//! All cgroupfs I/O goes through here, so every error names the path and the data:
//! `failed to write "1" to /sys/fs/cgroup/…/cgroup.kill: No such device`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A failed cgroupfs operation, with everything a user needs to see what went wrong.
#[derive(Debug)]
pub struct CgroupFsError {
    pub op: Op,
    pub path: PathBuf,
    pub source: io::Error,
}

#[derive(Debug, Clone)]
pub enum Op {
    Read,
    Write(String),
    Open,
    Mkdir,
    Rmdir,
    Watch,
}

impl fmt::Display for CgroupFsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        match &self.op {
            Op::Read => write!(f, "failed to read {p}: {}", self.source),
            Op::Write(data) => write!(f, "failed to write {data:?} to {p}: {}", self.source),
            Op::Open => write!(f, "failed to open {p}: {}", self.source),
            Op::Mkdir => write!(f, "cannot create {p}: {}", self.source),
            Op::Rmdir => write!(f, "cannot remove {p}: {}", self.source),
            Op::Watch => write!(f, "cannot watch {p} for changes: {}", self.source),
        }
    }
}

impl std::error::Error for CgroupFsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl CgroupFsError {
    pub fn new(op: Op, path: &Path, source: io::Error) -> Self {
        Self {
            op,
            path: path.to_owned(),
            source,
        }
    }
    /// rmdir(2) of a cgroup that still has processes or children (EBUSY).
    pub fn is_busy(&self) -> bool {
        self.source.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error())
    }

    /// The cgroup (or file) no longer exists.
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == io::ErrorKind::NotFound
    }
}

pub type Result<T> = std::result::Result<T, CgroupFsError>;

pub fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| CgroupFsError::new(Op::Read, path, e))
}

/// One `write(2)` of `data`: cgroupfs acts on each write as a whole.
pub fn write(path: &Path, data: &str) -> Result<()> {
    use std::io::Write;
    let err = |e| CgroupFsError::new(Op::Write(data.to_owned()), path, e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(err)?;
    f.write_all(data.as_bytes())
        .map_err(|e| CgroupFsError::new(Op::Write(data.to_owned()), path, e))
}

pub fn mkdir(path: &Path) -> Result<()> {
    std::fs::create_dir(path).map_err(|e| CgroupFsError::new(Op::Mkdir, path, e))
}

pub fn rmdir(path: &Path) -> Result<()> {
    std::fs::remove_dir(path).map_err(|e| CgroupFsError::new(Op::Rmdir, path, e))
}

/// Opens a cgroupfs file write-only and close-on-exec, for writing later without allocating
/// (in a `pre_exec` hook).
pub fn open_for_write(path: &Path) -> Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| CgroupFsError::new(Op::Open, path, e.into()))
}

//! All cgroupfs I/O goes through here, so every error names the path and the data:
//! `failed to write "1" to /sys/fs/cgroup/…/cgroup.kill: No such device`.

use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

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

    /// The cgroup (or file) no longer exists. ENODEV too: a file of a cgroup that was removed
    /// between its open and the read (kernfs), as systemd does with a scope's whole tree when
    /// the scope ends.
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == io::ErrorKind::NotFound
            || self.source.raw_os_error() == Some(Errno::NODEV.raw_os_error())
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

/// `CGROUP2_SUPER_MAGIC` (linux/magic.h): what statfs(2) reports for a cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: rustix::fs::FsWord = 0x6367_7270;

/// Whether `path` is on a cgroup v2 file system (statfs(2)). A cgroup v1 hierarchy or a plain
/// directory holding a `cgroup.procs` file is not.
pub fn is_cgroup2(path: &Path) -> io::Result<bool> {
    Ok(rustix::fs::statfs(path)?.f_type as rustix::fs::FsWord == CGROUP2_SUPER_MAGIC)
}

/// Reads the file `name` in the directory `dir` (a path for errors is the caller's business).
fn read_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<String> {
    use std::io::Read;
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut text = String::new();
    std::fs::File::from(fd).read_to_string(&mut text)?;
    Ok(text)
}

/// Every cgroup of the subtree at `root` (`root` included), parents before children: with
/// `procs`, each one's `cgroup.procs` is read and given to it (a cgroup that vanished meanwhile
/// gives nothing). With `remove`, each cgroup below `root` is removed (`unlinkat(AT_REMOVEDIR)`)
/// once everything below it is: children first, as rmdir(2) refuses a cgroup with children.
/// `root` itself is left to the caller.
///
/// A contained process can nest sub-cgroups past PATH_MAX, where every absolute path fails with
/// ENAMETOOLONG. So the walk moves one name at a time — `openat(dir, NAME)` down and
/// `openat(dir, "..")` up — and holds one directory fd, never one per level (a hostile depth
/// cannot exhaust the fd table). Each step up is checked against the identity (device, inode)
/// recorded on the way down, so the walk never leaves the subtree (cgroup v2 cannot move a
/// directory anyway: rename(2) across parents is refused).
///
/// Errors name the cgroup by its path under `root`, shortened to its last name when the full
/// path would be too long to use. Removal errors do not stop the walk: the rest is still removed,
/// and the first error is returned (one that is not EBUSY, if any). A root that does not exist
/// is an empty subtree.
pub fn walk_subtree(
    root: &Path,
    remove: bool,
    mut procs: Option<&mut dyn FnMut(&str)>,
) -> Result<()> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur = match rustix::fs::open(root, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(CgroupFsError::new(Op::Read, root, e.into())),
    };
    let mut enter = |dir: &OwnedFd| {
        if let Some(f) = procs.as_mut() {
            if let Ok(text) = read_at(dir.as_fd(), c"cgroup.procs") {
                f(&text);
            }
        }
    };
    enter(&cur);
    let mut stack = vec![Level::of(&cur, c"").map_err(|e| CgroupFsError::new(Op::Read, root, e))?];
    let mut failed: Option<CgroupFsError> = None;
    loop {
        let top = stack.len() - 1;
        if let Some(child) = stack[top].pending.pop() {
            let fd = match rustix::fs::openat(&cur, child.as_c_str(), dir_flags, Mode::empty()) {
                Ok(fd) => fd,
                // Removed meanwhile, or not a directory after all: nothing below it.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
                Err(e) => {
                    let path = describe(root, &stack, Some(&child));
                    keep_first(&mut failed, CgroupFsError::new(Op::Read, &path, e.into()));
                    continue;
                }
            };
            let level = match Level::of(&fd, &child) {
                Ok(l) => l,
                Err(e) => {
                    let path = describe(root, &stack, Some(&child));
                    keep_first(&mut failed, CgroupFsError::new(Op::Read, &path, e));
                    continue;
                }
            };
            cur = fd;
            enter(&cur);
            stack.push(level);
            continue;
        }
        // Everything below the top is done: step up, and remove it from its parent.
        if top == 0 {
            break;
        }
        // (Paths for errors are built only on error: each costs the depth.)
        let up = |e: io::Error| CgroupFsError::new(Op::Read, &describe(root, &stack, None), e);
        let parent =
            rustix::fs::openat(&cur, c"..", dir_flags, Mode::empty()).map_err(|e| up(e.into()))?;
        if identity(&parent).map_err(up)? != stack[top - 1].id {
            return Err(up(io::Error::other(
                "its parent changed while the subtree was walked",
            )));
        }
        let level = stack.pop().unwrap_or_default();
        cur = parent;
        if remove {
            match rustix::fs::unlinkat(&cur, level.name.as_c_str(), AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => {
                    let path = describe(root, &stack, Some(&level.name));
                    keep_first(&mut failed, CgroupFsError::new(Op::Rmdir, &path, e.into()));
                }
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// One directory on the way down: its name in its parent, its identity, and the child
/// directories still to visit.
#[derive(Default)]
struct Level {
    name: CString,
    id: (u64, u64),
    pending: Vec<CString>,
}

impl Level {
    fn of(dir: &OwnedFd, name: &CStr) -> io::Result<Level> {
        Ok(Level {
            name: name.to_owned(),
            id: identity(dir)?,
            pending: child_dirs(dir)?,
        })
    }
}

fn identity(dir: &OwnedFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(dir)?;
    Ok((st.st_dev as u64, st.st_ino as u64))
}

/// The names of the directories in `dir` (the cgroup's children).
fn child_dirs(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            // d_type is optional (readdir(3)); ask the inode.
            FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
            _ => false,
        };
        if is_dir {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// The path of the walk's current directory (plus `child`), for an error message: in full
/// while it fits in PATH_MAX, else `ROOT/…(N levels)…/NAME`.
fn describe(root: &Path, stack: &[Level], child: Option<&CStr>) -> PathBuf {
    let names: Vec<&OsStr> = stack
        .iter()
        .skip(1)
        .map(|l| l.name.as_c_str())
        .chain(child)
        .map(|n| OsStr::from_bytes(n.to_bytes()))
        .collect();
    let full: PathBuf = std::iter::once(root.as_os_str())
        .chain(names.iter().copied())
        .collect();
    if full.as_os_str().len() < PATH_MAX {
        return full;
    }
    let mut short = root.join(format!("…({} levels)…", names.len().saturating_sub(1)));
    short.push(names.last().copied().unwrap_or_default());
    short
}

/// Linux's PATH_MAX, the longest path a system call accepts.
const PATH_MAX: usize = 4096;

/// Keeps the first error, preferring one that is not EBUSY (a cgroup still busy is retried by
/// callers; anything else is worth reporting first).
fn keep_first(slot: &mut Option<CgroupFsError>, e: CgroupFsError) {
    if slot.as_ref().is_none_or(|s| s.is_busy() && !e.is_busy()) {
        *slot = Some(e);
    }
}

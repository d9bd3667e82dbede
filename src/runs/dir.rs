//! Where run records live: one directory per user, on the machine's runtime file system, that
//! only that user (and root) can read or write.
//!
//! | user    | directory                                                              |
//! |---------|------------------------------------------------------------------------|
//! | root    | `/run/reaper`                                                          |
//! | uid N   | `/run/user/N/reaper` when `/run/user/N` is the user's (logind makes it), |
//! |         | else `/tmp/reaper-N`                                                   |
//!
//! `$REAPER_RUNTIME_DIR` replaces both, for writers and readers alike. Chosen by uid, not by
//! `$XDG_RUNTIME_DIR`, so that `reaper ps` finds the runs of the same user whatever
//! environment each reaper had. A directory is used only if it is a real directory (not a
//! symbolic link) owned by the user with no access for anyone else: a directory another user
//! made first (`/tmp/reaper-N` squatted) is refused, and the run goes unrecorded.
//!
//! Every process of a run can write its user's directory, so nothing in it is trusted as a
//! path: a [`Dir`] is the directory opened once, checked through its descriptor, and every
//! file in it is created, replaced, read and removed relative to that descriptor, never
//! following a link, with temporary names nobody can guess, reading at most [`MAX_FILE`]
//! bytes of a regular file (a fifo, a device or a huge sparse file is refused unread).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// The variable that names the records directory instead of the defaults above.
pub const RUNTIME_DIR_ENV: &str = "REAPER_RUNTIME_DIR";

/// The most of a file in a records directory that is ever read: a record is well under it.
pub(crate) const MAX_FILE: usize = 64 * 1024;

/// The most names read from a records directory.
const MAX_NAMES: usize = 65536;

/// The directories a process of `uid` writes its records to, in order of preference.
fn candidates(uid: u32) -> Vec<PathBuf> {
    if let Some(d) = std::env::var_os(RUNTIME_DIR_ENV).filter(|d| !d.is_empty()) {
        return vec![PathBuf::from(d)];
    }
    if uid == 0 {
        return vec![PathBuf::from("/run/reaper"), PathBuf::from("/tmp/reaper-0")];
    }
    vec![
        PathBuf::from(format!("/run/user/{uid}/reaper")),
        PathBuf::from(format!("/tmp/reaper-{uid}")),
    ]
}

/// Every directory this process's runs may be recorded in, `$REAPER_RUNTIME_DIR` and the
/// defaults alike: what a sandbox hides.
pub(crate) fn all_candidates() -> Vec<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let mut all = candidates(uid);
    if std::env::var_os(RUNTIME_DIR_ENV).is_some_and(|d| !d.is_empty()) {
        let unset: Vec<PathBuf> = if uid == 0 {
            vec!["/run/reaper".into(), "/tmp/reaper-0".into()]
        } else {
            vec![
                format!("/run/user/{uid}/reaper").into(),
                format!("/tmp/reaper-{uid}").into(),
            ]
        };
        all.extend(unset);
    }
    all
}

/// A records directory, opened and checked: a directory (not a link) owned by `uid`, closed to
/// everyone else. Everything in it is reached through this descriptor.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    uid: u32,
    gid: u32,
}

impl Dir {
    /// `path`, if it may hold `uid`'s records.
    pub(crate) fn open(path: &Path, uid: u32) -> Option<Dir> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        let ok = FileType::from_raw_mode(st.st_mode) == FileType::Directory
            && st.st_uid == uid
            && st.st_mode & 0o077 == 0;
        ok.then(|| Dir {
            fd,
            path: path.to_owned(),
            uid,
            gid: st.st_gid,
        })
    }

    /// Another descriptor of the same directory.
    pub(crate) fn try_clone(&self) -> std::io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
            uid: self.uid,
            gid: self.gid,
        })
    }

    /// The path it was opened at (for messages, and for a reader to open it again).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The user whose records it holds.
    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    /// Its group: one its user is in (only they could have given it that group).
    pub(crate) fn gid(&self) -> u32 {
        self.gid
    }

    /// The names in it (not starting with `.`), the first [`MAX_NAMES`] of them.
    pub(crate) fn names(&self) -> Vec<String> {
        let Ok(mut rd) = rustix::fs::Dir::read_from(&self.fd) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Some(Ok(e)) = rd.read() {
            if out.len() == MAX_NAMES {
                tracing::warn!(
                    "{}: only the first {MAX_NAMES} names are read",
                    self.path.display()
                );
                break;
            }
            if let Ok(n) = e.file_name().to_str() {
                if !n.starts_with('.') {
                    out.push(n.to_owned());
                }
            }
        }
        out
    }

    /// The contents of regular file `name`, and its owner; `None` when it is not there, is a
    /// link, a fifo, a device or a directory, or holds more than [`MAX_FILE`] bytes. Never
    /// blocks (a fifo is opened non-blocking, then refused).
    pub(crate) fn read(&self, name: &str) -> Option<(Vec<u8>, u32)> {
        use std::io::Read as _;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_size < 0
            || st.st_size as u64 > MAX_FILE as u64
        {
            return None;
        }
        let mut buf = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_FILE as u64 + 1)
            .read_to_end(&mut buf)
            .ok()?;
        (buf.len() <= MAX_FILE).then_some((buf, st.st_uid))
    }

    /// Puts `bytes` at `name` whole: a new file under a random name, renamed over `name`
    /// (which is replaced, never written through, whatever it is). Owned by the directory's
    /// user even when root writes it.
    pub(crate) fn replace(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        let tmp = format!(".{name}.{}.tmp", random_hex()?);
        let fd = rustix::fs::openat(
            &self.fd,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let written = (|| -> std::io::Result<()> {
            if rustix::process::geteuid().as_raw() != self.uid {
                rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(self.uid)), None)?;
            }
            std::fs::File::from(fd).write_all(bytes)?;
            rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written
    }

    /// Makes `name` a new empty file; `false` when something is there already.
    pub(crate) fn create_new(&self, name: &str) -> bool {
        rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .is_ok()
    }

    /// Removes `name` (a link itself, never what it points to); gone already is fine.
    pub(crate) fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
    }

    /// How long ago `name` was last modified (a link's own time, not its target's).
    pub(crate) fn age(&self, name: &str) -> Option<std::time::Duration> {
        let st = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        let modified = std::time::UNIX_EPOCH
            + std::time::Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32);
        modified.elapsed().ok()
    }

    /// `name` in this directory as a path that cannot be redirected: through the descriptor
    /// (`/proc/self/fd/N/NAME`), for the calls that take only a path (`bind`).
    pub(crate) fn pinned(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.fd.as_raw_fd()))
    }

    /// `name` opened as a path only (`O_PATH`, never following a link): what `connect` may be
    /// pointed at once it was checked.
    pub(crate) fn open_path(&self, name: &str) -> std::io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.fd,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// The directory's descriptor.
    #[cfg(test)]
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

/// 16 random hex digits, for names nobody can pre-create.
fn random_hex() -> std::io::Result<String> {
    let mut b = [0u8; 8];
    let n = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())?;
    if n != b.len() {
        return Err(std::io::Error::other("getrandom returned too few bytes"));
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// This process's records directory, made if needed; `None` when none can be used (the run
/// is then not recorded). Decided once per process.
pub(crate) fn own() -> Option<&'static Dir> {
    static OWN: std::sync::OnceLock<Option<Dir>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let uid = rustix::process::geteuid().as_raw();
        for dir in candidates(uid) {
            // The user's runtime directory (`/run/user/N`) is logind's to make, never ours.
            let parent_ok = dir.parent().is_some_and(|p| {
                p != Path::new(&format!("/run/user/{uid}")) || Dir::open(p, uid).is_some()
            });
            if !parent_ok {
                continue;
            }
            let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
            if let Err(e) = &made {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    tracing::debug!("no run records in {}: {e}", dir.display());
                    continue;
                }
            }
            if let Some(d) = Dir::open(&dir, uid) {
                return Some(d);
            }
            tracing::warn!(
                "{} is not a directory of uid {uid} closed to others: runs are not recorded \
                 there (remove it, or set {RUNTIME_DIR_ENV})",
                dir.display()
            );
        }
        None
    })
    .as_ref()
}

/// Every records directory this process may read, opened: root reads every user's; anyone
/// else only their own.
pub(crate) fn visible() -> Vec<Dir> {
    let uid = rustix::process::geteuid().as_raw();
    if std::env::var_os(RUNTIME_DIR_ENV).is_some_and(|d| !d.is_empty()) || uid != 0 {
        return candidates(uid)
            .into_iter()
            .filter_map(|d| Dir::open(&d, uid))
            .collect();
    }
    let mut out: Vec<Dir> = Dir::open(Path::new("/run/reaper"), 0).into_iter().collect();
    let mut each_user = |parent: &str, name_of: &dyn Fn(&str) -> Option<(String, u32)>| {
        let Ok(rd) = std::fs::read_dir(parent) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some((sub, owner)) = name.to_str().and_then(name_of) else {
                continue;
            };
            if let Some(d) = Dir::open(&Path::new(parent).join(sub), owner) {
                out.push(d);
            }
        }
    };
    each_user("/run/user", &|n| {
        let uid = n.parse().ok()?;
        Some((format!("{n}/reaper"), uid))
    });
    each_user("/tmp", &|n| {
        let uid = n.strip_prefix("reaper-")?.parse().ok()?;
        Some((n.to_owned(), uid))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_private_directory_of_the_user_is_trusted() {
        let tmp = tempdir("trust");
        let uid = rustix::process::geteuid().as_raw();
        let d = tmp.join("d");
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        assert!(Dir::open(&d, uid).is_some());
        assert!(Dir::open(&d, uid + 1).is_none(), "another uid's");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(Dir::open(&d, uid).is_none(), "readable by others");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(Dir::open(&link, uid).is_none(), "a symbolic link");
        assert!(Dir::open(&tmp.join("missing"), uid).is_none());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Links, fifos and huge sparse files are neither followed, nor waited on, nor read.
    #[test]
    fn files_are_replaced_and_read_without_following_or_blocking() {
        let tmp = tempdir("files");
        let uid = rustix::process::geteuid().as_raw();
        let d = tmp.join("d");
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        let dir = Dir::open(&d, uid).unwrap();
        let target = tmp.join("target");
        std::fs::write(&target, "precious").unwrap();
        std::os::unix::fs::symlink(&target, d.join("a")).unwrap();
        assert!(dir.read("a").is_none(), "a link is not read through");
        dir.replace("a", b"record").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert_eq!(dir.read("a").map(|r| r.0), Some(b"record".to_vec()));
        rustix::fs::mkfifoat(dir.fd(), "fifo", Mode::from_raw_mode(0o600)).unwrap();
        assert!(
            dir.read("fifo").is_none(),
            "a fifo is refused, not waited on"
        );
        let sparse = std::fs::File::create(d.join("sparse")).unwrap();
        sparse.set_len(1 << 40).unwrap();
        assert!(
            dir.read("sparse").is_none(),
            "a huge file is refused unread"
        );
        assert_eq!(dir.names().len(), 3, "{:?}", dir.names());
        dir.remove("a");
        assert!(dir.read("a").is_none());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    fn tempdir(what: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("reaper-unit-dir-{what}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

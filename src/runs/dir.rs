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

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The variable that names the records directory instead of the defaults above.
pub const RUNTIME_DIR_ENV: &str = "REAPER_RUNTIME_DIR";

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

/// Whether `dir` may hold `uid`'s records: a directory, not a link, owned by `uid`, closed to
/// everyone else.
pub(crate) fn trusted(dir: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// This process's records directory, made if needed; `None` when none can be used (the run
/// is then not recorded). Decided once per process.
pub(crate) fn own() -> Option<&'static Path> {
    static OWN: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let uid = rustix::process::geteuid().as_raw();
        for dir in candidates(uid) {
            // The user's runtime directory (`/run/user/N`) is logind's to make, never ours.
            let parent_ok = dir
                .parent()
                .is_some_and(|p| p != Path::new(&format!("/run/user/{uid}")) || trusted(p, uid));
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
            if trusted(&dir, uid) {
                return Some(dir);
            }
            tracing::warn!(
                "{} is not a directory of uid {uid} closed to others: runs are not recorded \
                 there (remove it, or set {RUNTIME_DIR_ENV})",
                dir.display()
            );
        }
        None
    })
    .as_deref()
}

/// Every records directory this process may read, with the uid it belongs to: root reads every
/// user's; anyone else only their own.
pub(crate) fn visible() -> Vec<(PathBuf, u32)> {
    let uid = rustix::process::geteuid().as_raw();
    if std::env::var_os(RUNTIME_DIR_ENV).is_some_and(|d| !d.is_empty()) || uid != 0 {
        return candidates(uid)
            .into_iter()
            .filter(|d| trusted(d, uid))
            .map(|d| (d, uid))
            .collect();
    }
    let mut out = Vec::new();
    if trusted(Path::new("/run/reaper"), 0) {
        out.push((PathBuf::from("/run/reaper"), 0));
    }
    let mut each_user = |parent: &str, name_of: &dyn Fn(&str) -> Option<(String, u32)>| {
        let Ok(rd) = std::fs::read_dir(parent) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some((sub, owner)) = name.to_str().and_then(name_of) else {
                continue;
            };
            let dir = Path::new(parent).join(sub);
            if trusted(&dir, owner) {
                out.push((dir, owner));
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

    #[test]
    fn only_a_private_directory_of_the_user_is_trusted() {
        let tmp = tempdir();
        let uid = rustix::process::geteuid().as_raw();
        let d = tmp.join("d");
        std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        assert!(trusted(&d, uid));
        assert!(!trusted(&d, uid + 1), "another uid's");
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(!trusted(&d, uid), "readable by others");
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let link = tmp.join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(!trusted(&link, uid), "a symbolic link");
        assert!(!trusted(&tmp.join("missing"), uid));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("reaper-unit-dir-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

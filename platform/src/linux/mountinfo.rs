//! Finding the cgroup2 mount and this process's cgroup in it, from `/proc/self/mountinfo` and
//! `/proc/self/cgroup`. Pure parsing, so it is unit-tested on captured text; the caller reads the
//! files.
//!
//! Hybrid hosts mount cgroup2 at `/sys/fs/cgroup/unified`, pure-v2 hosts at `/sys/fs/cgroup`, and
//! containers may mount only a subtree: never assume a path.

use std::path::{Path, PathBuf};

/// One cgroup2 mount: where it is mounted and which cgroup of the hierarchy it shows there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    /// Mount point, e.g. `/sys/fs/cgroup/unified`.
    pub mount_point: PathBuf,
    /// The hierarchy path shown at the mount point (`/` unless a subtree was bind-mounted).
    pub root: String,
}

/// The first cgroup2 mount in mountinfo text (proc(5): `ID PARENT MAJ:MIN ROOT MOUNTPOINT
/// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS`; paths escape space, tab, newline and
/// backslash as `\ooo`).
pub fn find_cgroup2_mount(mountinfo: &str) -> Option<Cgroup2Mount> {
    mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        if post.split(' ').next()? != "cgroup2" {
            return None;
        }
        let mut fields = pre.split(' ');
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        Some(Cgroup2Mount {
            mount_point: PathBuf::from(unescape(mount_point)),
            root: unescape(root),
        })
    })
}

/// Whether the first cgroup2 file system is mounted with `nsdelegate` (a super option, after
/// the source in a mountinfo line): then the kernel itself refuses a move across a cgroup
/// namespace's root, through any file or fd (cgroup-v2.rst, "Delegation Containment").
pub fn cgroup2_nsdelegate(mountinfo: &str) -> bool {
    let first = mountinfo.lines().find_map(|line| {
        let (_, post) = line.split_once(" - ")?;
        let mut f = post.split(' ');
        (f.next()? == "cgroup2").then(|| f.nth(1).unwrap_or(""))
    });
    first.is_some_and(|opts| opts.split(',').any(|o| o == "nsdelegate"))
}

/// Whether any cgroup v1 hierarchy is mounted too ("hybrid" mode, as on this project's CI).
pub fn has_cgroup_v1(mountinfo: &str) -> bool {
    mountinfo.lines().any(|l| {
        l.split_once(" - ")
            .and_then(|(_, post)| post.split(' ').next())
            == Some("cgroup")
    })
}

/// The mount points of every cgroup file system (v1 `cgroup` and `cgroup2`), in mountinfo order.
pub fn cgroup_mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let fstype = post.split(' ').next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(PathBuf::from(unescape(pre.split(' ').nth(4)?)))
        })
        .collect()
}

/// The unified-hierarchy path of a process from its `/proc/PID/cgroup` text: the `0::PATH` line.
/// `None` when there is no such line (a v1-only host).
pub fn unified_cgroup_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_owned)
}

/// Where a unified-hierarchy path lives on disk under `mount`. `None` when the path is not visible
/// through this mount (outside a bind-mounted subtree, or `/..` paths of a process outside our
/// cgroup namespace).
pub fn cgroup_dir(mount: &Cgroup2Mount, hierarchy_path: &str) -> Option<PathBuf> {
    if hierarchy_path.starts_with("/..") || !hierarchy_path.starts_with('/') {
        return None;
    }
    let rel = if mount.root == "/" {
        hierarchy_path
    } else {
        let rest = hierarchy_path.strip_prefix(mount.root.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rel = rel.trim_start_matches('/');
    Some(if rel.is_empty() {
        mount.mount_point.clone()
    } else {
        mount.mount_point.join(Path::new(rel))
    })
}

/// Undo mountinfo's octal escapes (`\040` is a space).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let oct = &bytes[i + 1..i + 4];
            if oct.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = (oct[0] - b'0') as u32 * 64
                    + (oct[1] - b'0') as u32 * 8
                    + (oct[2] - b'0') as u32;
                if let Ok(b) = u8::try_from(v) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const PURE_V2: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
26 21 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn hybrid_mount_is_found_under_unified() {
        let m = find_cgroup2_mount(HYBRID).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m.root, "/");
    }

    #[test]
    fn pure_v2_mount_with_optional_fields() {
        let m = find_cgroup2_mount(PURE_V2).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup"));
    }

    #[test]
    fn nsdelegate_is_a_super_option_of_the_cgroup2_mount() {
        assert!(cgroup2_nsdelegate(PURE_V2));
        assert!(!cgroup2_nsdelegate(HYBRID));
        assert!(!cgroup2_nsdelegate(""));
    }

    #[test]
    fn v1_presence_tells_hybrid_from_pure_v2() {
        assert!(has_cgroup_v1(HYBRID));
        assert!(!has_cgroup_v1(PURE_V2));
    }

    #[test]
    fn every_cgroup_mount_point_v1_and_v2() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            cgroup_mount_points(HYBRID),
            [
                p("/sys/fs/cgroup/memory"),
                p("/sys/fs/cgroup/systemd"),
                p("/sys/fs/cgroup/unified")
            ]
        );
        assert_eq!(cgroup_mount_points(PURE_V2), [p("/sys/fs/cgroup")]);
    }

    #[test]
    fn no_cgroup2_mount() {
        assert_eq!(
            find_cgroup2_mount("35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"),
            None
        );
        assert_eq!(find_cgroup2_mount(""), None);
    }

    #[test]
    fn escaped_mount_point_with_space_tab_and_backslash() {
        let text = "41 31 0:38 / /mnt/my\\040cg\\011x\\134y rw - cgroup2 none rw\n";
        let m = find_cgroup2_mount(text).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/mnt/my cg\tx\\y"));
    }

    #[test]
    fn unescape_leaves_malformed_escapes_alone() {
        assert_eq!(unescape("a\\04"), "a\\04");
        assert_eq!(unescape("a\\999b"), "a\\999b");
        assert_eq!(unescape("\\"), "\\");
        assert_eq!(unescape("x\\040"), "x ");
    }

    #[test]
    fn unified_path_from_hybrid_and_v2_files() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/cce5\n1:cpu:/\n0::/\n";
        assert_eq!(unified_cgroup_path(hybrid).as_deref(), Some("/"));
        let v2 = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/a b.scope\n";
        assert_eq!(
            unified_cgroup_path(v2).as_deref(),
            Some("/user.slice/user-1000.slice/user@1000.service/app.slice/a b.scope")
        );
        assert_eq!(unified_cgroup_path("4:memory:/x\n"), None);
    }

    #[test]
    fn cgroup_dir_joins_mount_and_path() {
        let m = Cgroup2Mount {
            mount_point: "/sys/fs/cgroup/unified".into(),
            root: "/".into(),
        };
        assert_eq!(
            cgroup_dir(&m, "/").unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        assert_eq!(
            cgroup_dir(&m, "/a/b c").unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified/a/b c")
        );
    }

    #[test]
    fn cgroup_dir_in_a_bind_mounted_subtree() {
        let m = Cgroup2Mount {
            mount_point: "/sys/fs/cgroup".into(),
            root: "/docker/abc".into(),
        };
        assert_eq!(
            cgroup_dir(&m, "/docker/abc").unwrap(),
            PathBuf::from("/sys/fs/cgroup")
        );
        assert_eq!(
            cgroup_dir(&m, "/docker/abc/x").unwrap(),
            PathBuf::from("/sys/fs/cgroup/x")
        );
        assert_eq!(cgroup_dir(&m, "/docker/abcd"), None);
        assert_eq!(cgroup_dir(&m, "/other"), None);
    }

    #[test]
    fn cgroup_dir_refuses_paths_outside_the_namespace() {
        let m = Cgroup2Mount {
            mount_point: "/sys/fs/cgroup".into(),
            root: "/".into(),
        };
        assert_eq!(cgroup_dir(&m, "/../../user.slice"), None);
        assert_eq!(cgroup_dir(&m, "relative"), None);
    }
}

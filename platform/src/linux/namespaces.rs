//! Where this process stands: in the machine's own namespaces, or in a container's.
//!
//! The kernel gives each namespace type's *initial* namespace a fixed inode number
//! (include/linux/proc_ns.h: `PROC_PID_INIT_INO`, `PROC_CGROUP_INIT_INO`), so a `stat` of
//! `/proc/self/ns/TYPE` tells whether a process is in the initial one without any privilege.

use std::path::Path;

/// include/linux/proc_ns.h.
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
const PROC_CGROUP_INIT_INO: u64 = 0xEFFF_FFFB;

fn ns_inode(kind: &str) -> Option<u64> {
    rustix::fs::stat(format!("/proc/self/ns/{kind}").as_str())
        .ok()
        .map(|st| st.st_ino)
}

/// Whether this process is in a PID namespace other than the machine's (`None`: unknown, e.g.
/// `/proc` not mounted).
pub fn in_child_pid_namespace() -> Option<bool> {
    ns_inode("pid").map(|ino| ino != PROC_PID_INIT_INO)
}

/// Whether this process is in a cgroup namespace other than the machine's.
pub fn in_child_cgroup_namespace() -> Option<bool> {
    ns_inode("cgroup").map(|ino| ino != PROC_CGROUP_INIT_INO)
}

/// Whether this process is PID 1 of its PID namespace (a container's init).
pub fn is_pid1() -> bool {
    rustix::process::getpid().as_raw_nonzero().get() == 1
}

/// Whether the file system at `path` is mounted read-only (statvfs(3) `ST_RDONLY`): Docker and
/// Kubernetes mount the cgroup file system so by default.
pub fn read_only(path: &Path) -> std::io::Result<bool> {
    let st = rustix::fs::statvfs(path)?;
    Ok(st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

/// Whether an unprivileged user may create user namespaces: `/proc/sys/user/max_user_namespaces`
/// above 0, and (Debian, Ubuntu) the `kernel/unprivileged_userns_clone` switch on where it
/// exists. `None`: unknown (`/proc/sys` unreadable).
pub fn unprivileged_userns() -> Option<bool> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let max = read("/proc/sys/user/max_user_namespaces")?;
    let switch = read("/proc/sys/kernel/unprivileged_userns_clone").unwrap_or(1);
    Some(max > 0 && switch != 0)
}

//! The sandbox a leader starts in (`--sandbox`), so that even as root it cannot leave its cgroup:
//!
//! - a user namespace of its own, made by the clone, whose maps the parent writes before the
//!   child goes on: for root every id reaper's namespace has, mapped onto itself (files, `chown`
//!   and `setuid` work as before); for another user only their own uid and gid (the only mapping
//!   an unprivileged parent may write). Every capability the command has is then one of this
//!   namespace, good for the run's own namespaces and for files, never for a process outside:
//!   the kernel's ptrace check across user namespaces asks for `CAP_SYS_PTRACE` in the target's
//!   namespace (`cap_ptrace_access_check`), so `/proc/PID/root` of a process outside — its mount
//!   namespace, where the cgroup file system is writable — stays closed even after `setuid` to
//!   that process's uid; and `vhangup`, module loading, raw I/O and the like need the initial
//!   namespace's capabilities;
//! - a mount namespace of its own (owned by that user namespace, so every mount is copied
//!   *locked*: `MNT_LOCKED`, `MNT_LOCK_READONLY`), with every cgroup file system, `/sys` and
//!   `/proc/sys` read-only. `/proc/sys` because `kernel/core_pattern` and `kernel/modprobe` make
//!   the kernel start a program of the writer's choice outside every cgroup;
//! - a cgroup namespace rooted at the run's cgroup (the leader is already in it when this runs),
//!   so no `cgroup.procs` outside the run is visible;
//! - optionally a PID namespace (the clone flag is the caller's) with its own `/proc`;
//! - `PR_SET_NO_NEW_PRIVS`, and [`DROPPED`] removed from the bounding, ambient, inheritable,
//!   permitted and effective sets, so the command cannot undo any of the above even in its own
//!   user namespace: no `mount`, `umount`, `setns`;
//! - the seccomp filter of [`super::seccomp`]: no `clone3` (whose `CLONE_INTO_CGROUP` needs only
//!   a directory fd, which the read-only mount still gives), no new cgroup namespace.
//!
//! [`SandboxPlan::new`] computes everything before the clone (it reads `/proc` and allocates);
//! [`SandboxPlan::write_maps`] runs in the parent right after the clone; [`SandboxPlan::apply`]
//! runs in the child between clone and exec and only makes system calls on that prepared data
//! (see `spawn.rs`: the child of a multi-threaded parent must not allocate). The `caps` crate
//! names the capabilities and reads which ones this kernel knows; its set-manipulating functions
//! build hash sets (they allocate), so the child uses `prctl` and `capset` directly on masks
//! computed here.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use caps::Capability;

/// What the sandbox takes away even inside its user namespace, and why each one:
/// - `SYS_ADMIN`: `mount`/`umount`/remount, `setns`, `unshare` of mount namespaces, a fresh
///   cgroup2 mount of the run's cgroup namespace (whose limit files it could write);
/// - `SYS_PTRACE`: attaching to another process of the run that holds what this one lacks;
/// - `DAC_READ_SEARCH`: `open_by_handle_at` opens files by handle, past the mount namespace;
/// - `SYS_MODULE`, `SYS_RAWIO`, `BPF`, `PERFMON`: kernel code, kernel memory, and BPF programs
///   that write user memory — any of them can do anything;
/// - `SYS_BOOT`: `kexec_load` replaces the kernel the containment lives in.
///
/// Most of these need the initial user namespace anyway; dropped, they stay gone in any user
/// namespace the command creates later. Not dropped: what root's everyday work needs
/// (`DAC_OVERRIDE`, `CHOWN`, `FOWNER`, `KILL`, `SETUID`/`SETGID`, …), which in the run's user
/// namespace reach files and processes of the same uid, nothing that moves a process between
/// cgroups.
pub const DROPPED: &[Capability] = &[
    Capability::CAP_SYS_ADMIN,
    Capability::CAP_SYS_PTRACE,
    Capability::CAP_DAC_READ_SEARCH,
    Capability::CAP_SYS_MODULE,
    Capability::CAP_SYS_RAWIO,
    Capability::CAP_BPF,
    Capability::CAP_PERFMON,
    Capability::CAP_SYS_BOOT,
];

/// One step of [`SandboxPlan::apply`], named in the error when the kernel refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Step {
    MountNamespace = 1,
    CgroupNamespace,
    PrivateMounts,
    ProcMount,
    ReadOnly,
    NoNewPrivs,
    CapabilityBounding,
    CapabilityAmbient,
    Capabilities,
    UserNamespace,
    UserMaps,
    Seccomp,
}

impl Step {
    /// What the step is, for "--sandbox: cannot …".
    pub fn describe(self) -> &'static str {
        match self {
            Step::MountNamespace => "create a mount namespace (unshare CLONE_NEWNS)",
            Step::CgroupNamespace => "create a cgroup namespace (unshare CLONE_NEWCGROUP)",
            Step::PrivateMounts => "make the mounts private to the sandbox (MS_REC|MS_SLAVE)",
            Step::ProcMount => "mount /proc for the PID namespace",
            Step::ReadOnly => "make the cgroup file system, /sys and /proc/sys read-only",
            Step::NoNewPrivs => "set PR_SET_NO_NEW_PRIVS",
            Step::CapabilityBounding => "drop capabilities from the bounding set",
            Step::CapabilityAmbient => "clear the ambient capabilities",
            Step::Capabilities => "drop capabilities (capset)",
            Step::UserNamespace => {
                "create a user namespace (clone3 with CLONE_NEWUSER; user.max_user_namespaces \
                 must be above 0, and a non-root user's sandbox needs unprivileged user \
                 namespaces: kernel.unprivileged_userns_clone, AppArmor's \
                 kernel.apparmor_restrict_unprivileged_userns; see `reaper doctor`)"
            }
            Step::UserMaps => "write the user namespace's setgroups, uid_map and gid_map",
            Step::Seccomp => "install the seccomp filter (PR_SET_SECCOMP)",
        }
    }

    pub fn from_raw(n: u32) -> Option<Step> {
        use Step::*;
        [
            MountNamespace,
            CgroupNamespace,
            PrivateMounts,
            ProcMount,
            ReadOnly,
            NoNewPrivs,
            CapabilityBounding,
            CapabilityAmbient,
            Capabilities,
            UserNamespace,
            UserMaps,
            Seccomp,
        ]
        .into_iter()
        .find(|s| *s as u32 == n)
    }
}

/// A step the kernel refused, and its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepError {
    pub step: Step,
    pub errno: i32,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--sandbox: cannot {}: {}",
            self.step.describe(),
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for StepError {}

/// Everything the child needs, computed before the clone.
#[derive(Debug)]
pub struct SandboxPlan {
    /// Mount points made read-only with everything under them.
    read_only: Vec<CString>,
    /// Directories that are no mount points (`/proc/sys`): bind-mounted onto themselves first.
    bind_read_only: Vec<CString>,
    /// The child is PID 1 of a new PID namespace: mount a `/proc` that shows it.
    pid_namespace: bool,
    /// Indices of [`DROPPED`] this kernel knows (PR_CAPBSET_DROP says EINVAL for the others).
    drop_indices: Vec<u8>,
    /// The same as a mask of the 64-bit capability sets.
    drop_mask: u64,
    /// The user namespace's maps, written by the parent ([`SandboxPlan::write_maps`]).
    maps: UserMaps,
    /// The seccomp program (`super::seccomp`).
    filter: Vec<libc::sock_filter>,
}

/// `uid_map` and `gid_map` contents, and whether `setgroups` is denied first.
#[derive(Debug)]
struct UserMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// An unprivileged writer may write a gid map only once `setgroups(2)` is denied in the
    /// namespace (user_namespaces(7)); root keeps `setgroups`.
    deny_setgroups: bool,
}

/// include/uapi/linux/mount.h, fcntl.h.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// include/uapi/linux/capability.h.
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn c(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a NUL byte in {}", p.display()),
        )
    })
}

impl SandboxPlan {
    /// The plan for this machine: `/sys` and every cgroup mount (read from
    /// `/proc/self/mountinfo`), `/proc/sys`; `pid_namespace` when the child is to be PID 1 of a
    /// new PID namespace. The user namespace maps root's every id onto itself, another user's
    /// own uid and gid only.
    pub fn new(pid_namespace: bool) -> std::io::Result<SandboxPlan> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mut ro: Vec<PathBuf> = Vec::new();
        if Path::new("/sys").is_dir() {
            ro.push("/sys".into());
        }
        // Covered by `/sys` (recursive) when under it; elsewhere (a container may mount cgroup2
        // anywhere) on their own.
        for m in super::mountinfo::cgroup_mount_points(&mountinfo) {
            if !m.starts_with("/sys") && !ro.contains(&m) {
                ro.push(m);
            }
        }
        let known = caps::runtime::thread_all_supported();
        let drop: Vec<Capability> = DROPPED
            .iter()
            .copied()
            .filter(|c| known.contains(c))
            .collect();
        Ok(SandboxPlan {
            read_only: ro.iter().map(|p| c(p)).collect::<Result<_, _>>()?,
            bind_read_only: vec![c(Path::new("/proc/sys"))?],
            pid_namespace,
            drop_indices: drop.iter().map(|c| c.index()).collect(),
            drop_mask: drop.iter().fold(0, |m, c| m | c.bitmask()),
            maps: user_maps()?,
            filter: super::seccomp::sandbox_filter(),
        })
    }

    pub fn pid_namespace(&self) -> bool {
        self.pid_namespace
    }

    /// Whether the user namespace is an unprivileged one (reaper is not root): the kernel may
    /// forbid those (`unprivileged_userns_clone`, AppArmor) where it allows root's.
    pub fn unprivileged(&self) -> bool {
        self.maps.deny_setgroups
    }

    /// The namespace flags the clone itself must carry: `CLONE_NEWUSER` always (its maps are the
    /// parent's to write, which it can do only for a child, not for itself), and `CLONE_NEWPID`
    /// for a PID namespace, which then belongs to the new user namespace.
    pub fn clone_flags(&self) -> u64 {
        let pid = if self.pid_namespace {
            libc::CLONE_NEWPID as u64
        } else {
            0
        };
        libc::CLONE_NEWUSER as u64 | pid
    }

    /// Writes the maps of the user namespace the child `pid` was cloned into: the parent's part,
    /// right after the clone, while the child waits. A writer needs `CAP_SETUID` in the
    /// namespace *above* the new one for any map but its own uid, so the child cannot write
    /// root's.
    pub fn write_maps(&self, pid: rustix::process::Pid) -> Result<(), StepError> {
        let pid = pid.as_raw_nonzero().get();
        let write = |file: &str, data: &[u8]| {
            std::fs::write(format!("/proc/{pid}/{file}"), data).map_err(|e| StepError {
                step: Step::UserMaps,
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            })
        };
        if self.maps.deny_setgroups {
            write("setgroups", b"deny")?;
        }
        write("uid_map", &self.maps.uid_map)?;
        write("gid_map", &self.maps.gid_map)
    }

    /// Puts the calling process into the sandbox: call it in the child after the clone (and after
    /// it is in the run's cgroup), before exec.
    ///
    /// # Safety
    ///
    /// Only in a freshly cloned (or forked) child, which it changes for good. It makes system
    /// calls on data of `self` and the stack only: no allocation, no lock, so it is safe
    /// between clone and exec of a multi-threaded parent.
    pub unsafe fn apply(&self) -> Result<(), StepError> {
        let fail = |step: Step| StepError {
            step,
            errno: std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        };
        // SAFETY: system calls on C strings and plain structs built before the clone (or on the
        // stack here); see `# Safety`.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(fail(Step::MountNamespace));
            }
            // The child is in the run's cgroup already (CLONE_INTO_CGROUP, or the backend's
            // pre_exec that ran before this): the new cgroup namespace is rooted there.
            if libc::unshare(libc::CLONE_NEWCGROUP) != 0 {
                return Err(fail(Step::CgroupNamespace));
            }
            // Slave, not private: the host's later mounts still show here, nothing of ours
            // (the new /proc) shows there.
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ) != 0
            {
                return Err(fail(Step::PrivateMounts));
            }
            if self.pid_namespace
                && libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ) != 0
            {
                return Err(fail(Step::ProcMount));
            }
            for dir in &self.bind_read_only {
                if libc::mount(
                    dir.as_ptr(),
                    dir.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(fail(Step::ReadOnly));
                }
            }
            let attr = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            for dir in self.read_only.iter().chain(&self.bind_read_only) {
                // mount_setattr(2) (Linux 5.12): one call for a whole tree of mounts.
                if libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    dir.as_ptr(),
                    AT_RECURSIVE,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                ) != 0
                {
                    return Err(fail(Step::ReadOnly));
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(fail(Step::NoNewPrivs));
            }
            for &cap in &self.drop_indices {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(fail(Step::CapabilityBounding));
                }
            }
            if libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(fail(Step::CapabilityAmbient));
            }
            let mut header = CapHeader {
                version: LINUX_CAPABILITY_VERSION_3,
                pid: 0,
            };
            let mut data = [CapData::default(); 2];
            if libc::syscall(
                libc::SYS_capget,
                &mut header as *mut CapHeader,
                data.as_mut_ptr(),
            ) != 0
            {
                return Err(fail(Step::Capabilities));
            }
            let keep = !self.drop_mask;
            for (i, d) in data.iter_mut().enumerate() {
                let k = (keep >> (32 * i)) as u32;
                d.effective &= k;
                d.permitted &= k;
                d.inheritable &= k;
            }
            if libc::syscall(
                libc::SYS_capset,
                &mut header as *mut CapHeader,
                data.as_ptr(),
            ) != 0
            {
                return Err(fail(Step::Capabilities));
            }
            // Last: the steps above use unshare, which the filter restricts. No new privileges
            // is set, so no capability is needed.
            let prog = libc::sock_fprog {
                len: self.filter.len() as libc::c_ushort,
                filter: self.filter.as_ptr().cast_mut(),
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
                0,
                0,
            ) != 0
            {
                return Err(fail(Step::Seccomp));
            }
        }
        Ok(())
    }
}

/// The maps for this caller. Root: every range of its own user namespace's ids onto itself (in
/// the initial namespace, `0 0 4294967295`), so files of any owner keep their meaning. Anyone
/// else: their effective uid and gid onto themselves, the only map an unprivileged writer may
/// write.
fn user_maps() -> std::io::Result<UserMaps> {
    let uid = rustix::process::geteuid();
    if !uid.is_root() {
        let uid = uid.as_raw();
        let gid = rustix::process::getegid().as_raw();
        return Ok(UserMaps {
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            deny_setgroups: true,
        });
    }
    Ok(UserMaps {
        uid_map: identity_map(&std::fs::read_to_string("/proc/self/uid_map")?),
        gid_map: identity_map(&std::fs::read_to_string("/proc/self/gid_map")?),
        deny_setgroups: false,
    })
}

/// `ID-inside ID-outside COUNT` lines of a map (user_namespaces(7)) turned into lines that map
/// each inside range onto itself.
fn identity_map(map: &str) -> Vec<u8> {
    let mut out = String::new();
    for line in map.lines() {
        let mut f = line.split_whitespace();
        if let (Some(inside), Some(_), Some(count)) = (f.next(), f.next(), f.next()) {
            out.push_str(&format!("{inside} {inside} {count}\n"));
        }
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_through_their_number() {
        for n in 0..20 {
            if let Some(s) = Step::from_raw(n) {
                assert_eq!(s as u32, n);
            }
        }
        assert_eq!(Step::from_raw(1), Some(Step::MountNamespace));
        assert_eq!(Step::from_raw(9), Some(Step::Capabilities));
        assert_eq!(Step::from_raw(0), None);
    }

    #[test]
    fn root_maps_every_id_of_its_namespace_onto_itself() {
        assert_eq!(
            identity_map("         0          0 4294967295\n"),
            b"0 0 4294967295\n"
        );
        // A container's namespace: its ids, not the host's.
        assert_eq!(
            identity_map("0 100000 65536\n65536 1000 1\n"),
            b"0 0 65536\n65536 65536 1\n"
        );
    }

    #[test]
    fn the_mask_holds_sys_admin() {
        let plan = SandboxPlan::new(false).unwrap();
        assert_ne!(plan.drop_mask & Capability::CAP_SYS_ADMIN.bitmask(), 0);
        assert!(plan
            .read_only
            .iter()
            .any(|p| p.as_bytes() == b"/sys" || !Path::new("/sys").is_dir()));
    }
}

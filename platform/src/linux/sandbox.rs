//! The sandbox a leader starts in (`--sandbox`), so that even as root it cannot leave its cgroup,
//! nor make anything outside it run code:
//!
//! - a user namespace of its own, made by the clone, whose maps the parent writes before the
//!   child goes on. For root, ids `0..count` map onto a range of **unprivileged host ids** the
//!   caller picked ([`IdRange`]), and the child then becomes that namespace's root (uid 0 inside
//!   is a stranger outside): a host file of root's is "other" to it, so it cannot rewrite the
//!   programs the kernel runs as root on its own (`kernel.modprobe`'s, `/sbin/request-key`, a
//!   `|pipe` `core_pattern`'s), a block device, or a file a root service runs later; it cannot
//!   signal or trace a host process of root's; a daemon that checks its peer's uid (D-Bus,
//!   `systemd-run`) sees a stranger. Directories the caller declares ([`Access`]) are bound
//!   in through *idmapped* mounts, where files owned by host root are root's inside. For
//!   another user, only their own uid and gid (the only mapping an unprivileged parent may
//!   write): the tree has that user's power over files, as before.
//!   Capabilities are then those of this namespace, never good for a process outside: the
//!   kernel's ptrace check across user namespaces asks for `CAP_SYS_PTRACE` in the target's
//!   namespace (`cap_ptrace_access_check`), so `/proc/PID/root` of a process outside stays
//!   closed;
//! - a mount namespace of its own (owned by that user namespace, so every mount is copied
//!   *locked*: `MNT_LOCKED`, `MNT_LOCK_READONLY`), private (no later mount of the host's
//!   propagates in), with every cgroup file system, `/sys` and `/proc/sys` read-only, the
//!   kernel's files that container runtimes mask masked (`/proc/sysrq-trigger`, `/proc/kcore`,
//!   …: [`MASKED`], [`READ_ONLY`]), and the directories the caller names hidden under an
//!   empty read-only tmpfs (the run records, whose sockets take orders);
//! - a cgroup namespace rooted at the run's cgroup (the leader is already in it when this runs),
//!   so no `cgroup.procs` outside the run is visible;
//! - optionally a PID namespace (the clone flag is the caller's) with its own `/proc`;
//! - `PR_SET_NO_NEW_PRIVS`, and [`DROPPED`] removed from the bounding, ambient, inheritable,
//!   permitted and effective sets, so the command cannot undo any of the above: no `mount`,
//!   `umount`, `setns` (a user namespace it makes later gets capabilities of its own, but over
//!   locked mounts, and the masks keep a fresh `/proc` from being mounted);
//! - the seccomp filter of [`super::seccomp`]: no `clone3` (whose `CLONE_INTO_CGROUP` needs only
//!   a directory fd, which the read-only mount still gives), no new cgroup namespace.
//!
//! [`SandboxPlan::new`] computes everything before the clone (it reads `/proc`, allocates, and
//! for root makes the idmapped mounts, which only a process privileged over the file system's
//! own namespace may); [`SandboxPlan::write_maps`] runs in the parent right after the clone;
//! [`SandboxPlan::apply`] runs in the child between clone and exec and only makes system calls
//! on that prepared data (see `spawn.rs`: the child of a multi-threaded parent must not
//! allocate). The `caps` crate names the capabilities and reads which ones this kernel knows;
//! its set-manipulating functions build hash sets (they allocate), so the child uses `prctl` and
//! `capset` directly on masks computed here.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
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
    Identity,
    Binds,
    Hide,
    Mask,
    WorkingDirectory,
}

impl Step {
    /// What the step is, for "cannot …".
    pub fn describe(self) -> &'static str {
        match self {
            Step::MountNamespace => "create a mount namespace (unshare CLONE_NEWNS)",
            Step::CgroupNamespace => "create a cgroup namespace (unshare CLONE_NEWCGROUP)",
            Step::PrivateMounts => "make the mounts private to the sandbox (MS_REC|MS_PRIVATE)",
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
                 kernel.apparmor_restrict_unprivileged_userns)"
            }
            Step::UserMaps => "write the user namespace's setgroups, uid_map and gid_map",
            Step::Seccomp => "install the seccomp filter (PR_SET_SECCOMP)",
            Step::Identity => {
                "become root of the sandbox's user namespace (setgroups, setresgid, setresuid)"
            }
            Step::Binds => "bind the declared directories in (move_mount, mount_setattr)",
            Step::Hide => "hide the run records' directories (a tmpfs over each)",
            Step::Mask => "mask the kernel's files in /proc and /sys (/proc/sysrq-trigger, …)",
            Step::WorkingDirectory => {
                "enter the working directory (the sandbox's root is an unprivileged user on the \
                 host: a directory only host root may enter must be declared)"
            }
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
            Identity,
            Binds,
            Hide,
            Mask,
            WorkingDirectory,
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
            "the sandbox: cannot {}: {}",
            self.step.describe(),
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for StepError {}

/// A range of host ids: what a root sandbox's ids `0..count` are outside. The caller picks one
/// no host user or other sandbox has (the policy is its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub base: u32,
    pub count: u32,
}

/// How a declared directory appears inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read as the caller reads it, never written.
    ReadOnly,
    /// Read and written as the caller would.
    ReadWrite,
}

/// What the sandbox is to be, besides what it always is.
#[derive(Debug, Default)]
pub struct SandboxSpec<'a> {
    /// The child is PID 1 of a new PID namespace: mount a `/proc` that shows it.
    pub pid_namespace: bool,
    /// Root only, and required there: the host ids the sandbox's ids map onto.
    pub ids: Option<IdRange>,
    /// Directories bound in at their own path. For root, through an idmapped mount: host root's
    /// files are the sandbox root's there. For another user, as they are (read-only ones
    /// bound read-only).
    pub paths: &'a [(PathBuf, Access)],
    /// Directories hidden under an empty read-only tmpfs, where they exist.
    pub hidden: &'a [PathBuf],
}

/// The kernel's files a container runtime masks (runc's and crun's defaults): a file is
/// covered by `/dev/null`, a directory by an empty read-only tmpfs. `/proc/kcore` reads the
/// kernel's memory, `/proc/keys` every key's description, `/proc/timer_list` and
/// `/proc/sched_debug` other processes' timers and tasks, `/sys/firmware` the firmware's
/// tables.
pub const MASKED: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The kernel's files and directories in `/proc` that write to the whole machine, made
/// read-only: `/proc/sysrq-trigger` (`f` OOM-kills any process, `b` reboots, `c` crashes,
/// `e`/`i` signal every process), `/proc/sys` (`kernel/modprobe`, `kernel/core_pattern` and
/// `kernel/hotplug` name programs the kernel runs as root outside every cgroup), `/proc/irq`,
/// `/proc/bus`, `/proc/fs`.
pub const READ_ONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The world-writable directories a root sandbox gets a private tmpfs for: shared with host
/// root, they would hold files of the sandbox's host ids under the names programs key by uid
/// (`/tmp/tmux-0`, `/tmp/codex-daemon-0`), which host root's own programs then refuse, and lock
/// files a root service may take later.
pub const PRIVATE: &[&str] = &["/tmp", "/var/tmp", "/dev/shm", "/run/lock"];

/// A declared directory, ready for the child.
#[derive(Debug)]
struct Bind {
    target: CString,
    /// Root's: the idmapped mount, detached, for the child to move into place. Another user's:
    /// `None`, the child binds the directory onto itself.
    mount: Option<OwnedFd>,
    read_only: bool,
}

/// A tmpfs of the sandbox's own over a host directory: a private temporary directory
/// ([`PRIVATE`]), or a directory on the way to declared ones that the sandbox's root, a stranger
/// on the host, may not search (`/root`, 0700), replaced by an empty one holding only the way to
/// each declared path beneath it (what it hid was closed to the sandbox anyway).
#[derive(Debug)]
struct Skeleton {
    dir: CString,
    /// A private temporary directory (world-writable, sticky), not a read-only way in.
    private: bool,
    /// Absolute paths to create in it, parents first, and whether each is a directory (the
    /// last of each declared path is its mount point: a file for a declared file).
    entries: Vec<(CString, bool)>,
}

/// Everything the child needs, computed before the clone.
#[derive(Debug)]
pub struct SandboxPlan {
    /// Mount points made read-only with everything under them.
    read_only: Vec<CString>,
    /// Paths that are no mount points (`/proc/sys`, [`READ_ONLY`]): bound onto themselves
    /// first, then made read-only.
    bind_read_only: Vec<CString>,
    /// [`MASKED`] files (covered by `/dev/null`) and directories (by an empty tmpfs).
    masked_files: Vec<CString>,
    masked_dirs: Vec<CString>,
    /// Declared directories.
    binds: Vec<Bind>,
    /// Root's: where the way to a declared directory is closed to the sandbox's root.
    skeletons: Vec<Skeleton>,
    /// Directories to hide.
    hidden: Vec<CString>,
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

/// `uid_map` and `gid_map` contents, and what they ask of the child.
#[derive(Debug)]
struct UserMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// An unprivileged writer may write a gid map only once `setgroups(2)` is denied in the
    /// namespace (user_namespaces(7)); root keeps `setgroups`.
    deny_setgroups: bool,
    /// Root's: the child keeps host root's ids across the clone, which are unmapped in its
    /// namespace, until it sets its ids to the namespace's 0 (host [`IdRange::base`]).
    become_root: bool,
}

/// include/uapi/linux/mount.h, fcntl.h.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
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
    /// The plan for this machine and `spec`: `/sys` and every cgroup mount (read from
    /// `/proc/self/mountinfo`) and [`READ_ONLY`] made read-only, [`MASKED`] covered, the
    /// declared directories bound in, the hidden ones hidden. For root the declared
    /// directories' idmapped mounts are made here, in this process, which is privileged over
    /// their file systems; `spec.ids` is required then.
    pub fn new(spec: &SandboxSpec<'_>) -> std::io::Result<SandboxPlan> {
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
        let maps = user_maps(spec.ids)?;
        // What exists here exists in a fresh `/proc` of the same kernel too.
        let exists = |p: &&&str| Path::new(**p).exists();
        let mut masked_files = Vec::new();
        let mut masked_dirs = Vec::new();
        for p in MASKED.iter().filter(exists) {
            if Path::new(p).is_dir() {
                masked_dirs.push(c(Path::new(p))?);
            } else {
                masked_files.push(c(Path::new(p))?);
            }
        }
        let skeletons = match spec.ids {
            Some(_) => skeletons(spec.paths, PRIVATE)?,
            None => Vec::new(),
        };
        // Outer directories first: one bound after a directory inside it would cover that.
        let mut paths = spec.paths.to_vec();
        paths.sort_by_key(|(p, _)| p.components().count());
        let spec = &SandboxSpec {
            paths: &paths,
            ..*spec
        };
        let binds = match spec.ids {
            Some(_) => idmapped_binds(&maps, spec.paths)?,
            None => spec
                .paths
                .iter()
                .map(|(p, access)| {
                    Ok(Bind {
                        target: c(p)?,
                        mount: None,
                        read_only: *access == Access::ReadOnly,
                    })
                })
                .collect::<std::io::Result<_>>()?,
        };
        Ok(SandboxPlan {
            read_only: ro.iter().map(|p| c(p)).collect::<Result<_, _>>()?,
            bind_read_only: READ_ONLY
                .iter()
                .filter(exists)
                .map(|p| c(Path::new(p)))
                .collect::<Result<_, _>>()?,
            masked_files,
            masked_dirs,
            binds,
            skeletons,
            hidden: spec.hidden.iter().map(|p| c(p)).collect::<Result<_, _>>()?,
            pid_namespace: spec.pid_namespace,
            drop_indices: drop.iter().map(|c| c.index()).collect(),
            drop_mask: drop.iter().fold(0, |m, c| m | c.bitmask()),
            maps,
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
        write_maps(pid.as_raw_nonzero().get(), &self.maps).map_err(|e| StepError {
            step: Step::UserMaps,
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        })
    }

    /// Puts the calling process into the sandbox, its working directory `cwd` (entered once the
    /// declared directories are in place, and before the process takes the sandbox's ids,
    /// which may not search the directories above it): call it in the child after the clone
    /// (and after it is in the run's cgroup), before exec.
    ///
    /// # Safety
    ///
    /// Only in a freshly cloned (or forked) child, which it changes for good. It makes system
    /// calls on data of `self` and the stack only: no allocation, no lock, so it is safe
    /// between clone and exec of a multi-threaded parent.
    pub unsafe fn apply(&self, cwd: Option<&CStr>) -> Result<(), StepError> {
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
            // Private: a mount the host makes later (a cgroup2, a sysfs) would come in writable.
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
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
            // Hidden and masked paths that are not here, or not reachable, need no cover.
            let absent = || {
                matches!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES)
                )
            };
            for dir in &self.masked_dirs {
                if !empty_tmpfs(dir) && !absent() {
                    return Err(fail(Step::Mask));
                }
            }
            for file in &self.masked_files {
                if libc::mount(
                    c"/dev/null".as_ptr(),
                    file.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) != 0
                    && !absent()
                {
                    return Err(fail(Step::Mask));
                }
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
            for dir in self.read_only.iter().chain(&self.bind_read_only) {
                if set_attr(dir, MOUNT_ATTR_RDONLY, AT_RECURSIVE) != 0 {
                    return Err(fail(Step::ReadOnly));
                }
            }
            // From here on as the sandbox's root (root's sandbox): host root's ids are unmapped
            // in the namespace, so nothing could be created in a tmpfs of its own before.
            if self.maps.become_root
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(0, 0, 0) != 0
                    || libc::setresuid(0, 0, 0) != 0)
            {
                return Err(fail(Step::Identity));
            }
            for sk in &self.skeletons {
                if !skeleton_tmpfs(&sk.dir, sk.private) {
                    return Err(fail(Step::Binds));
                }
                for (path, dir) in &sk.entries {
                    let made = if *dir {
                        libc::mkdir(path.as_ptr(), 0o755) == 0
                            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST)
                    } else {
                        let fd = libc::open(
                            path.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                            0o644,
                        );
                        fd >= 0 && libc::close(fd) == 0
                    };
                    if !made {
                        return Err(fail(Step::Binds));
                    }
                }
            }
            for b in &self.binds {
                let placed = match &b.mount {
                    Some(fd) => {
                        libc::syscall(
                            libc::SYS_move_mount,
                            fd.as_raw_fd(),
                            c"".as_ptr(),
                            libc::AT_FDCWD,
                            b.target.as_ptr(),
                            MOVE_MOUNT_F_EMPTY_PATH,
                        ) == 0
                    }
                    None => {
                        libc::mount(
                            b.target.as_ptr(),
                            b.target.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        ) == 0
                            && (!b.read_only || set_attr(&b.target, MOUNT_ATTR_RDONLY, 0) == 0)
                    }
                };
                if !placed {
                    return Err(fail(Step::Binds));
                }
            }
            // After the binds: a declared directory may hold one.
            for dir in &self.hidden {
                if !empty_tmpfs(dir) && !absent() {
                    return Err(fail(Step::Hide));
                }
            }
            // The skeletons hold only the way in: nothing is kept in them.
            for sk in self.skeletons.iter().filter(|sk| !sk.private) {
                if set_attr(&sk.dir, MOUNT_ATTR_RDONLY, 0) != 0 {
                    return Err(fail(Step::Binds));
                }
            }
            if let Some(cwd) = cwd {
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(fail(Step::WorkingDirectory));
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

/// `mount_setattr(2)` (Linux 5.12) of `path` (`flags`: `AT_RECURSIVE` for its whole tree):
/// 0, or -1 with errno set.
///
/// # Safety
///
/// A system call on a C string: safe anywhere, also between clone and exec.
unsafe fn set_attr(path: &CStr, set: u64, flags: libc::c_uint) -> libc::c_long {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a C string and a struct on this stack, sized as passed.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    }
}

/// Mounts an empty, read-only tmpfs on `dir`: whether it could (errno set when not).
///
/// # Safety
///
/// A system call on C strings: safe anywhere, also between clone and exec.
unsafe fn empty_tmpfs(dir: &CStr) -> bool {
    // SAFETY: C strings only.
    unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            dir.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"size=0,mode=000".as_ptr().cast(),
        ) == 0
    }
}

/// Mounts a tmpfs for a [`Skeleton`] on `dir`: a private temporary directory, or a way in
/// searchable by all. Whether it could.
///
/// # Safety
///
/// A system call on C strings: safe anywhere, also between clone and exec.
unsafe fn skeleton_tmpfs(dir: &CStr, private: bool) -> bool {
    let (flags, data) = if private {
        (libc::MS_NOSUID | libc::MS_NODEV, c"mode=1777")
    } else {
        (
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"size=64k,mode=755",
        )
    };
    // SAFETY: C strings only.
    unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            dir.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            data.as_ptr().cast(),
        ) == 0
    }
}

/// The [`Skeleton`]s of root's sandbox: each of `private` that exists (unless declared itself),
/// with the way to every declared path below it; and for a declared path elsewhere, its highest
/// ancestor (below `/`) that others may not search, unless a declared path holds it already.
fn skeletons(paths: &[(PathBuf, Access)], private: &[&str]) -> std::io::Result<Vec<Skeleton>> {
    use std::os::unix::fs::PermissionsExt;
    let declared = |p: &Path| paths.iter().any(|(d, _)| p.starts_with(d));
    // (top, private, the paths to make in it and whether each is a directory)
    type Way = (PathBuf, bool, Vec<(PathBuf, bool)>);
    let mut out: Vec<Way> = private
        .iter()
        .map(Path::new)
        .filter(|p| p.is_dir() && !declared(p))
        .map(|p| (p.to_owned(), true, Vec::new()))
        .collect();
    for (path, _) in paths {
        let in_private = out
            .iter()
            .find(|(t, private, _)| *private && path.starts_with(t) && path != t)
            .map(|(t, _, _)| t.clone());
        let closed = || {
            path.ancestors()
                .skip(1)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .find(|a| {
                    *a != Path::new("/")
                        && !declared(a)
                        && std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 == 0)
                })
                .map(Path::to_owned)
        };
        let Some(top) = in_private.or_else(closed) else {
            continue;
        };
        let is_dir = std::fs::metadata(path)?.is_dir();
        let mut entries: Vec<(PathBuf, bool)> = path
            .ancestors()
            .skip(1)
            .take_while(|a| *a != top)
            .map(|a| (a.to_owned(), true))
            .collect();
        entries.reverse();
        entries.push((path.clone(), is_dir));
        match out.iter_mut().find(|(t, _, _)| *t == top) {
            Some((_, _, all)) => all.extend(entries),
            None => out.push((top, false, entries)),
        }
    }
    out.into_iter()
        .map(|(dir, private, entries)| {
            Ok(Skeleton {
                dir: c(&dir)?,
                private,
                entries: entries
                    .iter()
                    .map(|(p, d)| Ok((c(p)?, *d)))
                    .collect::<std::io::Result<_>>()?,
            })
        })
        .collect()
}

/// Writes `maps` for the user namespace of process `pid`.
fn write_maps(pid: i32, maps: &UserMaps) -> std::io::Result<()> {
    let write = |file: &str, data: &[u8]| std::fs::write(format!("/proc/{pid}/{file}"), data);
    if maps.deny_setgroups {
        write("setgroups", b"deny")?;
    }
    write("uid_map", &maps.uid_map)?;
    write("gid_map", &maps.gid_map)
}

/// Root's declared directories as idmapped mounts of a user namespace with the sandbox's own
/// maps: there, a file of host uid N is the sandbox's uid N, so host root's files are its
/// root's. Made here, detached (`open_tree(OPEN_TREE_CLONE)`, with the mounts below each), for
/// the child to move into place in its mount namespace.
fn idmapped_binds(maps: &UserMaps, paths: &[(PathBuf, Access)]) -> std::io::Result<Vec<Bind>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let userns = user_namespace_with(maps)?;
    paths
        .iter()
        .map(|(path, access)| {
            let target = c(path)?;
            let explain = |what: &str, e: std::io::Error| {
                std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
            };
            // SAFETY: a C string and flags; the returned fd is new and ours.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    target.as_ptr(),
                    OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
                )
            };
            if fd < 0 {
                return Err(explain(
                    "cannot clone the mount of",
                    std::io::Error::last_os_error(),
                ));
            }
            // SAFETY: open_tree returned a new fd that nothing else owns.
            let mount = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
            let mut set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
            if *access == Access::ReadOnly {
                set |= MOUNT_ATTR_RDONLY;
            }
            let attr = MountAttr {
                attr_set: set,
                attr_clr: 0,
                propagation: 0,
                userns_fd: userns.as_raw_fd() as u64,
            };
            // SAFETY: the detached mount's fd, an empty C string, a struct on this stack.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_mount_setattr,
                    mount.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                )
            };
            if r != 0 {
                return Err(explain(
                    "cannot make an idmapped mount (Linux 5.12+, a file system that allows \
                     it: ext4, xfs, btrfs, tmpfs on 6.3+, …) of",
                    std::io::Error::last_os_error(),
                ));
            }
            Ok(Bind {
                target,
                mount: Some(mount),
                read_only: *access == Access::ReadOnly,
            })
        })
        .collect()
}

/// A user namespace with `maps`, for idmapped mounts: a child made only to hold it, cloned
/// into it, its maps written, its namespace opened, and the child gone.
fn user_namespace_with(maps: &UserMaps) -> std::io::Result<OwnedFd> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let mut pidfd: std::os::fd::RawFd = -1;
    let mut args = super::clone_args::CloneArgs {
        flags: libc::CLONE_NEWUSER as u64 | super::clone_args::CLONE_PIDFD,
        pidfd: &mut pidfd as *mut std::os::fd::RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    // SAFETY: without CLONE_VM the child gets a copy of this address space, like fork(2); it
    // only waits on the pipe and exits, system calls on fds it inherited.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut super::clone_args::CloneArgs,
            std::mem::size_of::<super::clone_args::CloneArgs>(),
        )
    };
    if ret == 0 {
        // SAFETY: in the child: blocks until the parent closes the write end, then exits
        // without running anything of the parent's.
        unsafe {
            libc::close(write.as_raw_fd());
            let mut b = 0u8;
            libc::read(read.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: CLONE_PIDFD stored a new fd that nothing else owns.
    let pidfd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pidfd) };
    let pid = ret as i32;
    let ns = write_maps(pid, maps)
        .and_then(|()| std::fs::File::open(format!("/proc/{pid}/ns/user")).map(OwnedFd::from));
    drop(write);
    // The child exits at the pipe's EOF; reaped through its pidfd (anyone reaping every child
    // may have taken it first: ECHILD is fine).
    let _ = rustix::process::waitid(
        rustix::process::WaitId::PidFd(std::os::fd::AsFd::as_fd(&pidfd)),
        rustix::process::WaitIdOptions::EXITED,
    );
    ns
}

/// The maps for this caller. Root: the sandbox's ids `0..count` onto `ids` (required).
/// Anyone else: their effective uid and gid onto themselves, the only map an unprivileged
/// writer may write.
fn user_maps(ids: Option<IdRange>) -> std::io::Result<UserMaps> {
    let uid = rustix::process::geteuid();
    if !uid.is_root() {
        let uid = uid.as_raw();
        let gid = rustix::process::getegid().as_raw();
        return Ok(UserMaps {
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            deny_setgroups: true,
            become_root: false,
        });
    }
    let Some(ids) = ids else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a root sandbox needs a range of unprivileged host ids for its own",
        ));
    };
    let map = format!("0 {} {}\n", ids.base, ids.count).into_bytes();
    Ok(UserMaps {
        uid_map: map.clone(),
        gid_map: map,
        deny_setgroups: false,
        become_root: true,
    })
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
    fn root_maps_the_sandbox_onto_its_range_and_becomes_its_root() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let m = user_maps(Some(IdRange {
            base: 0x0008_0000,
            count: 65536,
        }))
        .unwrap();
        assert_eq!(m.uid_map, b"0 524288 65536\n");
        assert_eq!(m.gid_map, b"0 524288 65536\n");
        assert!(m.become_root && !m.deny_setgroups);
        // Never root's own ids again.
        assert!(user_maps(None).is_err());
    }

    #[test]
    fn the_mask_holds_sys_admin() {
        let plan = SandboxPlan::new(&SandboxSpec {
            ids: Some(IdRange {
                base: 0x0008_0000,
                count: 65536,
            }),
            ..SandboxSpec::default()
        })
        .unwrap();
        assert_ne!(plan.drop_mask & Capability::CAP_SYS_ADMIN.bitmask(), 0);
        assert!(plan
            .read_only
            .iter()
            .any(|p| p.as_bytes() == b"/sys" || !Path::new("/sys").is_dir()));
        assert!(
            !Path::new("/proc/sysrq-trigger").exists()
                || plan
                    .bind_read_only
                    .iter()
                    .any(|p| p.as_bytes() == b"/proc/sysrq-trigger")
        );
    }
}

//! What containment works on this machine, and why: the findings `reaper doctor` prints, made
//! by trying (a run cgroup really created and removed, a leader really started in the sandbox,
//! which tries each route out of its cgroup).

use std::path::PathBuf;

use crate::containment::{select, BackendKind};
use crate::ContainError;

#[cfg(target_os = "linux")]
use crate::containment::cgroup::{create, delegate, limits, place, CgroupBackend};
#[cfg(target_os = "linux")]
use crate::containment::Backend;

/// Everything [`diagnose`] found, by trying.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Findings {
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// How cgroups are mounted; `None`: no cgroup2 found.
    pub cgroup_mode: Option<CgroupMode>,
    /// Where cgroup2 is mounted.
    pub cgroup2_mount: Option<PathBuf>,
    /// This process's cgroup, as `/proc/self/cgroup` names it.
    pub own_cgroup: Option<String>,
    /// The same, as a directory.
    pub own_cgroup_dir: Option<PathBuf>,
    /// Under systemd: what asking the service manager for a delegated scope did.
    pub delegation: Option<String>,
    /// The delegated unit run cgroups are created in, when there is one.
    pub delegated_unit: Option<String>,
    /// The controllers available in the cgroup run cgroups are made in.
    pub controllers: Vec<String>,
    /// The controllers enabled for its children.
    pub subtree_control: Vec<String>,
    /// The controllers a run's limits can use here (`memory`, `pids`, `cpu`).
    pub limit_controllers: Vec<String>,
    /// Why the others cannot be used.
    pub limits_error: Option<ContainError>,
    /// Whether a run cgroup could be created (and was removed again).
    pub cgroup_writable: bool,
    /// Why no run cgroup could be created.
    pub cgroup_error: Option<ContainError>,
    /// The test cgroup could not be removed.
    pub release_error: Option<ContainError>,
    /// Whether `cgroup.kill` exists (Linux 5.14).
    pub cgroup_kill: bool,
    /// Whether leaders can be created inside their cgroup (`clone3(CLONE_INTO_CGROUP)`);
    /// otherwise they join through `cgroup.procs`, ~10 ms slower per run.
    pub clone_into_cgroup: bool,
    /// What the kernel said to `clone3(CLONE_INTO_CGROUP)`, when it refused.
    pub clone_into_cgroup_error: Option<String>,
    /// Whether pidfds work (Linux 5.3).
    pub pidfd: bool,
    /// Whether this process may become a child subreaper (asked of a forked child: this
    /// process stays as it was).
    pub subreaper: bool,
    /// Whether the pgid backend can read the process table here.
    pub pgid: bool,
    /// Where it reads it from, when there is one.
    pub pgid_table: Option<String>,
    /// Why there is no process table (`pgid_table` is `None`), or why it cannot be read.
    pub pgid_error: Option<String>,
    /// `/proc` shows another PID namespace than this process's.
    pub foreign_proc: bool,
    /// The backend [`crate::Containment::Auto`] picks here; `None`: no backend works.
    pub auto_backend: Option<BackendKind>,
    /// Signs of a container, and what containment they leave.
    pub container: Container,
    /// Which parts of the sandbox this machine allows (Linux).
    pub sandbox: SandboxFindings,
}

/// How cgroups are mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    /// cgroup v2 alone.
    Unified,
    /// cgroup v1 controllers beside cgroup v2.
    Hybrid,
}

/// The sandbox here: a leader really started in it, in a run cgroup, as a run would.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SandboxFindings {
    /// The sandbox works.
    pub available: bool,
    /// The sandbox with a PID namespace works.
    pub pid_available: bool,
    /// Each part, in the order the leader sets them up.
    pub parts: Vec<SandboxPart>,
    /// Whether an unprivileged process may create a user namespace (not part of the sandbox:
    /// inside it the command may still make one, and finds the cgroup file system locked
    /// read-only there). `None`: unknown.
    pub unprivileged_user_namespaces: Option<bool>,
    /// Each route out of a run's cgroup, tried from inside a sandbox here.
    pub routes: Vec<SandboxRoute>,
    /// Whether cgroup2 is mounted with `nsdelegate` (the kernel then refuses any move across
    /// a cgroup namespace's root itself); the sandbox does not need it.
    pub nsdelegate: bool,
}

/// One part of the sandbox, and whether this machine allows it.
#[derive(Debug)]
#[non_exhaustive]
pub struct SandboxPart {
    /// The part (`user namespace`).
    pub part: &'static str,
    /// What trying it found.
    pub status: PartStatus,
}

/// What trying one part of the sandbox found.
#[derive(Debug)]
#[non_exhaustive]
pub enum PartStatus {
    /// It works.
    Works,
    /// The kernel refused a step of it.
    #[cfg(target_os = "linux")]
    Refused {
        /// The step.
        step: crate::SandboxStep,
        /// Its errno.
        errno: i32,
    },
    /// It could not be tried (the clone itself failed, or the cgroup2 mount's path has a NUL
    /// byte).
    Failed(String),
    /// An earlier part failed.
    Untested,
    /// Not tried: the probe needs `clone3(CLONE_INTO_CGROUP)`.
    NeedsClone3,
    /// Not tried: the sandbox needs the cgroup backend.
    NeedsCgroupBackend,
}

/// One way out of the run's cgroup, and what the kernel said when the probe tried it.
#[derive(Debug)]
#[non_exhaustive]
pub struct SandboxRoute {
    /// The route (`clone3(CLONE_INTO_CGROUP)`).
    pub route: &'static str,
    /// What the probe found.
    pub status: RouteStatus,
}

/// What the kernel said to one route out of the run's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteStatus {
    /// The route works: the sandbox leaves it open.
    Open,
    /// The self-check did not say (counted as open).
    Unknown,
    /// This kernel has no such route.
    Absent,
    /// Refused with `errno`, by what `by` names (`seccomp`, `read-only mount, unprivileged
    /// root`).
    Closed {
        /// What closes it.
        by: &'static str,
        /// The kernel's errno.
        errno: i32,
    },
}

impl RouteStatus {
    /// The kernel refused the route, or has none.
    pub fn is_closed(self) -> bool {
        matches!(self, RouteStatus::Absent | RouteStatus::Closed { .. })
    }
}

/// What a container changes for reaper (Linux).
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Container {
    /// This process is PID 1 of its PID namespace: when it exits, the kernel kills every
    /// process left in the namespace, so the namespace itself contains the tree.
    pub pid1: bool,
    /// In a PID namespace other than the machine's.
    pub pid_namespace: bool,
    /// In a cgroup namespace other than the machine's.
    pub cgroup_namespace: bool,
    /// The cgroup2 file system is mounted read-only (Docker's and Kubernetes' default).
    pub cgroupfs_read_only: bool,
}

/// Finds what containment works here, by trying: what [`Findings`] lists.
///
/// Under systemd it asks for a delegated scope as a run would (the scope ends when this process
/// exits). `guardian`: the one to tell about the probe's cgroup, so that a process killed
/// during the probe leaves none (as a run's would). Call it outside any tokio runtime: it makes
/// its own for the delegation.
#[cfg(target_os = "linux")]
pub fn diagnose(delegation: crate::Delegation, guardian: Option<&crate::Guardian>) -> Findings {
    let mut r = Findings {
        kernel: kernel(),
        ..Default::default()
    };
    let me = rustix::process::getpid();
    r.pidfd = rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty()).is_ok();
    // Asked of a forked child: this process stays what it was (a child subreaper keeps every
    // orphan of the program's own children).
    r.subreaper = reaper_platform::reap::may_become_subreaper().unwrap_or(false);
    match reaper_platform::process::table() {
        Ok(mut t) => {
            r.pgid_table = Some(t.name().to_owned());
            match t.snapshot() {
                Ok(_) => r.pgid = r.pidfd,
                Err(e) => r.pgid_error = Some(e.to_string()),
            }
        }
        Err(e) => r.pgid_error = Some(e.to_string()),
    }
    // As a run would: under systemd, first a delegated scope of reaper's own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let delegation = runtime.map(|rt| {
        rt.block_on(delegate::ensure(delegation == crate::Delegation::Auto))
            .clone()
    });
    let refused = match delegation {
        Ok(d) => {
            r.delegation = Some(d.describe());
            r.delegated_unit = d.unit().map(str::to_owned);
            match d {
                delegate::Delegated::Failed { why } => Some(why),
                _ => None,
            }
        }
        Err(e) => Some(format!("cannot start the async runtime: {e}")),
    };
    match place::discover() {
        Err(e) => r.cgroup_error = Some(e),
        Ok(env) => {
            r.cgroup_mode = Some(if env.hybrid {
                CgroupMode::Hybrid
            } else {
                CgroupMode::Unified
            });
            r.cgroup2_mount = Some(env.mount.mount_point.clone());
            r.own_cgroup = Some(env.own_path.clone());
            r.own_cgroup_dir = Some(env.own_dir.clone());
            let own = reaper_platform::linux::cgroup::Cgroup::at(&env.own_dir);
            r.controllers = own.controllers().unwrap_or_default();
            r.subtree_control = own.subtree_control().unwrap_or_default();
            let placement = match refused {
                Some(why) => Err(crate::ContainError::new(
                    crate::ContainErrorKind::NotDelegated,
                    why,
                )),
                None => env.placement(None),
            };
            if let Ok(p) = &placement {
                limit_controllers(&mut r, &env, p);
            }
            let created = placement.and_then(|p| {
                if let Some(g) = &guardian {
                    crate::containment::Watcher::watch(*g, &p.dir);
                }
                create::create_run_cgroup(&p).and_then(CgroupBackend::new)
            });
            match created {
                Ok(mut b) => {
                    r.cgroup_writable = true;
                    r.cgroup_kill = b.cgroup().has_kill();
                    match crate::containment::spawn::probe_clone3(b.dir_fd()) {
                        Ok(()) => r.clone_into_cgroup = true,
                        Err(e) => r.clone_into_cgroup_error = Some(e.to_string()),
                    }
                    if r.clone_into_cgroup {
                        r.sandbox =
                            probe_sandbox(b.dir_fd(), &env.mount.mount_point.display().to_string());
                    }
                    if let Err(e) = b.release() {
                        r.release_error = Some(e);
                    }
                }
                Err(e) => r.cgroup_error = Some(e),
            }
        }
    }
    container(&mut r);
    r.foreign_proc = reaper_platform::linux::procfs::is_foreign();
    r.sandbox.unprivileged_user_namespaces =
        reaper_platform::linux::namespaces::unprivileged_userns();
    r.sandbox.nsdelegate = std::fs::read_to_string("/proc/self/mountinfo")
        .is_ok_and(|mi| reaper_platform::linux::mountinfo::cgroup2_nsdelegate(&mi));
    if r.sandbox.parts.is_empty() {
        r.sandbox.parts = SANDBOX_PARTS
            .iter()
            .map(|&part| SandboxPart {
                part,
                status: if r.cgroup_writable {
                    PartStatus::NeedsClone3
                } else {
                    PartStatus::NeedsCgroupBackend
                },
            })
            .collect();
    }
    r.auto_backend = select::auto_choice(select::Found {
        run_cgroup: r.cgroup_writable,
        subreaper: r.subreaper,
        pidfd: r.pidfd,
        pgid: r.pgid,
    });
    r
}

/// Whether a run of this process gets a cgroup of its own here as things are, without asking
/// systemd for a delegated scope: a run cgroup is created where it would be, and removed.
pub fn cgroup_writable() -> bool {
    #[cfg(target_os = "linux")]
    {
        place::discover()
            .and_then(|env| env.placement(None))
            .and_then(|p| create::create_run_cgroup(&p).and_then(CgroupBackend::new))
            .map(|mut b| {
                let _ = b.release();
            })
            .is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// The parts of the sandbox, in the order a leader sets them up.
#[cfg(target_os = "linux")]
const SANDBOX_PARTS: &[&str] = &[
    "user namespace",
    "mount namespace",
    "cgroup namespace",
    "read-only cgroup fs",
    "masked kernel files",
    "unprivileged root",
    "no new privileges",
    "capability dropping",
    "seccomp filter",
    "PID namespace",
];

/// The routes out of a run's cgroup that the sandbox's self-check tries, and why each is
/// closed when it is.
#[cfg(target_os = "linux")]
const ROUTES: [(&str, &str); 6] = [
    (
        "a write to the cgroup2 root's cgroup.procs",
        "read-only mount, unprivileged root",
    ),
    ("clone3(CLONE_INTO_CGROUP) into the cgroup2 root", "seccomp"),
    (
        "a new cgroup namespace (for a writable cgroup2 mount)",
        "seccomp",
    ),
    (
        "/proc/PID/root of a process outside the run",
        "a user namespace of its own",
    ),
    (
        "a write to a host directory of root's (where the kernel's helpers live: /sbin)",
        "unprivileged root",
    ),
    (
        "/proc/sysrq-trigger (signals, OOM kills, reboots the machine)",
        "read-only",
    ),
];

/// What the self-check writes: each route's errno (0: it worked), then its user namespace's
/// inode.
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Verdicts {
    errno: [i32; 6],
    userns: u64,
}

/// The self-check a leader in the sandbox runs instead of a program: tries each of [`ROUTES`]
/// and writes [`Verdicts`] to its stdout. Between clone and exec: system calls on strings made
/// before, no allocation. A route that works does no harm: the `cgroup.procs` is opened, never
/// written; the clone3 child exits at once; the new cgroup namespace is the check's alone.
#[cfg(target_os = "linux")]
struct SelfCheck {
    procs: std::ffi::CString,
    root: std::ffi::CString,
    outside_root: std::ffi::CString,
}

#[cfg(target_os = "linux")]
impl SelfCheck {
    fn new(cg2: &str) -> Option<SelfCheck> {
        let c = |s: String| std::ffi::CString::new(s).ok();
        Some(SelfCheck {
            procs: c(format!("{cg2}/cgroup.procs"))?,
            root: c(cg2.to_owned())?,
            // This process, outside the sandbox.
            outside_root: c(format!("/proc/{}/root/", std::process::id()))?,
        })
    }

    fn run(&self) -> i32 {
        let errno = || {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        let mut v = Verdicts::default();
        // SAFETY: open(2), close(2), unshare(2), stat(2) and write(2) on C strings built before
        // the clone and on locals; nothing allocates.
        unsafe {
            let open = |path: &std::ffi::CString, flags| {
                let fd = libc::open(path.as_ptr(), flags | libc::O_CLOEXEC);
                if fd < 0 {
                    errno()
                } else {
                    libc::close(fd);
                    0
                }
            };
            v.errno[0] = open(&self.procs, libc::O_WRONLY);
            let dir = libc::open(
                self.root.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            v.errno[1] = if dir < 0 {
                errno()
            } else {
                let r = reaper_platform::linux::spawn::try_clone_into(
                    std::os::fd::BorrowedFd::borrow_raw(dir),
                );
                libc::close(dir);
                match r {
                    Ok(()) => 0,
                    Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
                }
            };
            v.errno[2] = if libc::unshare(libc::CLONE_NEWCGROUP) == 0 {
                0
            } else {
                errno()
            };
            v.errno[3] = open(&self.outside_root, libc::O_RDONLY | libc::O_DIRECTORY);
            // access(2) answers for the caller's real ids, as a write would be judged; nothing
            // is written. "/" is root's on every host.
            let writable = |path: &std::ffi::CStr| {
                if libc::access(path.as_ptr(), libc::W_OK) == 0 {
                    0
                } else {
                    errno()
                }
            };
            v.errno[4] = writable(c"/");
            v.errno[5] = writable(c"/proc/sysrq-trigger");
            let mut st: libc::stat = std::mem::zeroed();
            if libc::stat(c"/proc/self/ns/user".as_ptr(), &mut st) == 0 {
                v.userns = st.st_ino;
            }
            let bytes = std::slice::from_raw_parts(
                (&v as *const Verdicts).cast::<u8>(),
                std::mem::size_of::<Verdicts>(),
            );
            libc::write(1, bytes.as_ptr().cast(), bytes.len());
        }
        0
    }
}

/// Starts a leader in the whole sandbox, then in the sandbox with a PID namespace, and says
/// which part the kernel refused; the first one tries every route out from inside.
#[cfg(target_os = "linux")]
fn probe_sandbox(cgroup: std::os::fd::BorrowedFd<'_>, cg2: &str) -> SandboxFindings {
    use crate::containment::spawn::{probe_sandbox, ProbeError};
    use reaper_platform::linux::sandbox::Step;
    let part_of = |s: Step| match s {
        Step::UserNamespace | Step::UserMaps => 0,
        Step::MountNamespace | Step::Binds | Step::WorkingDirectory => 1,
        Step::CgroupNamespace => 2,
        Step::PrivateMounts | Step::ReadOnly => 3,
        Step::Mask | Step::Hide => 4,
        Step::Identity => 5,
        Step::NoNewPrivs => 6,
        Step::CapabilityBounding | Step::CapabilityAmbient | Step::Capabilities => 7,
        Step::Seccomp => 8,
        Step::ProcMount => 9,
    };
    let pid_part = SANDBOX_PARTS.len() - 1;
    let mut status: Vec<PartStatus> = SANDBOX_PARTS.iter().map(|_| PartStatus::Untested).collect();
    let works = |status: &mut [PartStatus]| status.iter_mut().for_each(|s| *s = PartStatus::Works);
    let mut r = SandboxFindings::default();
    let Some(check) = SelfCheck::new(cg2) else {
        status[0] = PartStatus::Failed("a NUL byte in the cgroup2 mount's path".into());
        r.parts = parts(status);
        return r;
    };
    match probe_sandbox(cgroup, false, &|| check.run()) {
        Ok(out) => {
            r.available = true;
            works(&mut status[..pid_part]);
            r.routes = routes(&out);
        }
        Err(ProbeError::Sandbox(e)) => {
            let k = part_of(e.step);
            works(&mut status[..k]);
            status[k] = PartStatus::Refused {
                step: e.step,
                errno: e.errno,
            };
        }
        Err(ProbeError::Other(m)) => status[0] = PartStatus::Failed(m.to_string()),
    }
    if r.available {
        match probe_sandbox(cgroup, true, &|| 0) {
            Ok(_) => {
                r.pid_available = true;
                status[pid_part] = PartStatus::Works;
            }
            Err(ProbeError::Sandbox(e)) => {
                status[pid_part] = PartStatus::Refused {
                    step: e.step,
                    errno: e.errno,
                }
            }
            // The clone itself (CLONE_NEWPID) was refused.
            Err(ProbeError::Other(m)) => status[pid_part] = PartStatus::Failed(m.to_string()),
        }
    }
    r.parts = parts(status);
    r
}

#[cfg(target_os = "linux")]
fn parts(status: Vec<PartStatus>) -> Vec<SandboxPart> {
    SANDBOX_PARTS
        .iter()
        .zip(status)
        .map(|(&part, status)| SandboxPart { part, status })
        .collect()
}

/// The self-check's verdicts as routes; a route it did not report is not closed.
#[cfg(target_os = "linux")]
fn routes(out: &[u8]) -> Vec<SandboxRoute> {
    let mut v = Verdicts::default();
    let size = std::mem::size_of::<Verdicts>();
    let whole = out.len() == size;
    if whole {
        // SAFETY: exactly `size` bytes, written by the check from a `Verdicts` of this same
        // build; every bit pattern is a valid `Verdicts` (integers only).
        unsafe {
            std::ptr::copy_nonoverlapping(
                out.as_ptr(),
                (&mut v as *mut Verdicts).cast::<u8>(),
                size,
            );
        }
    }
    let own_userns = std::fs::metadata("/proc/self/ns/user").map_or(0, |m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });
    ROUTES
        .iter()
        .zip(v.errno)
        .enumerate()
        .map(|(i, (&(route, because), errno))| {
            let status = if !whole {
                RouteStatus::Unknown
            } else if errno == 0 {
                RouteStatus::Open
            } else if i == 5 && errno == libc::ENOENT {
                RouteStatus::Absent
            } else {
                // The last route is closed by the user namespace only if there is one.
                let by = if i == 3 && v.userns == own_userns {
                    "capabilities"
                } else if i == 4 && !rustix::process::geteuid().is_root() {
                    "the user's own ids"
                } else {
                    because
                };
                RouteStatus::Closed { by, errno }
            };
            SandboxRoute { route, status }
        })
        .collect()
}

/// Signs of a container.
#[cfg(target_os = "linux")]
fn container(r: &mut Findings) {
    use reaper_platform::linux::namespaces;
    let c = &mut r.container;
    c.pid1 = namespaces::is_pid1();
    c.pid_namespace = namespaces::in_child_pid_namespace().unwrap_or(false);
    c.cgroup_namespace = namespaces::in_child_cgroup_namespace().unwrap_or(false);
    c.cgroupfs_read_only = r
        .cgroup2_mount
        .as_deref()
        .is_some_and(|m| namespaces::read_only(m).unwrap_or(false));
}

/// Which limits would work, as a run would check them (nothing is enabled).
#[cfg(target_os = "linux")]
fn limit_controllers(r: &mut Findings, env: &place::CgroupEnv, p: &place::Placement) {
    use crate::Limits;
    let one = [
        Limits {
            memory_max: Some(1),
            ..Limits::default()
        },
        Limits {
            pids_max: Some(1),
            ..Limits::default()
        },
        Limits {
            cpus: Some(1.0),
            ..Limits::default()
        },
    ];
    let mut errors = Vec::new();
    for l in one {
        match limits::check(
            &l,
            env,
            p,
            limits::ownership(false, delegate::done().is_some_and(|d| d.unit().is_some())),
        ) {
            Ok(_) => r
                .limit_controllers
                .extend(l.controllers().iter().map(|(c, _)| (*c).to_owned())),
            Err(e) => errors.push(e),
        }
    }
    // The reasons repeat per controller when they are the host's: one suffices.
    r.limits_error = errors.into_iter().next();
}

/// macOS: no cgroups, no child subreaper, no pidfd. The pgid backend is the one there is, if
/// `/bin/ps` can list the processes.
#[cfg(not(target_os = "linux"))]
pub fn diagnose(_delegation: crate::Delegation, _guardian: Option<&crate::Guardian>) -> Findings {
    let mut r = Findings {
        kernel: kernel(),
        ..Default::default()
    };
    match reaper_platform::process::table() {
        Ok(mut t) => {
            r.pgid_table = Some(t.name().to_owned());
            match t.snapshot() {
                Ok(_) => r.pgid = true,
                Err(e) => r.pgid_error = Some(e.to_string()),
            }
        }
        Err(e) => r.pgid_error = Some(e.to_string()),
    }
    r.auto_backend = select::auto_choice(select::Found {
        pgid: r.pgid,
        ..Default::default()
    });
    r
}

fn kernel() -> String {
    let u = rustix::system::uname();
    format!(
        "{} {}",
        u.sysname().to_string_lossy(),
        u.release().to_string_lossy()
    )
}

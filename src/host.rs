//! What containment works on this machine, and why: the findings `reaper doctor` prints, made
//! by trying (a run cgroup really created and removed, a leader really started in the sandbox,
//! which tries each route out of its cgroup).

use serde::Serialize;

use crate::containment::{select, BackendKind};

#[cfg(target_os = "linux")]
use crate::containment::cgroup::{create, delegate, limits, place, CgroupBackend};
#[cfg(target_os = "linux")]
use crate::containment::Backend;

/// Everything `reaper doctor` reports, found by trying.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// `unified` (pure v2), `hybrid` (v1 controllers + v2), or `none`.
    pub cgroup_mode: &'static str,
    /// Where cgroup2 is mounted.
    pub cgroup2_mount: Option<String>,
    /// This process's cgroup, as `/proc/self/cgroup` names it.
    pub own_cgroup: Option<String>,
    /// The same, as a directory.
    pub own_cgroup_dir: Option<String>,
    /// Under systemd: what asking the service manager for a delegated scope did.
    pub delegation: Option<String>,
    /// The delegated unit run cgroups are created in, when there is one.
    pub delegated_unit: Option<String>,
    /// The controllers available in the cgroup run cgroups are made in.
    pub controllers: Vec<String>,
    /// The controllers enabled for its children.
    pub subtree_control: Vec<String>,
    /// The controllers reaper can use for limits here (`memory` for --memory-max, `pids` for
    /// --pids-max, `cpu` for --cpus).
    pub limit_controllers: Vec<String>,
    /// Why the others cannot be used.
    pub limits_error: Option<String>,
    /// Whether a run cgroup could be created (and was removed again).
    pub cgroup_writable: bool,
    /// Whether `cgroup.kill` exists (Linux 5.14).
    pub cgroup_kill: bool,
    /// Whether leaders can be created inside their cgroup (`clone3(CLONE_INTO_CGROUP)`);
    /// otherwise they join through `cgroup.procs`, ~10 ms slower per run.
    pub clone_into_cgroup: bool,
    /// Why no run cgroup could be created.
    pub cgroup_error: Option<String>,
    /// Whether pidfds work (Linux 5.3).
    pub pidfd: bool,
    /// Whether this process may become a child subreaper (asked of a forked child: this
    /// process stays as it was).
    pub subreaper: bool,
    /// Whether the pgid backend can read the process table here.
    pub pgid: bool,
    /// Where it reads it from.
    pub pgid_table: Option<String>,
    /// Without a run cgroup: what tells `subreaper` and `pgid` apart, to choose between them.
    pub without_cgroup: Option<String>,
    /// The backend `--containment auto` picks here.
    pub auto_backend: &'static str,
    /// Why it picks that one.
    pub why: String,
    /// macOS: what the pgid backend, the only one there, does not contain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// Signs of a container, and what containment they leave.
    pub container: Container,
    /// Which parts of `--sandbox` this machine allows (Linux).
    pub sandbox: SandboxReport,
    /// What to do to get more containment here.
    pub hints: Vec<String>,
}

/// `--sandbox` here: a leader really started in it, in a run cgroup, as a run would.
#[derive(Debug, Default, Serialize)]
pub struct SandboxReport {
    /// `--sandbox` works.
    pub available: bool,
    /// `--sandbox=pid` works.
    pub pid_available: bool,
    /// Each part, in the order the leader sets them up: `yes`, `no: WHY`, or `untested` (an
    /// earlier part failed).
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

/// One way out of the run's cgroup, and what the kernel said when the probe tried it.
#[derive(Debug, Serialize)]
pub struct SandboxRoute {
    /// The route (`clone3(CLONE_INTO_CGROUP)`).
    pub route: &'static str,
    /// The kernel refused it.
    pub closed: bool,
    /// `closed (WHY)`, or `OPEN`.
    pub status: String,
}

/// One part of the sandbox, and whether this machine allows it.
#[derive(Debug, Serialize)]
pub struct SandboxPart {
    /// The part (`user namespace`).
    pub part: &'static str,
    /// `yes`, `no: WHY`, or `untested`.
    pub status: String,
}

/// What a container changes for reaper (Linux).
#[derive(Debug, Default, Serialize)]
pub struct Container {
    /// reaper is PID 1 of its PID namespace: when it exits, the kernel kills every process left
    /// in the namespace, so the namespace itself contains the tree.
    pub pid1: bool,
    /// In a PID namespace other than the machine's.
    pub pid_namespace: bool,
    /// In a cgroup namespace other than the machine's (`--cgroupns=private`).
    pub cgroup_namespace: bool,
    /// The cgroup2 file system is mounted read-only (Docker's and Kubernetes' default).
    pub cgroupfs_read_only: bool,
}

#[cfg(target_os = "linux")]
///
/// Under systemd it asks for a delegated scope as a run would (the scope ends when this process
/// exits). `guardian`: the one to tell about the probe's cgroup, so that a process killed
/// during the probe leaves none (as a run's would). Call it outside any tokio runtime: it makes
/// its own for the delegation.
pub fn diagnose(delegation: crate::Delegation, guardian: Option<&crate::Guardian>) -> Report {
    let mut r = Report {
        kernel: kernel(),
        cgroup_mode: "none",
        ..Default::default()
    };
    let me = rustix::process::getpid();
    r.pidfd = rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty()).is_ok();
    // Asked of a forked child: this process stays what it was (a child subreaper keeps every
    // orphan of the program's own children).
    r.subreaper = reaper_platform::linux::subreaper::allowed().unwrap_or(false);
    match reaper_platform::process::table() {
        Ok(mut t) => {
            r.pgid_table = Some(t.name().to_owned());
            match t.snapshot() {
                Ok(_) => r.pgid = r.pidfd,
                Err(e) => r.hints.push(format!(
                    "the pgid backend cannot read the process table: {e}"
                )),
            }
        }
        Err(e) => r
            .hints
            .push(format!("the pgid backend has no process table here: {e}")),
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
        Err(e) => r.cgroup_error = Some(e.to_string()),
        Ok(env) => {
            r.cgroup_mode = if env.hybrid { "hybrid" } else { "unified" };
            r.cgroup2_mount = Some(env.mount.mount_point.display().to_string());
            r.own_cgroup = Some(env.own_path.clone());
            r.own_cgroup_dir = Some(env.own_dir.display().to_string());
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
                        Err(e) => r.hints.push(format!(
                            "clone3(CLONE_INTO_CGROUP) {e} (Linux 5.7+, not filtered by seccomp): leaders join through cgroup.procs instead, ~10 ms slower per run"
                        )),
                    }
                    if r.clone_into_cgroup {
                        r.sandbox =
                            probe_sandbox(b.dir_fd(), &env.mount.mount_point.display().to_string());
                    }
                    if let Err(e) = b.release() {
                        r.hints
                            .push(format!("could not remove the test cgroup: {e}"));
                    }
                }
                // doctor is what the hint would send the user to: the message without it.
                Err(e) => r.cgroup_error = Some(e.what().to_owned()),
            }
        }
    }
    container(&mut r);
    r.sandbox.unprivileged_user_namespaces =
        reaper_platform::linux::namespaces::unprivileged_userns();
    r.sandbox.nsdelegate = std::fs::read_to_string("/proc/self/mountinfo")
        .is_ok_and(|mi| reaper_platform::linux::mountinfo::cgroup2_nsdelegate(&mi));
    if r.sandbox.parts.is_empty() {
        let why = if r.cgroup_writable {
            "no: needs clone3(CLONE_INTO_CGROUP) to probe (--sandbox without =pid may still work)"
        } else {
            "no: needs the cgroup backend (the cgroup namespace is rooted at the run's cgroup)"
        };
        r.sandbox.parts = SANDBOX_PARTS
            .iter()
            .map(|&part| SandboxPart {
                part,
                status: why.into(),
            })
            .collect();
    }
    if !r.sandbox.available && rustix::process::geteuid().is_root() {
        r.hints.push(
            "--sandbox is impossible here (see `sandbox`): a root command can leave its run's \
             cgroup with one write to a cgroup.procs, and `reaper run` reports it as an escapee \
             at best"
                .into(),
        );
    }
    let auto = select::auto_choice(select::Found {
        run_cgroup: r.cgroup_writable,
        subreaper: r.subreaper,
        pidfd: r.pidfd,
        pgid: r.pgid,
    });
    r.auto_backend = auto.map_or("none", BackendKind::as_str);
    // The words for each choice (display only: the choice is selection's).
    if auto == Some(BackendKind::Cgroup) {
        r.why = format!(
            "run cgroups can be created under {} ({} cgroup2 at {})",
            r.own_cgroup_dir.as_deref().unwrap_or("?"),
            r.cgroup_mode,
            r.cgroup2_mount.as_deref().unwrap_or("?")
        );
        if !r.cgroup_kill {
            r.hints.push("cgroup.kill is missing (Linux < 5.14): reaper kills each process through its pidfd instead, which a fork storm can outrun for a moment".into());
        }
    } else if auto == Some(BackendKind::Subreaper) {
        r.without_cgroup = Some(without_cgroup(r.pgid));
        r.why = format!(
            "no run cgroup: {}",
            r.cgroup_error.as_deref().unwrap_or("pidfd unavailable")
        );
        r.hints.push(if r.cgroup_mode == "none" {
            "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) to get the cgroup backend".into()
        } else {
            format!(
                "to get the cgroup backend, give reaper a writable cgroup: run it in a delegated cgroup (systemd-run --user --scope -p Delegate=yes reaper …), or pass --cgroup-parent / REAPER_CGROUP_PARENT a cgroup you may write under {}",
                r.cgroup2_mount.as_deref().unwrap_or("the cgroup2 mount")
            )
        });
    } else {
        r.why = "neither a writable cgroup nor pidfds/subreaper are available".into();
        r.hints.push("reaper needs Linux 5.3+ (pidfd_open)".into());
    }
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
fn probe_sandbox(cgroup: std::os::fd::BorrowedFd<'_>, cg2: &str) -> SandboxReport {
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
    let mut status: Vec<String> = vec!["untested".into(); SANDBOX_PARTS.len()];
    let mut r = SandboxReport::default();
    let Some(check) = SelfCheck::new(cg2) else {
        status[0] = "no: a NUL byte in the cgroup2 mount's path".into();
        r.parts = parts(status);
        return r;
    };
    match probe_sandbox(cgroup, false, &|| check.run()) {
        Ok(out) => {
            r.available = true;
            status[..pid_part].fill("yes".into());
            r.routes = routes(&out);
        }
        Err(ProbeError::Sandbox(e)) => {
            let k = part_of(e.step);
            status[..k].fill("yes".into());
            status[k] = if matches!(e.step, Step::UserNamespace | Step::UserMaps) {
                format!("no: {e}")
            } else {
                format!("no: {}", std::io::Error::from_raw_os_error(e.errno))
            };
        }
        Err(ProbeError::Other(m)) => status[0] = format!("no: {m}"),
    }
    if r.available {
        match probe_sandbox(cgroup, true, &|| 0) {
            Ok(_) => {
                r.pid_available = true;
                status[pid_part] = "yes".into();
            }
            Err(ProbeError::Sandbox(e)) => {
                status[pid_part] = format!("no: {}", std::io::Error::from_raw_os_error(e.errno))
            }
            // The clone itself (CLONE_NEWPID) was refused.
            Err(ProbeError::Other(m)) => status[pid_part] = format!("no: {m}"),
        }
    }
    r.parts = parts(status);
    r
}

#[cfg(target_os = "linux")]
fn parts(status: Vec<String>) -> Vec<SandboxPart> {
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
                "OPEN (the self-check did not say)".to_owned()
            } else if errno == 0 {
                "OPEN".to_owned()
            } else if i == 5 && errno == libc::ENOENT {
                "closed (not on this kernel)".to_owned()
            } else {
                // The last route is closed by the user namespace only if there is one.
                let because = if i == 3 && v.userns == own_userns {
                    "capabilities"
                } else if i == 4 && !rustix::process::geteuid().is_root() {
                    "the user's own ids"
                } else {
                    because
                };
                format!(
                    "closed ({because}: {})",
                    reaper_platform::errno::strerror(&std::io::Error::from_raw_os_error(errno))
                )
            };
            SandboxRoute {
                route,
                closed: status.starts_with("closed"),
                status,
            }
        })
        .collect()
}

/// Signs of a container, what containment they leave, and what the user can change.
#[cfg(target_os = "linux")]
fn container(r: &mut Report) {
    use reaper_platform::linux::namespaces;
    let c = &mut r.container;
    c.pid1 = namespaces::is_pid1();
    c.pid_namespace = namespaces::in_child_pid_namespace().unwrap_or(false);
    c.cgroup_namespace = namespaces::in_child_cgroup_namespace().unwrap_or(false);
    c.cgroupfs_read_only = r
        .cgroup2_mount
        .as_deref()
        .is_some_and(|m| namespaces::read_only(std::path::Path::new(m)).unwrap_or(false));
    if c.cgroupfs_read_only {
        r.hints.push(
            "the cgroup file system is mounted read-only (a container's default): to get the \
             cgroup backend, run the container with a writable cgroup of its own (Docker: \
             --cgroupns=private with a writable /sys/fs/cgroup, or a delegated cgroup); or use \
             --containment pgid to run concurrent `reaper mcp` calls side by side"
                .into(),
        );
    }
    if reaper_platform::linux::procfs::is_foreign() {
        r.hints.push(
            "/proc shows another PID namespace than reaper's (entered without a /proc of its \
             own): the subreaper and pgid backends refuse to run here; mount a /proc for this \
             namespace (`unshare --pid --fork --mount-proc`; container runtimes do)"
                .into(),
        );
    }
    if c.pid1 {
        r.hints.push(
            "reaper is PID 1 of its PID namespace: when it exits, the kernel kills every process \
             left in the namespace, so nothing started inside outlives the container's reaper \
             whatever the backend; `reaper run` acts as the container's init (signals: \
             docs/containers.md)"
                .into(),
        );
    } else if c.pid_namespace && !r.cgroup_writable {
        r.hints.push(
            "in a PID namespace (a container?) without a writable cgroup: run reaper as the \
             container's PID 1 (ENTRYPOINT [\"reaper\", \"run\", \"--\", …]) so the namespace \
             itself contains the tree"
                .into(),
        );
    }
}

/// Which limits would work, as a run would check them (nothing is enabled).
#[cfg(target_os = "linux")]
fn limit_controllers(r: &mut Report, env: &place::CgroupEnv, p: &place::Placement) {
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
    r.limits_error = errors.into_iter().next().map(|e| e.to_string());
}

/// macOS: no cgroups, no child subreaper, no pidfd. The pgid backend is the one there is, if
/// `/bin/ps` can list the processes.
#[cfg(not(target_os = "linux"))]
pub fn diagnose(_delegation: crate::Delegation, _guardian: Option<&crate::Guardian>) -> Report {
    let mut r = Report {
        kernel: kernel(),
        cgroup_mode: "none",
        auto_backend: "none",
        ..Default::default()
    };
    match reaper_platform::process::table() {
        Ok(mut t) => {
            r.pgid_table = Some(t.name().to_owned());
            match t.snapshot() {
                Ok(_) => r.pgid = true,
                Err(e) => r.why = format!("the pgid backend cannot read the process table: {e}"),
            }
        }
        Err(e) => r.why = format!("the pgid backend has no process table here: {e}"),
    }
    let auto = select::auto_choice(select::Found {
        pgid: r.pgid,
        ..Default::default()
    });
    r.auto_backend = auto.map_or("none", BackendKind::as_str);
    if auto.is_some() {
        r.why = "macOS has no cgroups and no child subreaper: the leader gets a process group \
                 of its own, and the process table (/bin/ps) is read every --poll (50ms) to \
                 follow every process group and session the tree enters"
            .into();
        r.limits = Some(
            "a process that double-forks and calls setsid() between two reads of the table \
             escapes, and `reaper check` cannot report it either (shorter --poll makes that \
             rarer and costs CPU); if reaper itself is SIGKILLed the tree lives on (no \
             guardian without cgroups); signals go to pids whose start time was checked just \
             before (macOS has no pidfd)"
                .into(),
        );
    } else {
        r.hints
            .push("reaper lists processes with /bin/ps; check that it runs".into());
    }
    r
}

/// Without a run cgroup: what tells the subreaper and pgid backends apart (both contain a
/// setsid() escapee; they differ in what they cannot do). `pgid`: the process table can be
/// read here.
#[cfg(target_os = "linux")]
pub fn without_cgroup(pgid: bool) -> String {
    let mut s = "subreaper (what auto picks) catches every orphan of the tree, however fast it \
                 escapes, but treats all of reaper's runs as one tree: concurrent `reaper mcp` \
                 calls stop each other's processes, so mcp runs them one at a time"
        .to_owned();
    if pgid {
        s.push_str(
            "; --containment pgid follows each run's own tree by process group and session, \
             reading the process table every --poll (50ms), so concurrent calls stay apart, but \
             with several runs at once a process that double-forks and calls setsid() between \
             two reads escapes (with a single run reaper's subreaper adoption catches it too)",
        );
    }
    s
}

fn kernel() -> String {
    let u = rustix::system::uname();
    format!(
        "{} {}",
        u.sysname().to_string_lossy(),
        u.release().to_string_lossy()
    )
}

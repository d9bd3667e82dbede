//! `reaper doctor`: which containment works on this machine, and why.

use serde::Serialize;

use crate::containment::{select, BackendKind};

#[cfg(target_os = "linux")]
use crate::containment::setup;
#[cfg(target_os = "linux")]
use crate::containment::Containment;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as one JSON document on stdout.
    #[arg(long)]
    pub json: bool,

    /// As for `reaper run`: under systemd, whether to ask for a delegated scope (doctor really
    /// asks, as a run would, and the scope ends when doctor exits).
    #[arg(
        long,
        value_enum,
        env = "REAPER_DELEGATE",
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub delegate: crate::containment::select::DelegateMode,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub kernel: String,
    /// `unified` (pure v2), `hybrid` (v1 controllers + v2), or `none`.
    pub cgroup_mode: &'static str,
    pub cgroup2_mount: Option<String>,
    pub own_cgroup: Option<String>,
    pub own_cgroup_dir: Option<String>,
    /// Under systemd: what asking the service manager for a delegated scope did.
    pub delegation: Option<String>,
    /// The delegated unit run cgroups are created in, when there is one.
    pub delegated_unit: Option<String>,
    pub controllers: Vec<String>,
    pub subtree_control: Vec<String>,
    /// The controllers reaper can use for limits here (`memory` for --memory-max, `pids` for
    /// --pids-max, `cpu` for --cpus).
    pub limit_controllers: Vec<String>,
    /// Why the others cannot be used.
    pub limits_error: Option<String>,
    /// Whether a run cgroup could be created (and was removed again).
    pub cgroup_writable: bool,
    pub cgroup_kill: bool,
    /// Whether leaders can be created inside their cgroup (`clone3(CLONE_INTO_CGROUP)`);
    /// otherwise they join through `cgroup.procs`, ~10 ms slower per run.
    pub clone_into_cgroup: bool,
    pub cgroup_error: Option<String>,
    pub pidfd: bool,
    pub subreaper: bool,
    /// Whether the pgid backend can read the process table here, and from where.
    pub pgid: bool,
    pub pgid_table: Option<String>,
    /// Without a run cgroup: what tells `subreaper` and `pgid` apart, to choose between them.
    pub without_cgroup: Option<String>,
    /// The backend `--containment auto` picks here.
    pub auto_backend: &'static str,
    pub why: String,
    /// macOS: what the pgid backend, the only one there, does not contain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// Signs of a container, and what containment they leave.
    pub container: Container,
    /// Which parts of `--sandbox` this machine allows (Linux).
    pub sandbox: SandboxReport,
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
    pub route: &'static str,
    pub closed: bool,
    /// `closed (WHY)`, or `OPEN`.
    pub status: String,
}

#[derive(Debug, Serialize)]
pub struct SandboxPart {
    pub part: &'static str,
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
pub fn probe(delegate: crate::containment::select::DelegateMode) -> Report {
    let mut r = Report {
        kernel: kernel(),
        cgroup_mode: "none",
        ..Default::default()
    };
    let me = rustix::process::getpid();
    r.pidfd = rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty()).is_ok();
    r.subreaper = reaper_platform::linux::subreaper::become_subreaper().is_ok();
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
    let delegation = crate::cli::runtime().map(|rt| {
        rt.block_on(crate::containment::delegate::ensure(delegate))
            .clone()
    });
    let refused = match delegation {
        Ok(d) => {
            r.delegation = Some(d.describe());
            r.delegated_unit = d.unit().map(str::to_owned);
            match d {
                crate::containment::delegate::Delegation::Failed { why } => Some(why),
                _ => None,
            }
        }
        Err(e) => Some(format!("cannot start the async runtime: {e}")),
    };
    match setup::discover() {
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
                Some(why) => Err(crate::containment::Error::new(why)),
                None => env.placement(None),
            };
            if let Ok(p) = &placement {
                limit_controllers(&mut r, &env, p);
            }
            // A guardian, as a run has one: SIGKILLed during the probe, doctor leaves no cgroup.
            let guardian = crate::guardian::Guardian::spawn()
                .inspect_err(|e| tracing::debug!("no guardian for the probe: {e}"))
                .ok();
            let created = placement.and_then(|p| {
                if let Some(g) = &guardian {
                    g.watch_dir(&p.dir);
                }
                setup::create_run_cgroup(&p)
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
            if let Some(g) = &guardian {
                g.done();
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

/// The parts of the sandbox, in the order a leader sets them up.
#[cfg(target_os = "linux")]
const SANDBOX_PARTS: &[&str] = &[
    "user namespace",
    "mount namespace",
    "cgroup namespace",
    "read-only cgroup fs",
    "no new privileges",
    "capability dropping",
    "seccomp filter",
    "PID namespace",
];

/// The routes out of a run's cgroup that `reaper sandbox-probe` tries, as it names them, and
/// how doctor names them.
#[cfg(target_os = "linux")]
const ROUTES: &[(&str, &str)] = &[
    ("cgroup.procs", "a write to the cgroup2 root's cgroup.procs"),
    ("clone3", "clone3(CLONE_INTO_CGROUP) into the cgroup2 root"),
    (
        "cgroupns",
        "a new cgroup namespace (for a writable cgroup2 mount)",
    ),
    ("proc-root", "/proc/PID/root of a process outside the run"),
];

/// Starts a leader in the whole sandbox, then in the sandbox with a PID namespace, and says
/// which part the kernel refused; the first one tries every route out from inside.
#[cfg(target_os = "linux")]
fn probe_sandbox(cgroup: std::os::fd::BorrowedFd<'_>, cg2: &str) -> SandboxReport {
    use crate::containment::spawn::{probe_sandbox, ProbeError};
    use reaper_platform::linux::sandbox::Step;
    let part_of = |s: Step| match s {
        Step::UserNamespace | Step::UserMaps => 0,
        Step::MountNamespace => 1,
        Step::CgroupNamespace => 2,
        Step::PrivateMounts | Step::ReadOnly => 3,
        Step::NoNewPrivs => 4,
        Step::CapabilityBounding | Step::CapabilityAmbient | Step::Capabilities => 5,
        Step::Seccomp => 6,
        Step::ProcMount => 7,
    };
    let pid_part = SANDBOX_PARTS.len() - 1;
    let mut status: Vec<String> = vec!["untested".into(); SANDBOX_PARTS.len()];
    let mut r = SandboxReport::default();
    let me = std::process::id().to_string();
    let userns = std::fs::read_link("/proc/self/ns/user")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    match probe_sandbox(cgroup, false, &["sandbox-probe", cg2, &me, &userns]) {
        Ok(out) => {
            r.available = true;
            status[..pid_part].fill("yes".into());
            r.routes = routes(&String::from_utf8_lossy(&out));
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
        match probe_sandbox(cgroup, true, &["--version"]) {
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
    r.parts = SANDBOX_PARTS
        .iter()
        .zip(status)
        .map(|(&part, status)| SandboxPart { part, status })
        .collect();
    r
}

/// The probe's `ROUTE\tRESULT` lines as routes; a route it did not report is not closed.
#[cfg(target_os = "linux")]
fn routes(out: &str) -> Vec<SandboxRoute> {
    ROUTES
        .iter()
        .map(|&(name, route)| {
            let result = out
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('\t'))
                .unwrap_or("OPEN (the probe did not say)");
            let closed = result.starts_with("closed");
            SandboxRoute {
                route,
                closed,
                status: result.to_owned(),
            }
        })
        .collect()
}

/// `reaper sandbox-probe CG2 OUTSIDE_PID HOST_USERNS`, which doctor starts inside a sandbox:
/// tries each way out of the run's cgroup and prints one `ROUTE\tRESULT` line for each. A
/// route that works does no harm: the cgroup.procs file is opened, never written; the clone3
/// child exits at once; a new cgroup namespace is this probe's alone.
#[cfg(target_os = "linux")]
pub fn sandbox_probe(cg2: &std::path::Path, outside: i32, host_userns: &str) -> u8 {
    use rustix::fs::{Mode, OFlags};
    let verdict = |r: std::io::Result<()>, because: &str| match r {
        Ok(()) => "OPEN".to_owned(),
        Err(e) => format!(
            "closed ({because}: {})",
            reaper_platform::errno::strerror(&e)
        ),
    };
    let procs = rustix::fs::open(
        cg2.join("cgroup.procs"),
        OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(drop)
    .map_err(std::io::Error::from);
    out!("cgroup.procs\t{}", verdict(procs, "read-only mount"));
    let clone3 = rustix::fs::open(
        cg2,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(std::io::Error::from)
    .and_then(|dir| reaper_platform::linux::spawn::try_clone_into(std::os::fd::AsFd::as_fd(&dir)));
    out!("clone3\t{}", verdict(clone3, "seccomp"));
    // SAFETY: unshare(2) with a flag word changes only this process's namespaces; the probe
    // exits right after its checks.
    let cgroupns = match unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    };
    out!("cgroupns\t{}", verdict(cgroupns, "seccomp"));
    let own_userns = std::fs::read_link("/proc/self/ns/user")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    let root = rustix::fs::open(
        format!("/proc/{outside}/root/"),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(drop)
    .map_err(std::io::Error::from);
    let because = if own_userns != host_userns {
        "a user namespace of its own"
    } else {
        "capabilities"
    };
    out!("proc-root\t{}", verdict(root, because));
    0
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
             whatever the backend; `reaper run` acts as the container's init (signals: README, \
             \"In containers\")"
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
fn limit_controllers(r: &mut Report, env: &setup::CgroupEnv, p: &setup::Placement) {
    use crate::containment::limits::{self, Limits};
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
        match limits::check(&l, env, p, limits::ownership(false)) {
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
pub fn probe(_delegate: crate::containment::select::DelegateMode) -> Report {
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

/// Both fallbacks contain a setsid() escapee; they differ in what they cannot do.
#[cfg(target_os = "linux")]
fn without_cgroup(pgid: bool) -> String {
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

pub fn main(args: DoctorArgs) -> u8 {
    let r = probe(args.delegate);
    if args.json {
        match serde_json::to_string_pretty(&r) {
            Ok(s) => out!("{s}"),
            Err(e) => {
                say!("reaper: {e}");
                return 125;
            }
        }
    } else {
        out!("{}", human(&r).trim_end());
    }
    if r.auto_backend == "none" {
        1
    } else {
        0
    }
}

#[cfg(not(target_os = "linux"))]
fn human(r: &Report) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: &str| s.push_str(&format!("{k:<18} {v}\n"));
    line("kernel", &r.kernel);
    line(
        "pgid",
        &match (&r.pgid_table, r.pgid) {
            (Some(t), true) => format!("yes (process table from {t})"),
            _ => "no".to_owned(),
        },
    );
    line("auto backend", &format!("{}: {}", r.auto_backend, r.why));
    if let Some(l) = &r.limits {
        line("limits", l);
    }
    for h in &r.hints {
        s.push_str(&format!("hint: {h}\n"));
    }
    s
}

#[cfg(target_os = "linux")]
fn human(r: &Report) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut s = String::new();
    let mut line = |k: &str, v: &str| s.push_str(&format!("{k:<18} {v}\n"));
    line("kernel", &r.kernel);
    line("cgroup mode", r.cgroup_mode);
    line("cgroup2 mount", r.cgroup2_mount.as_deref().unwrap_or("-"));
    line("own cgroup", r.own_cgroup.as_deref().unwrap_or("-"));
    if let Some(d) = &r.delegation {
        line("delegation", d);
    }
    line(
        "controllers",
        &if r.controllers.is_empty() {
            "(none)".to_owned()
        } else {
            r.controllers.join(" ")
        },
    );
    line(
        "subtree_control",
        &if r.subtree_control.is_empty() {
            "(none)".to_owned()
        } else {
            r.subtree_control.join(" ")
        },
    );
    let usable = if r.limit_controllers.is_empty() {
        "(none)".to_owned()
    } else {
        r.limit_controllers.join(" ")
    };
    match &r.limits_error {
        Some(e) => line("limits", &format!("{usable}; {e}")),
        None => line("limits", &usable),
    }
    let writable = match &r.cgroup_error {
        Some(e) if !r.cgroup_writable => format!("no: {e}"),
        _ => yes(r.cgroup_writable).to_owned(),
    };
    line("run cgroup", &writable);
    line("cgroup.kill", yes(r.cgroup_kill));
    line("clone3 into cgroup", yes(r.clone_into_cgroup));
    line("pidfd", yes(r.pidfd));
    line("subreaper", yes(r.subreaper));
    line(
        "pgid",
        &match &r.pgid_table {
            Some(t) => format!("{} (process table from {t})", yes(r.pgid)),
            None => "no".to_owned(),
        },
    );
    line("container", &describe_container(&r.container));
    line(
        "sandbox",
        &format!(
            "{}; {}",
            if r.sandbox.pid_available {
                "--sandbox and --sandbox=pid work"
            } else if r.sandbox.available {
                "--sandbox works, --sandbox=pid does not"
            } else {
                "--sandbox is impossible here"
            },
            r.sandbox
                .parts
                .iter()
                .map(|p| format!("{}: {}", p.part, p.status))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    if !r.sandbox.routes.is_empty() {
        let open = r.sandbox.routes.iter().filter(|x| !x.closed).count();
        line(
            "sandbox routes",
            &format!(
                "{}: {}",
                if open == 0 {
                    "every route out of the run's cgroup is closed".to_owned()
                } else {
                    format!("{open} route(s) out of the run's cgroup OPEN")
                },
                r.sandbox
                    .routes
                    .iter()
                    .map(|x| format!("{}: {}", x.route, x.status))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    line(
        "nsdelegate",
        if r.sandbox.nsdelegate {
            "yes (the kernel also refuses a move across a cgroup namespace's root)"
        } else {
            "no (the cgroup namespace alone would not stop a move; the sandbox does not rely on it)"
        },
    );
    line(
        "unprivileged userns",
        match r.sandbox.unprivileged_user_namespaces {
            Some(true) => {
                "yes (a sandboxed command may make one; the cgroup fs stays locked read-only in it)"
            }
            Some(false) => "no",
            None => "unknown",
        },
    );
    line("auto backend", &format!("{}: {}", r.auto_backend, r.why));
    if let Some(w) = &r.without_cgroup {
        line("without cgroup", w);
    }
    for h in &r.hints {
        s.push_str(&format!("hint: {h}\n"));
    }
    s
}

/// One line: what of a container reaper sees.
#[cfg(target_os = "linux")]
fn describe_container(c: &Container) -> String {
    let mut signs = Vec::new();
    if c.pid1 {
        signs.push("PID 1 of its PID namespace (the namespace contains the tree)");
    } else if c.pid_namespace {
        signs.push("in a PID namespace");
    }
    if c.cgroup_namespace {
        signs.push("in a cgroup namespace");
    }
    if c.cgroupfs_read_only {
        signs.push("cgroup file system read-only");
    }
    if signs.is_empty() {
        "none seen (the machine's own PID and cgroup namespaces)".into()
    } else {
        signs.join("; ")
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn without_a_cgroup_the_choice_is_explained() {
        let r = Report {
            auto_backend: "subreaper",
            why: "no run cgroup: not writable".into(),
            subreaper: true,
            pidfd: true,
            pgid: true,
            pgid_table: Some("/proc".into()),
            without_cgroup: Some(without_cgroup(true)),
            ..Default::default()
        };
        let text = human(&r);
        assert!(
            text.contains("pgid               yes (process table from /proc)"),
            "{text}"
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("without cgroup"))
            .unwrap_or_else(|| panic!("no 'without cgroup' line: {text}"));
        for want in [
            "subreaper",
            "--containment pgid",
            "--poll",
            "setsid()",
            "one at a time",
        ] {
            assert!(line.contains(want), "{want} missing: {line}");
        }
        // Without a usable process table only the subreaper half is said.
        assert!(!without_cgroup(false).contains("pgid"));
    }
}

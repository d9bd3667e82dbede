//! `reaper doctor`: which containment works on this machine, and why (the findings are the
//! library's `reaper::host::diagnose`; this face prints them).

use reaper::host::{CgroupMode, Findings, PartStatus, RouteStatus};
use reaper::BackendKind;
use serde::Serialize;

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
    pub delegate: super::contain::DelegateArg,
}

pub fn main(args: DoctorArgs) -> u8 {
    let f = reaper::host::diagnose(
        args.delegate.into(),
        super::contain::any_guardian().as_deref(),
    );
    super::guardian_done();
    let mut r = Report::of(&f);
    if r.delegation.is_some() && args.delegate == super::contain::DelegateArg::Never {
        // The library asks systemd nothing when told never to: this flag is why.
        r.delegation = Some("not asked: --delegate never".into());
    }
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
    if f.auto_backend.is_none() {
        1
    } else {
        0
    }
}

/// Everything `reaper doctor` reports (`--json`), in its words.
#[derive(Debug, Default, Serialize)]
struct Report {
    kernel: String,
    /// `unified` (pure v2), `hybrid` (v1 controllers + v2), or `none`.
    cgroup_mode: &'static str,
    cgroup2_mount: Option<String>,
    own_cgroup: Option<String>,
    own_cgroup_dir: Option<String>,
    delegation: Option<String>,
    delegated_unit: Option<String>,
    controllers: Vec<String>,
    subtree_control: Vec<String>,
    limit_controllers: Vec<String>,
    limits_error: Option<String>,
    cgroup_writable: bool,
    cgroup_kill: bool,
    clone_into_cgroup: bool,
    cgroup_error: Option<String>,
    pidfd: bool,
    subreaper: bool,
    pgid: bool,
    pgid_table: Option<String>,
    /// Without a run cgroup: what tells `subreaper` and `pgid` apart, to choose between them.
    without_cgroup: Option<String>,
    /// The backend `--containment auto` picks here, or `none`.
    auto_backend: &'static str,
    why: String,
    /// macOS: what the pgid backend, the only one there, does not contain.
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<String>,
    container: ContainerReport,
    sandbox: SandboxReport,
    /// What to do to get more containment here.
    hints: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
struct ContainerReport {
    pid1: bool,
    pid_namespace: bool,
    cgroup_namespace: bool,
    cgroupfs_read_only: bool,
}

#[derive(Debug, Default, Serialize)]
struct SandboxReport {
    available: bool,
    pid_available: bool,
    /// Each part: `yes`, `no: WHY`, or `untested` (an earlier part failed).
    parts: Vec<SandboxPart>,
    unprivileged_user_namespaces: Option<bool>,
    routes: Vec<SandboxRoute>,
    nsdelegate: bool,
}

#[derive(Debug, Serialize)]
struct SandboxPart {
    part: &'static str,
    status: String,
}

#[derive(Debug, Serialize)]
struct SandboxRoute {
    route: &'static str,
    closed: bool,
    /// `closed (WHY)`, or `OPEN`.
    status: String,
}

impl Report {
    fn of(f: &Findings) -> Report {
        let mut r = Report {
            kernel: f.kernel.clone(),
            cgroup_mode: match f.cgroup_mode {
                Some(CgroupMode::Unified) => "unified",
                Some(CgroupMode::Hybrid) => "hybrid",
                None => "none",
            },
            cgroup2_mount: f.cgroup2_mount.as_ref().map(|p| p.display().to_string()),
            own_cgroup: f.own_cgroup.clone(),
            own_cgroup_dir: f.own_cgroup_dir.as_ref().map(|p| p.display().to_string()),
            delegation: f.delegation.clone(),
            delegated_unit: f.delegated_unit.clone(),
            controllers: f.controllers.clone(),
            subtree_control: f.subtree_control.clone(),
            limit_controllers: f.limit_controllers.clone(),
            limits_error: f.limits_error.as_ref().map(crate::advice::contain_error),
            cgroup_writable: f.cgroup_writable,
            cgroup_kill: f.cgroup_kill,
            clone_into_cgroup: f.clone_into_cgroup,
            // doctor is what a hint would send the user to: the message without it.
            cgroup_error: f.cgroup_error.as_ref().map(|e| e.what().to_owned()),
            pidfd: f.pidfd,
            subreaper: f.subreaper,
            pgid: f.pgid,
            pgid_table: f.pgid_table.clone(),
            auto_backend: f.auto_backend.map_or("none", BackendKind::as_str),
            container: ContainerReport {
                pid1: f.container.pid1,
                pid_namespace: f.container.pid_namespace,
                cgroup_namespace: f.container.cgroup_namespace,
                cgroupfs_read_only: f.container.cgroupfs_read_only,
            },
            sandbox: SandboxReport {
                available: f.sandbox.available,
                pid_available: f.sandbox.pid_available,
                parts: f
                    .sandbox
                    .parts
                    .iter()
                    .map(|p| SandboxPart {
                        part: p.part,
                        status: part_status(&p.status),
                    })
                    .collect(),
                unprivileged_user_namespaces: f.sandbox.unprivileged_user_namespaces,
                routes: f
                    .sandbox
                    .routes
                    .iter()
                    .map(|x| SandboxRoute {
                        route: x.route,
                        closed: x.status.is_closed(),
                        status: route_status(x.status),
                    })
                    .collect(),
                nsdelegate: f.sandbox.nsdelegate,
            },
            ..Default::default()
        };
        explain(f, &mut r);
        r
    }
}

/// `yes`, `no: WHY`, or `untested`.
fn part_status(s: &PartStatus) -> String {
    match s {
        PartStatus::Works => "yes".into(),
        #[cfg(target_os = "linux")]
        PartStatus::Refused { step, errno } => {
            let e = std::io::Error::from_raw_os_error(*errno);
            if matches!(
                step,
                reaper::SandboxStep::UserNamespace | reaper::SandboxStep::UserMaps
            ) {
                format!("no: --sandbox: cannot {}: {e}", step.describe())
            } else {
                format!("no: {e}")
            }
        }
        PartStatus::Failed(m) => format!("no: {m}"),
        PartStatus::Untested => "untested".into(),
        PartStatus::NeedsClone3 => {
            "no: needs clone3(CLONE_INTO_CGROUP) to probe (--sandbox without =pid may still work)"
                .into()
        }
        PartStatus::NeedsCgroupBackend => {
            "no: needs the cgroup backend (the cgroup namespace is rooted at the run's cgroup)"
                .into()
        }
        _ => "no".into(),
    }
}

/// `closed (WHY)`, or `OPEN`.
fn route_status(s: RouteStatus) -> String {
    match s {
        RouteStatus::Open => "OPEN".into(),
        RouteStatus::Unknown => "OPEN (the self-check did not say)".into(),
        RouteStatus::Absent => "closed (not on this kernel)".into(),
        RouteStatus::Closed { by, errno } => format!(
            "closed ({by}: {})",
            reaper_platform::errno::strerror(&std::io::Error::from_raw_os_error(errno))
        ),
        _ => "OPEN (unknown)".into(),
    }
}

/// Why `auto` picks what it picks, and what to do to get more containment here: the hints in
/// the order the findings were made.
#[cfg(target_os = "linux")]
fn explain(f: &Findings, r: &mut Report) {
    if let Some(e) = &f.pgid_error {
        r.hints.push(if f.pgid_table.is_some() {
            format!("the pgid backend cannot read the process table: {e}")
        } else {
            format!("the pgid backend has no process table here: {e}")
        });
    }
    if let Some(e) = &f.clone_into_cgroup_error {
        r.hints.push(format!(
            "clone3(CLONE_INTO_CGROUP) {e} (Linux 5.7+, not filtered by seccomp): leaders join through cgroup.procs instead, ~10 ms slower per run"
        ));
    }
    if let Some(e) = &f.release_error {
        r.hints
            .push(format!("could not remove the test cgroup: {e}"));
    }
    let c = &f.container;
    if c.cgroupfs_read_only {
        r.hints.push(
            "the cgroup file system is mounted read-only (a container's default): to get the \
             cgroup backend, run the container with a writable cgroup of its own (Docker: \
             --cgroupns=private with a writable /sys/fs/cgroup, or a delegated cgroup); or use \
             --containment pgid to run concurrent `reaper mcp` calls side by side"
                .into(),
        );
    }
    if f.foreign_proc {
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
    } else if c.pid_namespace && !f.cgroup_writable {
        r.hints.push(
            "in a PID namespace (a container?) without a writable cgroup: run reaper as the \
             container's PID 1 (ENTRYPOINT [\"reaper\", \"run\", \"--\", …]) so the namespace \
             itself contains the tree"
                .into(),
        );
    }
    if !f.sandbox.available && rustix::process::geteuid().is_root() {
        r.hints.push(
            "--sandbox is impossible here (see `sandbox`): a root command can leave its run's \
             cgroup with one write to a cgroup.procs, and `reaper run` reports it as an escapee \
             at best"
                .into(),
        );
    }
    match f.auto_backend {
        Some(BackendKind::Cgroup) => {
            r.why = format!(
                "run cgroups can be created under {} ({} cgroup2 at {})",
                r.own_cgroup_dir.as_deref().unwrap_or("?"),
                r.cgroup_mode,
                r.cgroup2_mount.as_deref().unwrap_or("?")
            );
            if !f.cgroup_kill {
                r.hints.push("cgroup.kill is missing (Linux < 5.14): reaper kills each process through its pidfd instead, which a fork storm can outrun for a moment".into());
            }
        }
        Some(BackendKind::Subreaper) => {
            r.without_cgroup = Some(without_cgroup(f.pgid));
            r.why = format!(
                "no run cgroup: {}",
                r.cgroup_error.as_deref().unwrap_or("pidfd unavailable")
            );
            r.hints.push(if f.cgroup_mode.is_none() {
                "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) to get the cgroup backend".into()
            } else {
                format!(
                    "to get the cgroup backend, give reaper a writable cgroup: run it in a delegated cgroup (systemd-run --user --scope -p Delegate=yes reaper …), or pass --cgroup-parent / REAPER_CGROUP_PARENT a cgroup you may write under {}",
                    r.cgroup2_mount.as_deref().unwrap_or("the cgroup2 mount")
                )
            });
        }
        _ => {
            r.why = "neither a writable cgroup nor pidfds/subreaper are available".into();
            r.hints.push("reaper needs Linux 5.3+ (pidfd_open)".into());
        }
    }
}

/// macOS: the pgid backend is the one there is, if `/bin/ps` can list the processes.
#[cfg(not(target_os = "linux"))]
fn explain(f: &Findings, r: &mut Report) {
    if let Some(e) = &f.pgid_error {
        r.why = if f.pgid_table.is_some() {
            format!("the pgid backend cannot read the process table: {e}")
        } else {
            format!("the pgid backend has no process table here: {e}")
        };
    }
    if f.auto_backend.is_some() {
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
}

/// Without a run cgroup: what tells the subreaper and pgid backends apart (both contain a
/// setsid() escapee; they differ in what they cannot do). `pgid`: the process table can be
/// read here.
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
fn describe_container(c: &ContainerReport) -> String {
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

    #[test]
    fn findings_become_doctors_words() {
        let mut f = Findings::default();
        f.auto_backend = Some(BackendKind::Subreaper);
        f.subreaper = true;
        f.pgid_table = Some("/proc".into());
        f.pgid_error = Some("EACCES".into());
        // As root, a machine without the sandbox gets a hint of its own.
        f.sandbox.available = true;
        let r = Report::of(&f);
        assert_eq!(r.auto_backend, "subreaper");
        assert_eq!(r.cgroup_mode, "none");
        assert_eq!(r.why, "no run cgroup: pidfd unavailable");
        assert_eq!(
            r.hints,
            [
                "the pgid backend cannot read the process table: EACCES",
                "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) to get the cgroup backend",
            ]
        );
        assert!(r
            .without_cgroup
            .as_deref()
            .is_some_and(|w| !w.contains("--containment pgid")));
        let v = serde_json::to_value(&r).unwrap_or_default();
        assert!(v.get("limits").is_none(), "{v}");
        assert_eq!(v["sandbox"]["parts"], serde_json::json!([]));
    }
}

//! `reaper doctor`: which containment works on this machine, and why (the findings are the
//! library's `reaper::host::diagnose`; this face prints them).

#[cfg(target_os = "linux")]
use reaper::host::Container;
use reaper::host::Report;

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
    let r = reaper::host::diagnose(
        args.delegate.into(),
        super::contain::any_guardian().as_deref(),
    );
    super::guardian_done();
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
            without_cgroup: Some(reaper::host::without_cgroup(true)),
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
        assert!(!reaper::host::without_cgroup(false).contains("pgid"));
    }
}

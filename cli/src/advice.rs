//! The library's errors in the binary's words: what failed, and what to do about it with this
//! binary's flags and commands, per error kind.

use reaper::SandboxError;
use reaper::{BackendKind, ContainError, ContainErrorKind, Error, Limits, Refusal};

/// What to do when containment fails.
pub const RUN_DOCTOR: &str = "run `reaper doctor`";

/// Why a run could not start, and what to do.
pub fn start_error(e: &Error) -> String {
    match e {
        Error::Sandbox(s) => sandbox_error(s),
        Error::Containment(c) => contain_error(c),
        Error::JoinFailed { program, .. } => {
            format!("cannot move '{program}' into its cgroup before exec; {RUN_DOCTOR}")
        }
        e => e.to_string(),
    }
}

/// Why `auto` fell back from the cgroup backend to `backend`, as one line for the user.
pub fn fallback(why: &ContainError, backend: Option<BackendKind>) -> String {
    format!(
        "reaper: warning: no cgroup for this run ({}); using the {} backend instead; run \
         `reaper doctor` for details",
        contain_error(why),
        backend.map_or("?", BackendKind::as_str)
    )
}

/// A containment failure, with this binary's flags for the limits and backends it names.
pub fn contain_error(e: &ContainError) -> String {
    let dir = || {
        e.path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    match e.refusal() {
        Some(Refusal::ControllersUnavailable {
            limits,
            available,
            hybrid,
        }) => {
            let names = and(&controllers(limits));
            let flags = and(&flags(limits));
            let many = controllers(limits).len() > 1;
            let listed = if available.is_empty() {
                "none".to_owned()
            } else {
                available.join(" ")
            };
            let (it, flag) = if many {
                ("them", "flags")
            } else {
                ("it", "flag")
            };
            let dir = dir();
            let todo = if *hybrid {
                format!(
                    "this host mounts cgroup v1 beside v2 (hybrid mode) and v1 holds {it}, which \
                     reaper never uses: boot with systemd.unified_cgroup_hierarchy=1 (or \
                     cgroup_no_v1=all) so that cgroup v2 has {it}, or run without the {flag}"
                )
            } else {
                format!(
                    "the cgroup above {dir} did not delegate {it}: enable {it} there (echo \
                     {} > PARENT/cgroup.subtree_control), run reaper under systemd (a scope \
                     with Delegate=yes: the user manager delegates cpu memory pids), or name a \
                     cgroup that has {it} with --cgroup-parent",
                    controllers(limits)
                        .iter()
                        .map(|c| format!("+{c}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            };
            let (need, ctl, is) = if many {
                ("need", "controllers", "are")
            } else {
                ("needs", "controller", "is")
            };
            format!(
                "{flags} {need} the cgroup v2 {names} {ctl}, which {is} not available in {dir} \
                 (its cgroup.controllers lists: {listed}); {todo}; a limit is never dropped, so \
                 the run did not start"
            )
        }
        Some(Refusal::NotOurs { limits, root }) => {
            let dir = dir();
            let need = if controllers(limits).len() > 1 {
                "need"
            } else {
                "needs"
            };
            let why = if *root {
                "it is the root cgroup, the whole machine's"
            } else {
                "reaper runs there without a delegation: no systemd scope was delegated to it, \
                 and no --cgroup-parent was given"
            };
            format!(
                "{} {need} the {} controller enabled in {dir}/cgroup.subtree_control, and {dir} \
                 is not reaper's to change ({why}): name a cgroup of yours with --cgroup-parent \
                 (mkdir it under the cgroup2 mount), or run reaper under systemd, which \
                 delegates a scope to it; a limit is never dropped, so the run did not start",
                and(&flags(limits)),
                and(&controllers(limits))
            )
        }
        Some(Refusal::Enable { busy: true }) => format!(
            "{} (processes other than reaper live in that cgroup: the kernel enables \
             controllers only for a cgroup without processes of its own; use --cgroup-parent \
             with an empty cgroup)",
            e.what()
        ),
        Some(Refusal::Set { limits, error }) => {
            format!("cannot set {}: {error}", and(&flags(limits)))
        }
        Some(Refusal::NeedsCgroups { limits, asked }) => format!(
            "{} needs the cgroup backend (cgroup v2); --containment {} cannot enforce it; a \
             limit is never dropped, so the run did not start",
            and(&flags(limits)),
            containment(*asked)
        ),
        Some(Refusal::Unsupported {
            backend: BackendKind::Cgroup,
        }) => "--containment cgroup is Linux-only (cgroup v2); on macOS use pgid, which auto \
               picks"
            .into(),
        Some(Refusal::Unsupported {
            backend: BackendKind::Subreaper,
        }) => "--containment subreaper is Linux-only (PR_SET_CHILD_SUBREAPER); on macOS use \
               pgid, which auto picks"
            .into(),
        _ => match e.kind() {
            ContainErrorKind::ParentRefused => format!("--cgroup-parent {e}"),
            ContainErrorKind::NotDelegated => format!(
                "{e} (--delegate never does it anyway; --cgroup-parent names a cgroup of yours)"
            ),
            ContainErrorKind::CgroupUnusable => format!("{e}; {RUN_DOCTOR}"),
            _ => e.to_string(),
        },
    }
}

/// The `--containment` value that named this backend (`None`: auto).
fn containment(asked: Option<BackendKind>) -> &'static str {
    match asked {
        Some(k) => k.as_str(),
        None if cfg!(target_os = "linux") => "auto",
        None => "auto (pgid on macOS)",
    }
}

/// The flags that set these limits, in the order memory, pids, cpu.
fn flags(l: &Limits) -> Vec<&'static str> {
    let mut v = Vec::new();
    if l.memory_max.is_some() {
        v.push("--memory-max");
    }
    if l.pids_max.is_some() {
        v.push("--pids-max");
    }
    if l.cpus.is_some() {
        v.push("--cpus");
    }
    v
}

/// The cgroup v2 controllers these limits need, in the same order.
fn controllers(l: &Limits) -> Vec<&'static str> {
    let mut v = Vec::new();
    if l.memory_max.is_some() {
        v.push("memory");
    }
    if l.pids_max.is_some() {
        v.push("pids");
    }
    if l.cpus.is_some() {
        v.push("cpu");
    }
    v
}

/// `a`, `a and b`, `a, b and c`.
fn and(items: &[&str]) -> String {
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Why `reaper stop` or `kill` found no single run.
#[cfg(target_os = "linux")]
pub fn find_error(e: &reaper::runs::FindError) -> String {
    match e {
        reaper::runs::FindError::NoSuchRun(t) => {
            format!("no run {t:?} (see `reaper ps`; runs of other users are visible to root only)")
        }
        e => e.to_string(),
    }
}

/// Why `--sandbox` could not be set up as asked, and what to do.
fn sandbox_error(e: &SandboxError) -> String {
    match e {
        SandboxError::NotLinux => {
            "--sandbox needs Linux (user, mount, cgroup and PID namespaces, seccomp)".into()
        }
        SandboxError::NeedsCgroupBackend { backend } => format!(
            "--sandbox needs the cgroup backend (its cgroup namespace is rooted at the run's \
             cgroup); this run has the {} backend: {RUN_DOCTOR}",
            backend.as_str()
        ),
        SandboxError::NeedsClone3 { source: Some(e) } => format!(
            "--sandbox needs clone3(CLONE_INTO_CGROUP | CLONE_NEWUSER), which this kernel \
             refused: {e}"
        ),
        SandboxError::NeedsClone3 { source: None } => format!(
            "--sandbox needs clone3(CLONE_INTO_CGROUP), which is not used here \
             (REAPER_CLONE3=0, or a seccomp filter refused it earlier): {RUN_DOCTOR}"
        ),
        SandboxError::CgroupRefused(e) => {
            format!("--sandbox: the kernel would not create the leader in the run's cgroup: {e}")
        }
        SandboxError::NoUnprivilegedUserNamespaces => format!(
            "--sandbox as a non-root user needs an unprivileged user namespace, which this \
             machine disables (user.max_user_namespaces is 0 or \
             kernel.unprivileged_userns_clone is 0): {RUN_DOCTOR}, enable them, or run \
             reaper as root"
        ),
        SandboxError::Prepare(e) => format!("--sandbox: cannot prepare the sandbox: {e}"),
        SandboxError::Stranger(e) => format!(
            "--sandbox: {e}: the sandbox's root is an unprivileged user on the host, and may \
             only use what any user may; declare the directory the program is in with \
             --sandbox-ro DIR (or --sandbox-rw DIR)"
        ),
        #[cfg(target_os = "linux")]
        SandboxError::Step {
            step,
            errno,
            apparmor,
        } => {
            let mut s = format!(
                "--sandbox: cannot {}: {}",
                step_words(*step),
                std::io::Error::from_raw_os_error(*errno)
            );
            if e.undeclared_directory() {
                s.push_str(" (declare it: --sandbox-rw DIR; root's sandbox has a /tmp of its own)");
            }
            if *apparmor {
                s.push_str(
                    " (AppArmor restricts unprivileged user namespaces here: \
                     kernel.apparmor_restrict_unprivileged_userns is 1; give reaper an AppArmor \
                     profile with `userns`, or run it as root)",
                );
            }
            s
        }
        e => e.to_string(),
    }
}

/// What a sandbox step is, for "--sandbox: cannot …".
#[cfg(target_os = "linux")]
fn step_words(step: reaper::SandboxStep) -> String {
    let what = step.describe();
    match (step, what.strip_suffix(')')) {
        // Where to look next: this binary's own diagnosis.
        (reaper::SandboxStep::UserNamespace, Some(open)) => {
            format!("{open}; see `reaper doctor`)")
        }
        _ => what.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_refused_user_namespace_points_at_doctor() {
        let e = SandboxError::Step {
            step: reaper::SandboxStep::UserNamespace,
            errno: libc::EPERM,
            apparmor: false,
        };
        let s = sandbox_error(&e);
        assert!(
            s.starts_with("--sandbox: cannot create a user namespace"),
            "{s}"
        );
        assert!(s.contains("; see `reaper doctor`): "), "{s}");
    }

    #[test]
    fn the_sandbox_on_another_backend_says_which_and_what_to_do() {
        let e = Error::Sandbox(SandboxError::NeedsCgroupBackend {
            backend: reaper::BackendKind::Pgid,
        });
        assert_eq!(
            start_error(&e),
            "--sandbox needs the cgroup backend (its cgroup namespace is rooted at the run's \
             cgroup); this run has the pgid backend: run `reaper doctor`"
        );
    }
}

//! The library's errors in the binary's words: what failed, and what to do about it with this
//! binary's flags and commands, per error kind.

use reaper::{Error, SandboxError};

/// What to do when containment fails.
pub const RUN_DOCTOR: &str = "run `reaper doctor`";

/// Why a run could not start, and what to do.
pub fn start_error(e: &Error) -> String {
    match e {
        Error::Sandbox(s) => sandbox_error(s),
        Error::JoinFailed { program, .. } => {
            format!("cannot move '{program}' into its cgroup before exec; {RUN_DOCTOR}")
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

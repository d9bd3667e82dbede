//! Why a run could not start: [`Error`], with the containment's own failure ([`ContainError`],
//! matched by [`ContainErrorKind`]) and the sandbox's ([`SandboxError`]). Each says what failed
//! in the kernel's and the library's words; a face adds its own advice per kind.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::{BackendKind, Limits};

/// Why a run could not start. [`Error::exit_code`] maps each to timeout(1)'s exit status.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The program does not exist (exit status 127).
    NotFound {
        /// The program as given.
        program: String,
    },
    /// The program exists but cannot be executed (126); `source` is the exec's error.
    NotExecutable {
        /// The program as given.
        program: String,
        /// The exec's errno (EACCES, ENOEXEC, …).
        source: std::io::Error,
    },
    /// The arguments and environment are over the kernel's limits for exec (E2BIG, 126);
    /// `source` says by how much.
    TooLarge {
        /// The program as given.
        program: String,
        /// E2BIG, with the sizes in its message.
        source: std::io::Error,
    },
    /// No containment as asked (125).
    Containment(ContainError),
    /// The sandbox could not be set up as asked (125): a run never starts in a weaker one.
    Sandbox(SandboxError),
    /// The leader could not join its cgroup before exec (125).
    JoinFailed {
        /// The program as given.
        program: String,
        /// What the join met.
        cause: ContainError,
    },
    /// No pidfd could be opened for the leader (125): it cannot be watched safely, so what had
    /// started was killed.
    NoPidfd {
        /// The leader's pid.
        pid: i32,
        /// `pidfd_open`'s error (Linux 5.4+ has it).
        source: std::io::Error,
    },
    /// The spawn failed otherwise (125).
    Spawn {
        /// The program as given.
        program: String,
        /// The spawn's error.
        source: std::io::Error,
    },
}

impl Error {
    /// timeout(1)'s exit status for it: 127 not found, 126 not executable or too large, 125
    /// for a failure of reaper's own.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotFound { .. } => 127,
            Error::NotExecutable { .. } | Error::TooLarge { .. } => 126,
            _ => 125,
        }
    }

    /// Why exec failed, when it did (`No such file or directory`).
    pub fn exec_error(&self) -> Option<std::io::Error> {
        match self {
            Error::NotFound { .. } => Some(std::io::Error::from_raw_os_error(libc::ENOENT)),
            Error::NotExecutable { source, .. } => Some(std::io::Error::from_raw_os_error(
                source.raw_os_error().unwrap_or(libc::EACCES),
            )),
            Error::TooLarge { .. } => Some(std::io::Error::from_raw_os_error(libc::E2BIG)),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound { program } => {
                write!(f, "cannot run '{program}': command not found")
            }
            Error::NotExecutable { program, source } => {
                write!(f, "cannot run '{program}': {source}")
            }
            Error::TooLarge { program, source } => write!(
                f,
                "cannot run '{program}': its arguments and environment are too large for exec \
                 (E2BIG): {source}; pass large data through a file or stdin instead"
            ),
            Error::Containment(e) => write!(f, "{e}"),
            Error::Sandbox(e) => write!(f, "{e}"),
            Error::JoinFailed { program, .. } => {
                write!(f, "cannot move '{program}' into its cgroup before exec")
            }
            Error::NoPidfd { pid, source } => {
                write!(f, "pidfd_open({pid}) failed: {source} (Linux 5.4+ needed)")
            }
            Error::Spawn { program, source } => write!(f, "cannot start '{program}': {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::NotFound { .. } => None,
            Error::NotExecutable { source, .. }
            | Error::TooLarge { source, .. }
            | Error::NoPidfd { source, .. }
            | Error::Spawn { source, .. } => Some(source),
            Error::Containment(e) | Error::JoinFailed { cause: e, .. } => Some(e),
            Error::Sandbox(e) => Some(e),
        }
    }
}

/// What kind of containment failure a [`ContainError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContainErrorKind {
    /// No cgroup2 file system, or reaper's own cgroup is not visible in it.
    NoCgroup2,
    /// A run cgroup could not be created or used (not writable, no `cgroup.kill`, …).
    CgroupUnusable,
    /// `cgroup_parent` is not a cgroup2 directory under the mount: the caller's mistake, never
    /// a reason to fall back to another backend.
    ParentRefused,
    /// systemd manages this machine and did not delegate a cgroup to reaper.
    NotDelegated,
    /// A limit cannot be enforced here (a missing controller, a parent reaper does not own, a
    /// backend without cgroups): a limit is never dropped.
    LimitUnavailable,
    /// reaper could not become a child subreaper.
    NoSubreaper,
    /// The subreaper backend holds this process's whole subtree, so it needs
    /// [`crate::own_every_child`], which this process has not declared.
    ChildrenNotOwned,
    /// The process table (`/proc`, `ps`) cannot be read, or names another PID namespace.
    NoProcessTable,
    /// The backend does not exist on this system (cgroups and the subreaper on macOS).
    Unsupported,
    /// The backend cannot contain concurrent runs of this process and one is live already.
    Busy,
    /// The leader could not join its cgroup before exec.
    JoinFailed,
    /// A stale-cgroup sweep took every cgroup reaper made before reaper could lock it.
    Claimed,
    /// Any other failure of the containment's own (an I/O error on the cgroup file system).
    Io,
}

/// Why a limit could not be enforced, or a backend asked for is not here, as values: a face
/// words it with its own names for the limits and backends ([`ContainError::refusal`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// cgroup v2 does not offer the controllers these `limits` need where run cgroups go
    /// ([`ContainError::path`]); `available` is what its `cgroup.controllers` lists, `hybrid`
    /// says cgroup v1 holds the rest (reaper never uses v1).
    ControllersUnavailable {
        /// The limits asked for that need the missing controllers.
        limits: Limits,
        /// The controllers cgroup v2 offers there.
        available: Vec<String>,
        /// The host mounts cgroup v1 beside v2.
        hybrid: bool,
    },
    /// The controllers these `limits` need are not enabled where run cgroups go
    /// ([`ContainError::path`]), and that cgroup is not reaper's to change: the root cgroup
    /// (`root`), or one nobody delegated to it and no `cgroup_parent` named.
    NotOurs {
        /// The limits whose controllers would have to be enabled.
        limits: Limits,
        /// The cgroup is the root cgroup.
        root: bool,
    },
    /// Enabling the controllers failed; `busy`: processes other than reaper live in that
    /// cgroup (the kernel enables controllers only for a cgroup without processes).
    Enable {
        /// EBUSY.
        busy: bool,
    },
    /// Writing a limit to the run's cgroup failed.
    Set {
        /// The limit written.
        limits: Limits,
        /// What the write met.
        error: String,
    },
    /// The backend asked for (`asked`; `None`: `auto`, which had no other) has no cgroups, so
    /// it cannot enforce these `limits`.
    NeedsCgroups {
        /// The limits asked for.
        limits: Limits,
        /// The backend asked for by name, if one.
        asked: Option<BackendKind>,
    },
    /// This backend does not exist on this system (cgroups and the subreaper are Linux's).
    Unsupported {
        /// The backend asked for.
        backend: BackendKind,
    },
}

/// A containment failure: what failed, the path and errno when there are, and what to do.
#[derive(Debug, Clone)]
pub struct ContainError {
    kind: ContainErrorKind,
    what: String,
    path: Option<PathBuf>,
    errno: Option<i32>,
    hint: Option<&'static str>,
    refusal: Option<Box<Refusal>>,
}

impl ContainError {
    pub(crate) fn new(kind: ContainErrorKind, what: impl Into<String>) -> Self {
        Self {
            kind,
            what: what.into(),
            path: None,
            errno: None,
            hint: None,
            refusal: None,
        }
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn join_failed() -> Self {
        Self::new(
            ContainErrorKind::JoinFailed,
            "cannot move the leader into its cgroup before exec",
        )
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn io(kind: ContainErrorKind, what: impl fmt::Display, e: &std::io::Error) -> Self {
        Self::new(kind, format!("{what}: {e}")).with_errno(e.raw_os_error())
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn on(mut self, path: impl AsRef<Path>) -> Self {
        self.path = Some(path.as_ref().to_owned());
        self
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn with_errno(mut self, errno: Option<i32>) -> Self {
        self.errno = errno;
        self
    }

    /// Adds what the library can say to do, appended to [`ContainError::what`] as written.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn of_kind(mut self, kind: ContainErrorKind) -> Self {
        self.kind = kind;
        self
    }

    pub(crate) fn refused(mut self, refusal: Refusal) -> Self {
        self.refusal = Some(Box::new(refusal));
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ContainErrorKind {
        self.kind
    }

    /// What failed, without the hint.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The file or directory it concerns, if one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The OS error number behind it, if one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno
    }

    /// Which limit or backend was refused, and why, when that is what failed.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_deref()
    }
}

impl fmt::Display for ContainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)?;
        if let Some(h) = self.hint {
            f.write_str(h)?;
        }
        Ok(())
    }
}

impl std::error::Error for ContainError {}

/// cgroupfs errors name the operation, the path and the OS's words already.
#[cfg(target_os = "linux")]
impl From<reaper_platform::linux::cgroupfs::CgroupFsError> for ContainError {
    fn from(e: reaper_platform::linux::cgroupfs::CgroupFsError) -> Self {
        let errno = e.source.raw_os_error();
        Self::new(ContainErrorKind::Io, e.to_string())
            .on(&e.path)
            .with_errno(errno)
    }
}

/// One step of the sandbox's set-up, as the kernel refused it.
#[cfg(target_os = "linux")]
pub use reaper_platform::linux::sandbox::Step as SandboxStep;

/// Why the sandbox could not be set up as asked. A run never starts in a weaker sandbox.
#[derive(Debug)]
#[non_exhaustive]
pub enum SandboxError {
    /// The sandbox is Linux's (namespaces, capabilities, seccomp).
    NotLinux,
    /// It needs the cgroup backend (its cgroup namespace is rooted at the run's cgroup).
    NeedsCgroupBackend {
        /// The backend the run got instead.
        backend: BackendKind,
    },
    /// It needs `clone3(CLONE_INTO_CGROUP | CLONE_NEWUSER)`: refused by the kernel or a
    /// seccomp filter (`source`), or not used here (`REAPER_CLONE3=0`, or refused earlier).
    NeedsClone3 {
        /// The refusal, when clone3 was tried for this run.
        source: Option<std::io::Error>,
    },
    /// The kernel would not create the leader in the run's cgroup.
    CgroupRefused(std::io::Error),
    /// Unprivileged user namespaces are disabled, and reaper is not root.
    NoUnprivilegedUserNamespaces,
    /// Preparing the sandbox failed (reading `/proc/self/mountinfo`, the id maps, the host ids
    /// of a root sandbox, the declared directories' mounts).
    Prepare(std::io::Error),
    /// A root sandbox's root, an unprivileged user on the host, may not execute the program
    /// or search a directory on its way (EACCES): declare it
    /// ([`crate::ContainOptions::sandbox_path`]).
    Stranger(std::io::Error),
    /// The kernel refused one step in the child.
    #[cfg(target_os = "linux")]
    Step {
        /// The step.
        step: SandboxStep,
        /// Its errno.
        errno: i32,
        /// AppArmor restricts unprivileged user namespaces here (the likely cause of an EPERM
        /// in a non-root sandbox).
        apparmor: bool,
    },
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxError::NotLinux => f.write_str(
                "the sandbox needs Linux (user, mount, cgroup and PID namespaces, seccomp)",
            ),
            SandboxError::NeedsCgroupBackend { backend } => write!(
                f,
                "the sandbox needs the cgroup backend (its cgroup namespace is rooted at the \
                 run's cgroup); this run has the {} backend",
                backend.as_str()
            ),
            SandboxError::NeedsClone3 { source: Some(e) } => write!(
                f,
                "the sandbox needs clone3(CLONE_INTO_CGROUP | CLONE_NEWUSER), which this kernel \
                 refused: {e}"
            ),
            SandboxError::NeedsClone3 { source: None } => f.write_str(
                "the sandbox needs clone3(CLONE_INTO_CGROUP), which is not used here \
                 (REAPER_CLONE3=0, or a seccomp filter refused it earlier)",
            ),
            SandboxError::CgroupRefused(e) => write!(
                f,
                "the kernel would not create the sandbox's leader in the run's cgroup: {e}"
            ),
            SandboxError::NoUnprivilegedUserNamespaces => f.write_str(
                "a sandbox of a non-root user needs an unprivileged user namespace, which this \
                 machine disables (user.max_user_namespaces is 0 or \
                 kernel.unprivileged_userns_clone is 0)",
            ),
            SandboxError::Prepare(e) => write!(f, "cannot prepare the sandbox: {e}"),
            SandboxError::Stranger(e) => write!(
                f,
                "the sandbox: {e}: the sandbox's root is an unprivileged user on the host, and \
                 may only use what any user may; declare the directory the program is in"
            ),
            #[cfg(target_os = "linux")]
            SandboxError::Step {
                step,
                errno,
                apparmor,
            } => {
                write!(
                    f,
                    "the sandbox: cannot {}: {}",
                    step.describe(),
                    std::io::Error::from_raw_os_error(*errno)
                )?;
                if self.undeclared_directory() {
                    f.write_str(" (declare it; root's sandbox has a /tmp of its own)")?;
                }
                if *apparmor {
                    f.write_str(APPARMOR)?;
                }
                Ok(())
            }
        }
    }
}

/// Why a non-root sandbox's user namespace was refused, when AppArmor is the likely cause.
#[cfg(target_os = "linux")]
const APPARMOR: &str = " (AppArmor restricts unprivileged user namespaces here: \
     kernel.apparmor_restrict_unprivileged_userns is 1; give reaper an AppArmor profile with \
     `userns`, or run it as root)";

impl SandboxError {
    /// The working directory could not be entered in the sandbox (EACCES, ENOENT): it must be
    /// declared.
    pub fn undeclared_directory(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let SandboxError::Step { step, errno, .. } = self {
            return *step == SandboxStep::WorkingDirectory
                && matches!(*errno, libc::EACCES | libc::ENOENT);
        }
        false
    }
}

impl std::error::Error for SandboxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SandboxError::NeedsClone3 { source: Some(e) }
            | SandboxError::CgroupRefused(e)
            | SandboxError::Prepare(e)
            | SandboxError::Stranger(e) => Some(e),
            _ => None,
        }
    }
}

/// Why no guardian could be started.
#[derive(Debug)]
#[non_exhaustive]
pub enum GuardianError {
    /// This process has more than one thread, or its `/proc/self/stat` could not be read: the
    /// fork would not be sound.
    NotSingleThreaded,
    /// The pipe, the fork, or a look at the child failed.
    Io(std::io::Error),
    /// The guardian is Linux's (it cleans up cgroups).
    NotLinux,
}

impl std::fmt::Display for GuardianError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuardianError::NotSingleThreaded => f.write_str(
                "cannot start the guardian: it is forked, which needs a single-threaded \
                 process (start it first thing in main, before any runtime or thread)",
            ),
            GuardianError::Io(e) => write!(f, "cannot start the guardian: {e}"),
            GuardianError::NotLinux => {
                f.write_str("the guardian is Linux-only (it cleans up cgroups)")
            }
        }
    }
}

impl std::error::Error for GuardianError {}

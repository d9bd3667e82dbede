//! Why a run could not start. Typed until a face renders it (`Display`), each variant mapping
//! to timeout(1)'s exit status.

use super::command;
use crate::containment;

/// Why a run could not start; each maps to timeout(1)'s exit status.
#[derive(Debug)]
pub enum StartError {
    /// 127: the program does not exist.
    NotFound { program: String },
    /// 126: it exists but cannot be executed (`error` is the exec's errno).
    NotExecutable {
        program: String,
        error: std::io::Error,
    },
    /// 126: its arguments and environment are over the kernel's limits for exec (E2BIG);
    /// `error` says by how much.
    TooLarge {
        program: String,
        error: std::io::Error,
    },
    /// 125: reaper itself failed.
    Reaper(ReaperError),
}

/// How reaper itself failed to start a run (exit 125).
#[derive(Debug)]
pub enum ReaperError {
    /// No containment as asked.
    Contain(containment::Error),
    /// `--sandbox` could not be set up as asked.
    Sandbox(command::SandboxRefused),
    /// The leader could not join its cgroup before exec.
    JoinFailed {
        program: String,
        cause: containment::Error,
    },
    /// No pidfd for the leader: it cannot be watched safely, so what started was killed.
    NoPidfd {
        pid: reaper_platform::Pid,
        error: std::io::Error,
    },
    /// The spawn failed otherwise.
    Spawn {
        program: String,
        error: std::io::Error,
    },
}

impl StartError {
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::NotFound { .. } => 127,
            StartError::NotExecutable { .. } | StartError::TooLarge { .. } => 126,
            StartError::Reaper(_) => 125,
        }
    }
    /// Why exec failed, when it did (`No such file or directory`).
    pub fn exec_error(&self) -> Option<std::io::Error> {
        match self {
            StartError::NotFound { .. } => Some(std::io::Error::from_raw_os_error(libc::ENOENT)),
            StartError::NotExecutable { error, .. } => Some(std::io::Error::from_raw_os_error(
                error.raw_os_error().unwrap_or(libc::EACCES),
            )),
            StartError::TooLarge { .. } => Some(std::io::Error::from_raw_os_error(libc::E2BIG)),
            StartError::Reaper(_) => None,
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotFound { program } => {
                write!(f, "cannot run '{program}': command not found")
            }
            StartError::NotExecutable { program, error } => {
                write!(f, "cannot run '{program}': {error}")
            }
            StartError::TooLarge { program, error } => write!(
                f,
                "cannot run '{program}': its arguments and environment are too large for exec \
                 (E2BIG): {error}; pass large data through a file or stdin instead"
            ),
            StartError::Reaper(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::NotFound { .. } => None,
            StartError::NotExecutable { error, .. } | StartError::TooLarge { error, .. } => {
                Some(error)
            }
            StartError::Reaper(e) => e.source(),
        }
    }
}

impl std::fmt::Display for ReaperError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReaperError::Contain(e) => write!(f, "{e}"),
            ReaperError::Sandbox(e) => write!(f, "{e}"),
            ReaperError::JoinFailed { program, .. } => write!(
                f,
                "cannot move '{program}' into its cgroup before exec; {}",
                containment::error::RUN_DOCTOR
            ),
            ReaperError::NoPidfd { pid, error } => {
                write!(f, "pidfd_open({pid:?}) failed: {error} (Linux 5.4+ needed)")
            }
            ReaperError::Spawn { program, error } => {
                write!(f, "cannot start '{program}': {error}")
            }
        }
    }
}

impl std::error::Error for ReaperError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReaperError::Contain(e) | ReaperError::JoinFailed { cause: e, .. } => Some(e),
            ReaperError::Sandbox(e) => Some(e),
            ReaperError::NoPidfd { error, .. } | ReaperError::Spawn { error, .. } => Some(error),
        }
    }
}

pub(super) fn classify_spawn_error(e: std::io::Error, program: &str) -> StartError {
    use rustix::io::Errno;
    let program = program.to_owned();
    let errno = e.raw_os_error().map(Errno::from_raw_os_error);
    if let Some(r) = e
        .get_ref()
        .and_then(|r| r.downcast_ref::<command::SandboxRefused>())
    {
        return StartError::Reaper(ReaperError::Sandbox(command::SandboxRefused(r.0.clone())));
    }
    if let Some(c) = e
        .get_ref()
        .and_then(|r| r.downcast_ref::<containment::Error>())
    {
        if c.kind() == containment::error::Kind::JoinFailed {
            return StartError::Reaper(ReaperError::JoinFailed {
                program,
                cause: c.clone(),
            });
        }
    }
    // `command::spawn` has said by how much (E2BIG comes back as this kind).
    if e.kind() == std::io::ErrorKind::ArgumentListTooLong {
        return StartError::TooLarge { program, error: e };
    }
    match errno {
        Some(Errno::NOENT) => StartError::NotFound { program },
        Some(
            Errno::ACCESS
            | Errno::PERM
            | Errno::NOEXEC
            | Errno::ISDIR
            | Errno::TXTBSY
            | Errno::NOTDIR
            | Errno::LOOP
            | Errno::NAMETOOLONG,
        ) => StartError::NotExecutable { program, error: e },
        _ => StartError::Reaper(ReaperError::Spawn { program, error: e }),
    }
}

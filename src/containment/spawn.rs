//! How a leader enters its run's containment before it runs any code of its own.
//!
//! With the cgroup backend the leader is created inside its cgroup by
//! `clone3(CLONE_INTO_CGROUP)` (no task migration, so no RCU grace period per run). Everywhere
//! else, and once the kernel or a seccomp filter has refused clone3, std's `Command` starts it
//! and the backend's [`Backend::prepare`](super::Backend::prepare) moves it in before
//! exec. What to run (argv, environment, stdio, terminal, process group) is the run layer's
//! `LeaderCommand`; this module only says where, and whether clone3 is still worth trying.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use reaper_platform::linux::pidfd::Pidfd;
use reaper_platform::linux::sandbox::{SandboxPlan, StepError};
use reaper_platform::linux::spawn::{self, SpawnError, SpawnSpec};

/// Why a leader could not be created inside its cgroup.
pub enum Error {
    /// A sandbox step failed in the child.
    Sandbox(StepError),
    /// clone3 or one of its flags is refused here (old kernel, seccomp): fall back, and stop
    /// trying ([`give_up`]).
    Unsupported(std::io::Error),
    /// The kernel refused this cgroup as a target: fall back to a join before exec.
    CgroupRefused(std::io::Error),
    /// The spawn itself failed (exec, pipes): the command's error.
    Failed(std::io::Error),
}

impl From<SpawnError> for Error {
    fn from(e: SpawnError) -> Self {
        match e {
            SpawnError::Unsupported(e) => Error::Unsupported(e),
            SpawnError::CgroupRefused(e) => Error::CgroupRefused(e),
            SpawnError::Failed(e) => Error::Failed(e),
            SpawnError::Sandbox(e) => Error::Sandbox(e),
        }
    }
}

static UNUSABLE: AtomicBool = AtomicBool::new(false);

/// Whether to try clone3: not after it was refused once, nor when `REAPER_CLONE3=0`.
fn usable() -> bool {
    !UNUSABLE.load(Ordering::Relaxed) && std::env::var_os("REAPER_CLONE3").is_none_or(|v| v != "0")
}

/// clone3 was refused for good (`Error::Unsupported`): later runs join through `cgroup.procs`.
pub fn give_up(e: &std::io::Error) {
    tracing::debug!("clone3(CLONE_INTO_CGROUP) refused ({e}); joining through cgroup.procs");
    UNUSABLE.store(true, Ordering::Relaxed);
}

/// The directory to create the leader in with clone3, when the backend has one and clone3 is
/// still tried here; `None`: start it with std's `Command` and the backend's `prepare`.
pub fn clone_target(cgroup: Option<BorrowedFd<'_>>) -> Option<BorrowedFd<'_>> {
    cgroup.filter(|_| usable())
}

/// Creates the leader `spec` describes inside `spec.cgroup`.
pub fn clone_into(spec: &SpawnSpec<'_>) -> Result<Pidfd, Error> {
    spawn::spawn_into_cgroup(spec).map_err(Error::from)
}

/// Why a probe failed: the sandbox step the kernel refused, or anything else.
pub enum ProbeError {
    Sandbox(StepError),
    Other(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Sandbox(e) => e.fmt(f),
            ProbeError::Other(m) => f.write_str(m),
        }
    }
}

/// Whether a leader can be created inside `cgroup` by clone3 here: starts a child there that
/// exits at once, and waits for it. For `reaper doctor`.
pub fn probe_clone3(cgroup: BorrowedFd<'_>) -> Result<(), ProbeError> {
    probe(cgroup, None, &|| 0).map(drop)
}

/// Whether a leader can start in the whole sandbox here (`pid`: with its PID namespace): as
/// [`probe_clone3`], with the sandbox; in it, the child runs `check` (which must not allocate:
/// it runs between clone and exec) with stdout to a pipe, and this returns what it wrote.
pub fn probe_sandbox(
    cgroup: BorrowedFd<'_>,
    pid: bool,
    check: &(dyn Fn() -> i32 + Sync),
) -> Result<Vec<u8>, ProbeError> {
    let (plan, _ids) = super::sandbox::prepare(pid, &[], &[])
        .map_err(|e| ProbeError::Other(format!("cannot prepare the sandbox: {e}")))?;
    probe(cgroup, Some(&plan), check)
}

/// How long a probe may take before it is killed.
const PROBE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

fn probe(
    cgroup: BorrowedFd<'_>,
    sandbox: Option<&SandboxPlan>,
    check: &(dyn Fn() -> i32 + Sync),
) -> Result<Vec<u8>, ProbeError> {
    let other = ProbeError::Other;
    let io = |e: rustix::io::Errno| other(std::io::Error::from(e).to_string());
    // A root without /dev/null (an empty container) says nothing about clone3: the probe,
    // which writes nothing to stderr, then shares doctor's.
    let null = match rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        Ok(fd) => Some(fd),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => {
            return Err(other(format!(
                "cannot open /dev/null: {}",
                std::io::Error::from(e)
            )))
        }
    };
    let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io)?;
    let spec = SpawnSpec {
        candidates: Vec::new(),
        argv: Vec::new(),
        envp: Vec::new(),
        cwd: None,
        stdio: [None, Some(out_w.as_fd()), null.as_ref().map(|n| n.as_fd())],
        new_process_group: false,
        new_session: false,
        foreground_tty: None,
        parent_death_signal: Some(reaper_platform::Signal::KILL),
        cgroup,
        call: Some(check),
        sandbox,
    };
    // Under the reaping lock: the probe is waited for here (see reap.rs).
    let _reaping = reaper_platform::reap::hold();
    let pidfd = match clone_into(&spec) {
        Ok(p) => p,
        Err(Error::Unsupported(e) | Error::CgroupRefused(e)) => {
            return Err(other(format!("refused: {e}")))
        }
        Err(Error::Sandbox(e)) => return Err(ProbeError::Sandbox(e)),
        Err(Error::Failed(e)) => return Err(other(e.to_string())),
    };
    drop(spec);
    drop(out_w);
    // The probe exits by itself; the kill only matters if it hangs.
    let deadline = std::time::Instant::now() + PROBE_DEADLINE;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let ended = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [rustix::event::PollFd::new(
            &out_r,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) => break false,
            Ok(_) => match rustix::io::read(&out_r, &mut buf) {
                Ok(0) => break true,
                Ok(n) if out.len() < 64 * 1024 => out.extend_from_slice(&buf[..n]),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break true,
            },
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break false,
        }
    };
    let exited = ended
        && rustix::event::poll(
            &mut [rustix::event::PollFd::new(
                &pidfd,
                rustix::event::PollFlags::IN,
            )],
            Some(&rustix::time::Timespec {
                tv_sec: 5,
                tv_nsec: 0,
            }),
        ) == Ok(1);
    spawn::kill_and_reap(&pidfd);
    if exited {
        Ok(out)
    } else {
        Err(other(format!(
            "the probe did not exit within {} s",
            PROBE_DEADLINE.as_secs()
        )))
    }
}

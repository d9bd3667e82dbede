//! What this process watches on a run's behalf, as requests to stop it: its parent's death
//! ([`Parent`]) and the EOF of its own stdin, relayed to the leader's ([`relay_stdin`]).
//! [`Command::end_on_parent_death`](crate::Command::end_on_parent_death) and
//! [`Command::end_on_stdin_eof`](crate::Command::end_on_stdin_eof) use them; a caller that
//! reports their failures in words of its own (the `reaper` binary) uses them directly, with a
//! [`Requests`](crate::supervise::Requests) of its own.

use std::os::fd::OwnedFd;
use std::sync::OnceLock;

use tokio::sync::oneshot;

/// This process's parent as it was when [`remember_parent`] was first called (0: none visible).
static ORIGINAL_PPID: OnceLock<i32> = OnceLock::new();

/// Remembers this process's parent now, so that a later [`Parent::start`] watches that one,
/// and fails when it is already gone. Call it first thing in `main`: a parent that exits
/// before anything watches it then still counts.
pub fn remember_parent() {
    ORIGINAL_PPID.get_or_init(current_ppid);
}

fn current_ppid() -> i32 {
    rustix::process::getppid()
        .map(|p| p.as_raw_nonzero().get())
        .unwrap_or(0)
}

/// Whether the parent [`remember_parent`] saw is gone (this process was reparented).
pub(crate) fn parent_died() -> bool {
    ORIGINAL_PPID.get().is_some_and(|&p| p != current_ppid())
}

/// Why this process's parent cannot be watched.
#[derive(Debug)]
#[non_exhaustive]
pub enum ParentError {
    /// No handle could be opened on the parent (`pid`).
    Open {
        /// The parent's pid.
        pid: i32,
        /// `pidfd_open`'s error (macOS: kqueue's).
        source: std::io::Error,
    },
    /// The parent exited before the watch was set up.
    AlreadyGone,
    /// The parent is outside this PID namespace, and no SIGURG handler could be installed for
    /// `PR_SET_PDEATHSIG`.
    NoHandler(std::io::Error),
    /// …and `PR_SET_PDEATHSIG` failed.
    DeathSignal(std::io::Error),
    /// There is no parent process to watch.
    NoParent,
}

impl std::fmt::Display for ParentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParentError::Open { pid, source } => {
                write!(
                    f,
                    "cannot watch this process's parent (pid {pid}): {source}"
                )
            }
            ParentError::AlreadyGone => f.write_str("this process's parent has already exited"),
            ParentError::NoHandler(e) => {
                write!(
                    f,
                    "cannot watch this process's parent: no SIGURG handler ({e})"
                )
            }
            ParentError::DeathSignal(e) => write!(
                f,
                "cannot watch this process's parent: PR_SET_PDEATHSIG failed ({e})"
            ),
            ParentError::NoParent => f.write_str("this process has no parent process to watch"),
        }
    }
}

impl std::error::Error for ParentError {}

/// A watch on this process's parent *process*: [`Parent::died`] resolves once it has exited.
///
/// Not `PR_SET_PDEATHSIG` as a stop request: it follows the *thread* that forked this process
/// (prctl(2)), so a parent that starts it from a worker thread which then exits (Python's
/// `Popen` on a thread) would stop the run while the parent lives. A pidfd (Linux) or kqueue
/// `NOTE_EXIT` (macOS) on the parent fires only when the whole process has exited.
pub struct Parent(Watch);

enum Watch {
    /// A handle on the parent process.
    Process(reaper_platform::process::Handle),
    /// Linux, when the parent lives outside this PID namespace (`getppid()` is 0: PID 1 of a
    /// namespace, or started by `docker exec`/`nsenter`): there is no pid here to open a pidfd
    /// on, and the process this one is reparented to is outside too, so nothing here tells a
    /// thread's exit from the process's. `PR_SET_PDEATHSIG` (SIGURG: ignored by default, sent
    /// by nobody else) is then taken as the parent's death, with PDEATHSIG's caveat: the exit
    /// of the thread that forked this process counts too.
    #[cfg(target_os = "linux")]
    Hint(tokio::signal::unix::Signal),
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parent").finish_non_exhaustive()
    }
}

impl Parent {
    /// Starts watching the parent [`remember_parent`] saw (else the current one), on the
    /// current tokio runtime. Race-free: the watch is set up first, then `getppid()` must still
    /// be that parent. A parent that has not exited cannot have been reaped, so its pid was not
    /// reused and the handle names it; one that exited first has reparented this process, and
    /// the check says so.
    pub fn start() -> Result<Parent, ParentError> {
        let ppid = ORIGINAL_PPID.get().copied().unwrap_or_else(current_ppid);
        let watch = match reaper_platform::Pid::from_raw(ppid) {
            Some(pid) => reaper_platform::process::Handle::open(pid)
                .map(Watch::Process)
                .map_err(|source| ParentError::Open { pid: ppid, source }),
            None => hint(),
        };
        if parent_died() || (ppid != 0 && current_ppid() != ppid) {
            return Err(ParentError::AlreadyGone);
        }
        watch.map(Parent)
    }

    /// Resolves once the parent process has exited; an error when it can no longer be watched
    /// (the reactor failed).
    pub async fn died(&mut self) -> std::io::Result<()> {
        match &mut self.0 {
            Watch::Process(h) => h.exited().await,
            #[cfg(target_os = "linux")]
            Watch::Hint(wake) => match wake.recv().await {
                Some(()) => Ok(()),
                None => Err(std::io::Error::other("the SIGURG stream ended")),
            },
        }
    }
}

#[cfg(target_os = "linux")]
fn hint() -> Result<Watch, ParentError> {
    use tokio::signal::unix::{signal, SignalKind};
    // The handler first, so the hint can never find SIGURG's default action instead.
    let wake = signal(SignalKind::from_raw(libc::SIGURG)).map_err(ParentError::NoHandler)?;
    rustix::process::set_parent_process_death_signal(Some(reaper_platform::Signal::URG))
        .map_err(|e| ParentError::DeathSignal(e.into()))?;
    Ok(Watch::Hint(wake))
}

#[cfg(not(target_os = "linux"))]
fn hint() -> Result<Watch, ParentError> {
    Err(ParentError::NoParent)
}

/// Copies this process's stdin to `to_child` (the leader's stdin) on a thread of its own, and
/// returns what resolves at its EOF or hang-up: the relay read the EOF (after closing
/// `to_child`), or the writer hung up first (the relay may be stuck writing to a command that
/// does not read, and would never get to read it). Blocking reads and writes keep
/// back-pressure and add no latency; fd 0 is shared with others, so it is never made
/// non-blocking. An error when no relay could be started: then `to_child` is closed and there
/// is no EOF to act on. `unwatched` is told when the hang-up cannot be watched (then only the
/// EOF the relay reads counts); a stdin with no other end to hang up (a regular file) is not
/// that. Neither thread keeps this process from exiting.
pub fn relay_stdin(
    to_child: OwnedFd,
    unwatched: impl Fn(std::io::Error) + Send + Sync + 'static,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let read = relay(to_child)?;
    let hangup = watch_hangup(std::sync::Arc::new(unwatched));
    Ok(async move {
        let hung_up = async {
            // A watcher that gave up (its sender dropped unsent) saw no hang-up.
            let seen = match hangup {
                Some(rx) => rx.await.is_ok(),
                None => false,
            };
            if !seen {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = read => {}
            _ = hung_up => {}
        }
    })
}

fn relay(to_child: OwnedFd) -> std::io::Result<oneshot::Receiver<()>> {
    use std::io::{Read, Write};
    // The relay blocks (the pipe was made non-blocking for tokio): back-pressure, no polling.
    rustix::fs::fcntl_getfl(&to_child)
        .and_then(|fl| rustix::fs::fcntl_setfl(&to_child, fl - rustix::fs::OFlags::NONBLOCK))?;
    let mut to_child = std::fs::File::from(to_child);
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("stdin-relay".into())
        .spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = vec![0u8; 64 * 1024];
            let mut child = Some(&mut to_child);
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        // The leader closed its stdin: keep draining ours, only to notice EOF.
                        if child
                            .as_mut()
                            .is_some_and(|c| c.write_all(&buf[..n]).is_err())
                        {
                            child = None;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            drop(to_child);
            let _ = tx.send(());
        })?;
    Ok(rx)
}

/// Resolves when this process's stdin hangs up: its writer is gone (the last writer of a pipe
/// or fifo, a socket's peer, a terminal's hang-up), even while data it sent is still queued. A
/// thread of its own polls fd 0 for that, independently of the relay. `None` when stdin has no
/// other end to hang up, or no thread could be started (`unwatched` is told).
fn watch_hangup(
    unwatched: std::sync::Arc<dyn Fn(std::io::Error) + Send + Sync>,
) -> Option<oneshot::Receiver<()>> {
    use std::os::fd::AsFd;
    if !reaper_platform::hangup::can_hang_up(std::io::stdin().as_fd()) {
        return None;
    }
    let (tx, rx) = oneshot::channel();
    let told = unwatched.clone();
    let spawned = std::thread::Builder::new()
        .name("stdin-hangup".into())
        .spawn(
            move || match reaper_platform::hangup::wait_for_hangup(std::io::stdin().as_fd()) {
                Ok(()) => {
                    let _ = tx.send(());
                }
                Err(e) => told(e),
            },
        );
    match spawned {
        Ok(_) => Some(rx),
        Err(e) => {
            unwatched(e);
            None
        }
    }
}

//! The command-line faces: flags in, a run spec to the run layer, an exit status and a report
//! out.

pub mod check;
pub mod doctor;
pub mod mcp;
pub mod parse;
pub mod run;
pub mod timeout;

/// A current-thread runtime: every fork happens on the main thread, which lives as long as
/// reaper (PR_SET_PDEATHSIG fires when the forking *thread* dies).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// reaper's parent as it was when reaper started (0: none visible, see [`ParentWatch`]).
static ORIGINAL_PPID: std::sync::OnceLock<i32> = std::sync::OnceLock::new();

/// Call first thing in `main`.
pub fn record_parent() {
    ORIGINAL_PPID.get_or_init(current_ppid);
}

pub fn current_ppid() -> i32 {
    rustix::process::getppid()
        .map(|p| p.as_raw_nonzero().get())
        .unwrap_or(0)
}

/// Whether the parent reaper started with is gone (reaper was reparented).
pub fn parent_died() -> bool {
    ORIGINAL_PPID.get().is_some_and(|&p| p != current_ppid())
}

/// How `--die-with-parent` learns that reaper's parent *process* has exited; the run waits on
/// [`ParentWatch::died`] beside its other stop causes and reports `parent-died`.
///
/// Not `PR_SET_PDEATHSIG` as a stop request: it follows the *thread* that forked reaper
/// (prctl(2)), so a parent that starts reaper from a worker thread which then exits (Python's
/// `Popen` on a thread) would stop the run while the parent lives. A pidfd (Linux) or kqueue
/// `NOTE_EXIT` (macOS) on the parent fires only when the whole process has exited, and wakes
/// the run by itself, so no signal is needed beside it.
pub enum ParentWatch {
    /// A handle on the parent process.
    Process(reaper_platform::process::Handle),
    /// Linux, when the parent lives outside reaper's PID namespace (`getppid()` is 0: reaper
    /// is PID 1 of a namespace, or was started by `docker exec`/`nsenter`): there is no pid
    /// here to open a pidfd on, and the process reaper is reparented to is outside too, so
    /// nothing reaper can see tells a thread's exit from the process's. `PR_SET_PDEATHSIG`
    /// (SIGURG: ignored by default, sent to reaper by nobody else) is then taken as the parent's
    /// death, with PDEATHSIG's caveat: the exit of the thread that forked reaper counts too.
    #[cfg(target_os = "linux")]
    Hint(tokio::signal::unix::Signal),
}

impl ParentWatch {
    /// Starts watching the parent reaper was started by (recorded in `main`). Race-free: the
    /// watch is set up first, then `getppid()` must still be the recorded parent. A parent that
    /// has not exited cannot have been reaped, so its pid was not reused and the handle names
    /// it; one that exited first has reparented reaper, and the check says so.
    pub fn start() -> Result<Self, String> {
        let ppid = ORIGINAL_PPID.get().copied().unwrap_or_else(current_ppid);
        let watch = match reaper_platform::Pid::from_raw(ppid) {
            Some(pid) => reaper_platform::process::Handle::open(pid)
                .map(Self::Process)
                .map_err(|e| format!("cannot watch reaper's parent (pid {ppid}): {e}")),
            None => Self::hint(),
        };
        if parent_died() {
            return Err("reaper's parent exited before reaper could watch it; not starting".into());
        }
        watch
    }

    #[cfg(target_os = "linux")]
    fn hint() -> Result<Self, String> {
        use tokio::signal::unix::{signal, SignalKind};
        // The handler first, so the hint can never find SIGURG's default action instead.
        let wake = signal(SignalKind::from_raw(libc::SIGURG))
            .map_err(|e| format!("cannot watch reaper's parent: no SIGURG handler ({e})"))?;
        rustix::process::set_parent_process_death_signal(Some(reaper_platform::Signal::URG))
            .map_err(|e| format!("cannot watch reaper's parent: PR_SET_PDEATHSIG failed ({e})"))?;
        Ok(Self::Hint(wake))
    }

    #[cfg(not(target_os = "linux"))]
    fn hint() -> Result<Self, String> {
        Err("reaper has no parent process to watch".into())
    }

    /// Resolves once the parent process has exited. If it can no longer be watched (an error
    /// from the reactor), says so and never resolves: the run goes on without the watch.
    pub async fn died(&mut self) {
        match self {
            Self::Process(h) => {
                if let Err(e) = h.exited().await {
                    say!("reaper: warning: cannot watch reaper's parent any more ({e}); --die-with-parent is not in effect");
                    std::future::pending::<()>().await;
                }
            }
            #[cfg(target_os = "linux")]
            Self::Hint(wake) => {
                if wake.recv().await.is_none() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP to reaper. Create before spawning, so a signal in between stops
/// the tree instead of killing reaper.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    /// More signals to listen to (timeout(1)'s face: ALRM, QUIT and its `-s` signal).
    extra: Vec<(reaper_platform::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub fn new() -> Option<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Some(Self {
            int: signal(SignalKind::interrupt()).ok()?,
            term: signal(SignalKind::terminate()).ok()?,
            hup: signal(SignalKind::hangup()).ok()?,
            extra: Vec::new(),
        })
    }

    /// Also listen to `sig` (ignored when it cannot be caught: KILL, STOP…).
    pub fn also(&mut self, sig: reaper_platform::Signal) {
        use reaper_platform::Signal;
        let (int, term, hup) = (Signal::INT, Signal::TERM, Signal::HUP);
        if [int, term, hup].contains(&sig) || self.extra.iter().any(|(s, _)| *s == sig) {
            return;
        }
        let kind = tokio::signal::unix::SignalKind::from_raw(sig.as_raw());
        if let Ok(stream) = tokio::signal::unix::signal(kind) {
            self.extra.push((sig, stream));
        }
    }

    pub async fn recv(&mut self) -> reaper_platform::Signal {
        use reaper_platform::Signal;
        tokio::select! {
            _ = self.int.recv() => Signal::INT,
            _ = self.term.recv() => Signal::TERM,
            _ = self.hup.recv() => Signal::HUP,
            sig = std::future::poll_fn(|cx| {
                for (sig, stream) in self.extra.iter_mut() {
                    if stream.poll_recv(cx).is_ready() {
                        return std::task::Poll::Ready(*sig);
                    }
                }
                std::task::Poll::Pending
            }) => sig,
        }
    }
}

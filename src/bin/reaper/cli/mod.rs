//! The command-line faces: flags in, a run spec to the run layer, an exit status and a report
//! out.

#[cfg(target_os = "linux")]
pub mod audit;
pub mod check;
pub mod contain;
pub mod doctor;
pub mod mcp;
pub mod parse;
#[cfg(target_os = "linux")]
pub mod ps;
pub mod run;
#[cfg(target_os = "linux")]
pub mod stop;
#[cfg(target_os = "linux")]
pub mod suite;

use reaper::supervise::{Request, Requests};
use reaper::{Event, EventSink};
use reaper_platform::job_control::JobStops;

/// Every signal reaper listens to becomes a request, in the order they come.
pub fn signal_requests(mut sigs: Signals, requests: &mut Requests) {
    requests.feed(|tx| async move {
        loop {
            let sig = sigs.recv().await;
            if !tx.send(Request::Signal(sig)) {
                break;
            }
        }
    });
}

/// reaper's job-control stops, each with its sender, become requests to pass them on (see
/// `Request::JobStop`: the run refuses one from its own tree); those not in `relayed` are
/// ignored.
pub fn job_stop_requests(
    mut stops: JobStops,
    relayed: &'static [reaper::Signal],
    requests: &mut Requests,
) {
    requests.feed(|tx| async move {
        loop {
            let Ok(stop) = stops.recv().await else {
                break;
            };
            if relayed.contains(&stop.signal) && !tx.send(Request::JobStop(stop)) {
                break;
            }
        }
    });
}

/// `--events`: one JSON object per line on stderr, `{"t_ms":12,"event":"spawned",…}`.
pub fn json_lines_to_stderr() -> EventSink {
    EventSink::new(|t_ms, ev: &Event| {
        let Some(mut v) = crate::report::event_json(ev) else {
            return;
        };
        if let Some(obj) = v.as_object_mut() {
            obj.insert("t_ms".into(), t_ms.into());
        }
        say!("{v}");
    })
}

/// reaper's teardown is complete: its guardian, if it has one, may exit.
pub fn guardian_done() {
    if let Some(g) = contain::any_guardian() {
        g.done();
    }
}

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

/// Every signal whose default action would end reaper, to reaper: each becomes a request to
/// stop the tree first (or, for an init, to pass it on). Create before spawning, so a signal in
/// between stops the tree instead of killing reaper. SIGPIPE is not one: Rust ignores it (a
/// write to a closed pipe fails with EPIPE instead). The fault signals (SIGSEGV, SIGBUS, …)
/// count only when another process sent them (`reaper_platform::sent`).
pub struct Signals {
    streams: Vec<(reaper_platform::Signal, tokio::signal::unix::Signal)>,
    /// Fault signals sent by another process; `None` when the handler could not be installed.
    faults: Option<reaper_platform::sent::SentFaults>,
}

/// The signals that end a process by default and that no fault raises (signal(7)), besides
/// the real-time ones.
const ENDING: &[reaper_platform::Signal] = {
    use reaper_platform::Signal as S;
    &[
        S::HUP,
        S::INT,
        S::QUIT,
        S::USR1,
        S::USR2,
        S::ALARM,
        S::TERM,
        #[cfg(target_os = "linux")]
        S::STKFLT,
        S::XCPU,
        S::XFSZ,
        S::VTALARM,
        S::PROF,
        S::IO,
        #[cfg(target_os = "linux")]
        S::POWER,
    ]
};

/// Every signal [`Signals`] listens to: those that end a process by default.
pub fn ending_signals() -> Vec<reaper_platform::Signal> {
    let mut all = ENDING.to_vec();
    #[cfg(target_os = "linux")]
    all.extend(reaper_platform::signal::realtime().filter_map(reaper_platform::signal::from_raw));
    all.extend(reaper_platform::sent::FAULTS);
    all
}

impl Signals {
    pub fn new() -> Option<Self> {
        let mut me = Self {
            streams: Vec::new(),
            faults: None,
        };
        for &sig in ENDING {
            me.streams.push((sig, stream(sig)?));
        }
        #[cfg(target_os = "linux")]
        for n in reaper_platform::signal::realtime() {
            if let Some(sig) = reaper_platform::signal::from_raw(n) {
                me.streams.push((sig, stream(sig)?));
            }
        }
        me.faults = match reaper_platform::sent::install() {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::debug!("fault signals sent by others end reaper by default: {e}");
                None
            }
        };
        Some(me)
    }

    /// Also listen to `sig` (ignored when it cannot be caught: KILL, STOP…).
    pub fn also(&mut self, sig: reaper_platform::Signal) {
        if self.streams.iter().any(|(s, _)| *s == sig) {
            return;
        }
        if let Some(stream) = stream(sig) {
            self.streams.push((sig, stream));
        }
    }

    pub async fn recv(&mut self) -> reaper_platform::Signal {
        let streams = &mut self.streams;
        let ending = std::future::poll_fn(|cx| {
            for (sig, stream) in streams.iter_mut() {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        });
        let faults = async {
            match self.faults.as_mut() {
                Some(f) => match f.recv().await {
                    Ok(sig) => sig,
                    Err(_) => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            sig = ending => sig,
            sig = faults => sig,
        }
    }
}

/// A stream of `sig` to reaper; `None` if it cannot be caught.
fn stream(sig: reaper_platform::Signal) -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(sig.as_raw())).ok()
}

/// The job-control stops to reaper (SIGTSTP: Ctrl-Z, SIGTTIN, SIGTTOU), each with its sender
/// (`reaper_platform::job_control`), for a face that passes them on to the tree, whose process
/// group is not reaper's, before stopping its own job; and timeout(1)'s face, which ignores
/// SIGTTIN and SIGTTOU as GNU timeout does. A handler, unlike SIG_IGN, is not inherited by the
/// leader. `None` when the handler cannot be installed (once per process).
pub fn job_stops() -> Option<JobStops> {
    match reaper_platform::job_control::install() {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::debug!("job-control stops stop reaper by default: {e}");
            None
        }
    }
}

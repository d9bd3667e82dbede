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
use reaper::Event;
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
pub fn json_lines_to_stderr() -> impl Fn(u64, &Event) + Send + Sync + 'static {
    |t_ms, ev: &Event| {
        let Some(mut v) = crate::report::event_json(ev) else {
            return;
        };
        if let Some(obj) = v.as_object_mut() {
            obj.insert("t_ms".into(), t_ms.into());
        }
        say!("{v}");
    }
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

/// Call first thing in `main`: `--die-with-parent` watches the parent reaper started with.
pub fn record_parent() {
    reaper::watch::remember_parent();
}

/// How `--die-with-parent` learns that reaper's parent *process* has exited
/// ([`reaper::watch::Parent`]), in reaper's words.
pub fn watch_parent() -> Result<reaper::watch::Parent, String> {
    use reaper::watch::ParentError as E;
    reaper::watch::Parent::start().map_err(|e| match e {
        E::Open { pid, source } => format!("cannot watch reaper's parent (pid {pid}): {source}"),
        E::AlreadyGone => {
            "reaper's parent exited before reaper could watch it; not starting".into()
        }
        E::NoHandler(e) => format!("cannot watch reaper's parent: no SIGURG handler ({e})"),
        E::DeathSignal(e) => {
            format!("cannot watch reaper's parent: PR_SET_PDEATHSIG failed ({e})")
        }
        _ => "reaper has no parent process to watch".into(),
    })
}

/// Resolves once reaper's parent has exited. If it can no longer be watched, says so and never
/// resolves: the run goes on without the watch.
pub async fn parent_died(mut parent: reaper::watch::Parent) {
    if let Err(e) = parent.died().await {
        say!("reaper: warning: cannot watch reaper's parent any more ({e}); --die-with-parent is not in effect");
        std::future::pending::<()>().await;
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

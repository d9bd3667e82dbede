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

/// reaper's parent as it was when reaper started, to tell its death from an ordinary SIGTERM
/// (`--die-with-parent` asks for SIGTERM on parent death; after it, `getppid()` differs).
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

/// SIGTERM to reaper itself when its parent dies (Linux: PR_SET_PDEATHSIG; macOS: a thread
/// watching the parent through kqueue), then the check that the parent did not die before it
/// was set (prctl(2): the signal is only sent for a death *after* the call).
pub fn die_with_parent() -> Result<(), String> {
    reaper_platform::process::set_parent_death_signal(reaper_platform::Signal::TERM)
        .map_err(|e| format!("cannot set the parent-death signal: {e}"))?;
    if parent_died() {
        return Err("reaper's parent exited before reaper could watch it; not starting".into());
    }
    Ok(())
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

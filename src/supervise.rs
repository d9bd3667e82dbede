//! How a run is supervised: the [`Plan`] (timeout, stop signal and its target, grace, linger,
//! what a stdin EOF or the parent's death does) and the [`Request`]s that stop it, fed through
//! [`Requests`]. One supervisor per run (the crate-private engine, inside [`crate::Child`]) is
//! the only code that waits on the leader, the clock and the requests, decides why the run stops, emits the
//! events of that decision and drives the stop sequence; a caller only builds a plan and turns
//! its own inputs (signals, a client's cancel) into requests.
//!
//! ```text
//! Running ──leader exits──► Exited ─► Lingering (linger) ─┐
//!    │  └──stdin EOF──► Allowance ──leader exits──────────┤
//!    └── timeout / signal / cancel / parent died / shutdown ─► Decided(reason) ─► stop ─► Outcome
//! ```
//!
//! [`Child::step`](crate::Child::step) is cancel-safe (the phase and deadlines live in the
//! supervisor, not in the future), so a caller can put it in its own `select!` beside its pipes,
//! and reach the run between two steps: mcp drains codex's output after
//! [`Step::LeaderExited`], check looks at the survivors after the settle time.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use reaper_platform::Signal;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::StopReason;

pub use reaper_platform::job_control::{JobStop, StopSender};

/// What a caller asks of a running run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// This process got this signal: stop the run ([`StopReason::Signal`]), or pass the signal
    /// on if the plan forwards it ([`Plan::forward`]).
    Signal(Signal),
    /// The run's owner asks it to stop ([`StopReason::Cancel`]): an MCP client's cancel,
    /// [`crate::Child::stop`].
    Cancel,
    /// The run's owner asks it to die now: SIGKILL for the whole tree, no grace
    /// ([`StopReason::Cancel`]; [`crate::Child::kill`]).
    Kill,
    /// reaper's parent died (`--die-with-parent`).
    ParentDied,
    /// reaper's stdin reached EOF or hung up (`--on-stdin-eof`).
    StdinEof,
    /// The MCP server is going away.
    Shutdown,
    /// reaper got a job-control stop (Ctrl-Z, SIGTSTP/SIGTTIN/SIGTTOU): the tree, in a process
    /// group of its own, is stopped the same way with reaper's job, and continued with it. Not a
    /// stop of the run. Only a stop the terminal sent, or a process provably outside the run
    /// (alive, started before the signal came, neither in the run nor a descendant of this
    /// process), is passed on; a stop from the tree itself is ignored, so that the tree cannot
    /// stop its own supervisor. [`crate::supervise::StopSender`] says who sent it, as the
    /// kernel does (`reaper_platform::job_control` reads it from the signal's `siginfo`).
    JobStop(JobStop),
}

/// Where a first signal goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Every process of the run.
    Tree,
    /// The leader alone (through its pidfd); the rest is killed after the grace.
    Leader,
}

/// One stop: `first` (none: timeout(1)'s signal 0) to `to`, up to `grace` for the tree to
/// exit, then SIGKILL for everything left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSpec {
    /// The first signal; `None` sends nothing (then SIGKILL after the grace).
    pub first: Option<Signal>,
    /// Who gets it.
    pub to: Target,
    /// How long the tree gets to exit before everything left is SIGKILLed.
    pub grace: Duration,
}

impl StopSpec {
    /// SIGKILL for the whole tree at once.
    pub const KILL: StopSpec = StopSpec {
        first: Some(Signal::KILL),
        to: Target::Tree,
        grace: Duration::ZERO,
    };
}

/// Which requests end a running grace early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutShort {
    /// None does.
    Never,
    /// A further signal that is not forwarded (a second Ctrl-C: "now").
    BySignal,
    /// The server's shutdown (except during the shutdown's own grace).
    ByShutdown,
}

/// Told what timeout(1) sends, as it sends it (`-v`): `None` is signal 0.
pub type Announce = Arc<dyn Fn(Option<Signal>) + Send + Sync>;

/// What happens after the first signal of a timeout or a signal to reaper.
#[derive(Clone)]
pub enum Escalation {
    /// After the grace, kill the tree.
    Grace,
    /// timeout(1): signal (the tree, or COMMAND alone with `foreground`), then wait for COMMAND
    /// itself: at most `kill_after` (then SIGKILL everything), for ever without it; a further
    /// signal to reaper is passed on the same way, and a SIGALRM is the timeout. Only then is
    /// what is left of the tree stopped, with what is left of the grace.
    AfterLeader {
        /// SIGKILL for the whole tree this long after the first signal; `None`: never.
        kill_after: Option<Duration>,
        /// The signal goes to COMMAND alone.
        foreground: bool,
        /// Told each signal as it is sent (`-v`).
        announce: Option<Announce>,
    },
}

/// How a run is supervised: each caller builds its own ([`crate::Command`]'s setters change the
/// common parts).
#[derive(Clone)]
#[non_exhaustive]
pub struct Plan {
    /// The wall-clock limit, from the supervisor's start.
    pub timeout: Option<Duration>,
    /// Whether the timeout still runs while the tree lingers after the leader's exit (run's
    /// `--linger`: yes; check's `--settle`: no, the leader did not time out).
    pub timeout_ends_linger: bool,
    /// The stop on a timeout, a signal, a cancel, a parent's death, a stdin EOF, a shutdown.
    pub stop: StopSpec,
    /// The stop of what is left after the leader exited by itself.
    pub leftovers: StopSpec,
    /// How long the tree may run on after the leader's own exit (`--linger`, `--settle`).
    pub linger: Duration,
    /// `--on-stdin-eof`: how long the leader gets to exit once its stdin is closed; `None`:
    /// a stdin EOF is not a request.
    pub stdin_eof: Option<Duration>,
    /// The grace when reaper's parent died, at most (nobody waits for a clean exit).
    pub parent_death_grace: Duration,
    /// The grace when the server shuts down, at most.
    pub shutdown_grace: Duration,
    /// Init mode: the signals passed on instead of stopping the run.
    pub forward: Vec<Signal>,
    /// …and to whom.
    pub forward_to: Target,
    /// Which requests end a running grace early.
    pub cut_short: CutShort,
    /// What happens after the first signal of a timeout or a signal.
    pub escalation: Escalation,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("timeout", &self.timeout)
            .field("stop", &self.stop)
            .field("leftovers", &self.leftovers)
            .field("linger", &self.linger)
            .field("stdin_eof", &self.stdin_eof)
            .field("forward", &self.forward)
            .finish_non_exhaustive()
    }
}

impl Plan {
    /// A plan that stops with `stop` on every request, kills leftovers at once, and has no
    /// timeout, linger, forwarding nor caps below `stop.grace`.
    pub fn new(stop: StopSpec) -> Plan {
        Plan {
            timeout: None,
            timeout_ends_linger: true,
            stop,
            leftovers: StopSpec::KILL,
            linger: Duration::ZERO,
            stdin_eof: None,
            parent_death_grace: stop.grace,
            shutdown_grace: stop.grace,
            forward: Vec::new(),
            forward_to: Target::Leader,
            cut_short: CutShort::Never,
            escalation: Escalation::Grace,
        }
    }
}

/// Where a run's requests come from: small tasks a caller starts (each ends when the run is
/// over, or is aborted when the last clone of this is dropped). Clones share one stream: a
/// request sent before a run starts, or between two runs, is taken by the next one.
#[derive(Clone)]
pub struct Requests {
    inner: Arc<Inner>,
}

struct Inner {
    tx: mpsc::UnboundedSender<Request>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Request>>,
    tasks: std::sync::Mutex<Vec<AbortHandle>>,
}

/// Sends requests to a run (see [`Requests::feed`], [`Requests::sender`]).
#[derive(Clone, Debug)]
pub struct Sender(mpsc::UnboundedSender<Request>);

impl Sender {
    /// Sends `req`; false once nobody can receive it any more.
    pub fn send(&self, req: Request) -> bool {
        self.0.send(req).is_ok()
    }
}

impl Default for Requests {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requests").finish_non_exhaustive()
    }
}

impl Requests {
    /// A stream with no source yet.
    pub fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Requests {
            inner: Arc::new(Inner {
                tx,
                rx: tokio::sync::Mutex::new(rx),
                tasks: std::sync::Mutex::new(Vec::new()),
            }),
        }
    }

    /// Sends `req` once `event` resolves (a task on the current tokio runtime).
    pub fn on(&mut self, event: impl Future<Output = ()> + Send + 'static, req: Request) {
        let tx = self.sender();
        self.spawn(async move {
            event.await;
            tx.send(req);
        });
    }

    /// Runs `feed` with a sender of its own (for a stream of requests: signals), as a task on
    /// the current tokio runtime.
    pub fn feed<F, Fut>(&mut self, feed: F)
    where
        F: FnOnce(Sender) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let fut = feed(self.sender());
        self.spawn(fut);
    }

    /// A sender into this stream.
    pub fn sender(&self) -> Sender {
        Sender(self.inner.tx.clone())
    }

    fn spawn(&mut self, fut: impl Future<Output = ()> + Send + 'static) {
        let task = tokio::spawn(fut).abort_handle();
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
    }

    /// The next request; never resolves when none can come.
    pub(crate) async fn next(&self) -> Request {
        match self.inner.rx.lock().await.recv().await {
            Some(r) => r,
            // Unreachable while `tx` lives; kept total anyway.
            None => std::future::pending().await,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in self
            .tasks
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            t.abort();
        }
    }
}

/// What one step of a run's supervision came to ([`crate::Child::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The leader exited by itself (its linger, if any, is the next step).
    LeaderExited,
    /// The run is to stop, for this reason: nothing is stopped yet ([`crate::Child::wait`]
    /// stops it).
    Stop(StopReason),
}

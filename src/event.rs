//! Lifecycle events: every transition of a run, as it happens. The CLI prints them with
//! `--events`; other faces turn them into their own messages.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

/// One transition of a run. Serialized with `"event"` naming the variant in kebab-case
/// (`{"event":"spawned","pid":…}`), the form `--events` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// The leader runs, inside its containment.
    Spawned {
        /// The leader's pid.
        pid: i32,
        /// The containment in use (`cgroup`, `subreaper`, `pgid`).
        backend: &'static str,
        /// The run cgroup, for the cgroup backend.
        cgroup: Option<String>,
    },
    /// The leader was reaped.
    LeaderExited {
        /// Its exit code, when it exited.
        code: Option<i32>,
        /// The signal that killed it (`TERM`), when one did.
        signal: Option<String>,
    },
    /// The wall-clock limit passed.
    Timeout {
        /// The limit, in milliseconds.
        after_ms: u64,
    },
    /// The client asked the run to stop (an MCP cancel). `check`'s interrupt is not one: it
    /// is the check's own signal to the leader, after which the run goes on.
    CancelRequested,
    /// reaper's parent died (`--die-with-parent`).
    ParentDied,
    /// Another process asked for the run's end through its control socket: `reaper stop`
    /// (the plan's stop sequence), or with `kill`, `reaper kill` (SIGKILL for the whole tree).
    EndRequested {
        /// SIGKILL at once rather than the stop sequence.
        kill: bool,
    },
    /// reaper's stdin reached EOF or its writer hung up (`--on-stdin-eof`); CMD's stdin is
    /// closed once what was sent has been relayed.
    StdinEof,
    /// reaper itself got a signal.
    ReaperSignalled {
        /// Its name (`INT`).
        signal: String,
    },
    /// A signal went to `n` processes of the run (`via`: pidfd or cgroup.kill).
    Signalled {
        /// The signal's name (`TERM`).
        signal: String,
        /// How many processes it went to.
        n: usize,
        /// `pidfd` or `cgroup.kill`.
        via: &'static str,
    },
    /// Init mode: a signal reaper got was passed on to `n` processes (the leader, or the whole
    /// tree with `--forward-to tree`) without stopping the run.
    Forwarded {
        /// The signal's name.
        signal: String,
        /// How many processes it went to.
        n: usize,
    },
    /// No live process is left in the run.
    TreeEmpty,
    /// The run is over: how many processes were killed, and what could not be; `escapees`:
    /// the processes of the run that had left its cgroup (see `Outcome::escapees`).
    Reaped {
        /// As `Outcome::killed`.
        killed: usize,
        /// As `Outcome::survivors`: must be empty.
        survivors: Vec<String>,
        /// As `Outcome::escapees`.
        escapees: Vec<String>,
        /// What the limits did and the run's CPU time (cgroup backend only).
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<crate::limits::Usage>,
    },
}

/// Receives the milliseconds since the run started, and the event.
type Listener = Arc<dyn Fn(u64, &Event) + Send + Sync>;

/// Where events go. Cheap to clone; a sink that does nothing is the default.
#[derive(Clone)]
pub struct EventSink {
    started: Instant,
    f: Option<Listener>,
}

impl EventSink {
    /// A sink that drops every event.
    pub fn none() -> Self {
        Self {
            started: Instant::now(),
            f: None,
        }
    }

    /// `f` gets the milliseconds since the sink was made, and the event.
    pub fn new(f: impl Fn(u64, &Event) + Send + Sync + 'static) -> Self {
        Self {
            started: Instant::now(),
            f: Some(Arc::new(f)),
        }
    }

    /// Sends `ev` to the listener, if there is one.
    pub fn emit(&self, ev: Event) {
        if let Some(f) = &self.f {
            f(self.started.elapsed().as_millis() as u64, &ev);
        }
    }
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink")
            .field("listening", &self.f.is_some())
            .finish()
    }
}

impl Default for EventSink {
    fn default() -> Self {
        Self::none()
    }
}

//! Lifecycle events: every transition of a run, as it happens, for a face to turn into its
//! own messages.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{BackendKind, Escapee, ExitStatus, Process, Signal, Usage};

/// One transition of a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The leader runs, inside its containment.
    Spawned {
        /// The leader's pid.
        pid: i32,
        /// The containment in use.
        backend: BackendKind,
        /// The run cgroup, for the cgroup backend.
        cgroup: Option<PathBuf>,
    },
    /// The leader was reaped.
    LeaderExited {
        /// Its wait status; `None` when it could not be waited for.
        status: Option<ExitStatus>,
    },
    /// The wall-clock limit passed.
    Timeout {
        /// The limit.
        after: Duration,
    },
    /// The caller asked the run to stop ([`crate::supervise::Request::Cancel`]). A check's
    /// interrupt is not one: it is the check's own signal to the leader, after which the run
    /// goes on.
    CancelRequested,
    /// This process's parent died ([`crate::supervise::Request::ParentDied`]).
    ParentDied,
    /// Another process asked for the run's end through its control socket
    /// ([`crate::runs::end`]): the plan's stop sequence, or with `kill`, SIGKILL for the whole
    /// tree.
    EndRequested {
        /// SIGKILL at once rather than the stop sequence.
        kill: bool,
    },
    /// This process's stdin reached EOF or its writer hung up
    /// ([`crate::supervise::Request::StdinEof`]).
    StdinEof,
    /// This process got a signal that stops the run.
    ReaperSignalled {
        /// The signal.
        signal: Signal,
    },
    /// A signal went to `n` processes of the run.
    Signalled {
        /// The signal.
        signal: Signal,
        /// How many processes it went to.
        n: usize,
        /// How: `pidfd` or `cgroup.kill`.
        via: &'static str,
    },
    /// A signal this process got was passed on to `n` processes (the leader, or the whole
    /// tree, as the plan's `forward_to` says) without stopping the run.
    Forwarded {
        /// The signal.
        signal: Signal,
        /// How many processes it went to.
        n: usize,
    },
    /// No live process is left in the run.
    TreeEmpty,
    /// The run is over: how many processes were killed, and what could not be.
    Reaped {
        /// As [`crate::Outcome::killed`].
        killed: usize,
        /// As [`crate::Outcome::survivors`]: must be empty.
        survivors: Vec<Process>,
        /// As [`crate::Outcome::escapees`].
        escapees: Vec<Escapee>,
        /// What the limits did and the run's CPU time (cgroup backend only).
        usage: Option<Usage>,
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

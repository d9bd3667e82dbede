//! How a run ended: the leader's status, why the run stopped, what was killed, what survived.

use serde::Serialize;

use reaper_platform::{signal, ExitStatus, Signal};

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The leader exited by itself.
    Exited,
    /// The wall-clock limit passed.
    Timeout,
    /// reaper was signalled (SIGINT, SIGTERM, SIGHUP) or its parent died.
    Signal,
    /// Someone asked for it (MCP cancel, an interrupt from `check`).
    Cancel,
    /// reaper's parent died (`--die-with-parent`).
    ParentDied,
    /// reaper's stdin reached EOF and the leader did not exit in time (`--on-stdin-eof`).
    StdinEof,
    /// The run hit its memory limit (`--memory-max`) and the kernel's OOM killer ended it:
    /// see `Usage::ended_by_oom`. Exit status as for the leader's death by SIGKILL (137).
    Oom,
    /// reaper itself failed.
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub argv: Vec<String>,
    pub backend: &'static str,
    pub cgroup: Option<String>,
    /// Under systemd: the delegated scope (or unit) the run cgroup lives in.
    pub scope: Option<String>,
    pub leader_pid: i32,
    /// The leader's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the leader (`TERM`), when one did.
    pub signal: Option<String>,
    pub stop_reason: StopReason,
    /// The signal reaper received, for `stop_reason: signal`.
    pub received_signal: Option<String>,
    /// From spawn to the end of teardown.
    pub duration_ms: u64,
    /// From spawn to the leader's exit.
    pub leader_ms: Option<u64>,
    /// From the stop request to an empty tree.
    pub teardown_ms: u64,
    /// Processes of the run that reaper signalled to stop them (the leader included, when it
    /// was still running).
    pub killed: usize,
    /// Processes still alive after teardown, as `comm (pid N)`: must be empty.
    pub survivors: Vec<String>,
    /// Processes of the run that had left its cgroup, as `comm (pid N): moved out of the
    /// cgroup to /PATH`; stopped like the rest (and counted in `killed`, or in `survivors`).
    pub escapees: Vec<String>,
    /// What went wrong in reaper itself, for `stop_reason: error`.
    pub error: Option<String>,
    /// The guardian process that would have cleaned up had reaper been killed.
    pub guardian_pid: Option<i32>,
    /// The limits set on the run (`--memory-max`, `--pids-max`, `--cpus`), if any.
    pub limits: Option<crate::containment::limits::Limits>,
    /// What the limits did and the run's CPU time (cgroup backend only).
    pub usage: Option<crate::containment::limits::Usage>,
    #[serde(skip)]
    pub leader_status: Option<ExitStatus>,
}

impl Outcome {
    pub fn set_leader_status(&mut self, st: Option<ExitStatus>) {
        self.leader_status = st;
        (self.exit_code, self.signal) = status_parts(st);
    }
}

/// A status as (exit code, signal name), for reports.
pub fn status_parts(st: Option<ExitStatus>) -> (Option<i32>, Option<String>) {
    match st {
        Some(ExitStatus::Code(c)) => (Some(c), None),
        Some(ExitStatus::Signal(s)) => (None, Some(signal_name(s))),
        None => (None, None),
    }
}

pub fn signal_name(raw: i32) -> String {
    Signal::from_named_raw(raw)
        .map(signal::name)
        .unwrap_or_else(|| raw.to_string())
}

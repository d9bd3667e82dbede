//! How a run ended: the leader's status, why the run stopped, what was killed, what survived.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use reaper_platform::ExitStatus;
use reaper_platform::{signal, Signal};

use crate::{BackendKind, ContainError, Escapee, Limits, Process, Usage};

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum StopReason {
    /// The leader exited by itself.
    Exited,
    /// The wall-clock limit passed.
    Timeout,
    /// reaper was signalled (SIGINT, SIGTERM, SIGHUP) or its parent died.
    Signal,
    /// The client cancelled (MCP `notifications/cancelled`).
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
    /// The MCP server is shutting down (its own signal or its client gone): the call's stop
    /// has a short grace.
    Shutdown,
    /// Another process asked for the run's stop (`reaper stop`, [`crate::runs::end`]): the
    /// plan's stop sequence, as on a timeout. Also when the run was stopped directly while its
    /// owner could not answer (stopped by SIGSTOP), reported once the owner runs again.
    Stopped,
    /// Another process asked for the run to be killed (`reaper kill`): SIGKILL for the whole
    /// tree at once.
    Killed,
}

/// How a run ended, and what ending it took: what `Child::wait` returns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Outcome {
    /// The command line that was run.
    pub argv: Vec<String>,
    /// The containment the run got.
    pub backend: BackendKind,
    /// The run cgroup, for the cgroup backend (removed by the time the run is over).
    pub cgroup: Option<PathBuf>,
    /// Under systemd: the delegated scope (or unit) the run cgroup lives in.
    pub scope: Option<String>,
    /// The leader's pid.
    pub leader_pid: i32,
    /// The leader's wait status, when it was reaped.
    pub leader_status: Option<ExitStatus>,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// The signal this process received, for [`StopReason::Signal`].
    pub received_signal: Option<Signal>,
    /// From spawn to the end of teardown.
    pub duration: Duration,
    /// From spawn to the leader's exit, when it exited.
    pub leader_ran: Option<Duration>,
    /// From the stop request to an empty tree.
    pub teardown: Duration,
    /// Processes a stop ended (the leader included, when it was still running): each alive
    /// when the stop began or killed after, and gone by the end; never one of `survivors`.
    pub killed: usize,
    /// Processes still alive after teardown: must be empty.
    pub survivors: Vec<Process>,
    /// Processes of the run that had left its cgroup; stopped like the rest (and counted in
    /// `killed`, or in `survivors`).
    pub escapees: Vec<Escapee>,
    /// What went wrong in ending the run, for [`StopReason::Error`].
    pub error: Option<TeardownError>,
    /// The guardian process that would have cleaned up had this process been killed.
    pub guardian_pid: Option<i32>,
    /// The limits set on the run, if any.
    pub limits: Option<Limits>,
    /// What the limits did and the run's CPU time (cgroup backend only).
    pub usage: Option<Usage>,
}

impl Outcome {
    /// Exit status, like timeout(1): the leader's code, 128+N for death by signal N, 124 on
    /// timeout unless `preserve_status`, 125 when the run could not be ended cleanly
    /// (including survivors).
    pub fn exit_code(&self, preserve_status: bool) -> u8 {
        if self.stop_reason == StopReason::Error || !self.survivors.is_empty() {
            return 125;
        }
        if self.stop_reason == StopReason::Timeout && !preserve_status {
            return 124;
        }
        // As for a death by SIGKILL, also when the OOM killer spared the leader.
        if self.stop_reason == StopReason::Oom {
            return 128 + 9;
        }
        match self.leader_status {
            Some(ExitStatus::Code(c)) => (c & 0xff) as u8,
            Some(ExitStatus::Signal(s)) => (128 + (s & 0x7f)) as u8,
            None => 125,
        }
    }
}

/// What went wrong in ending a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum TeardownError {
    /// Processes outlived SIGKILL for `waited`: [`Outcome::survivors`] names them.
    Survivors {
        /// How many.
        count: usize,
        /// How long they were waited for after SIGKILL.
        waited: Duration,
    },
    /// The run's containment could not be removed.
    Release(ContainError),
}

impl std::fmt::Display for TeardownError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TeardownError::Survivors { count, waited } => write!(
                f,
                "{count} process(es) survived SIGKILL for {}s",
                waited.as_secs()
            ),
            TeardownError::Release(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TeardownError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TeardownError::Release(e) => Some(e),
            TeardownError::Survivors { .. } => None,
        }
    }
}

/// A status as (exit code, signal name), for the records other processes read.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn status_parts(st: Option<ExitStatus>) -> (Option<i32>, Option<String>) {
    match st {
        Some(ExitStatus::Code(c)) => (Some(c), None),
        Some(ExitStatus::Signal(s)) => (
            None,
            Some(
                Signal::from_named_raw(s)
                    .map(signal::name)
                    .unwrap_or_else(|| s.to_string()),
            ),
        ),
        None => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(reason: StopReason, st: Option<ExitStatus>) -> Outcome {
        Outcome {
            argv: vec![],
            backend: BackendKind::Cgroup,
            cgroup: None,
            scope: None,
            leader_pid: 1,
            leader_status: st,
            stop_reason: reason,
            received_signal: None,
            duration: Duration::ZERO,
            leader_ran: None,
            teardown: Duration::ZERO,
            killed: 0,
            survivors: vec![],
            escapees: vec![],
            error: None,
            guardian_pid: None,
            limits: None,
            usage: None,
        }
    }

    fn exit_code(o: &Outcome, preserve_status: bool) -> u8 {
        o.exit_code(preserve_status)
    }

    #[test]
    fn exit_code_is_the_leaders_over_the_whole_domain() {
        for c in 0..=255 {
            assert_eq!(
                exit_code(
                    &outcome(StopReason::Exited, Some(ExitStatus::Code(c))),
                    false
                ),
                c as u8
            );
        }
        for s in 1..=64 {
            assert_eq!(
                exit_code(
                    &outcome(StopReason::Exited, Some(ExitStatus::Signal(s))),
                    false
                ),
                (128 + s) as u8
            );
            assert_eq!(
                exit_code(
                    &outcome(StopReason::Signal, Some(ExitStatus::Signal(s))),
                    false
                ),
                (128 + s) as u8
            );
        }
    }

    #[test]
    fn timeout_is_124_unless_preserved() {
        let o = outcome(StopReason::Timeout, Some(ExitStatus::Signal(15)));
        assert_eq!(exit_code(&o, false), 124);
        assert_eq!(exit_code(&o, true), 143);
        let o = outcome(StopReason::Timeout, Some(ExitStatus::Code(3)));
        assert_eq!(exit_code(&o, true), 3);
    }

    /// A run the OOM killer ended exits as for SIGKILL, also when the leader itself
    /// was spared and exited with a code.
    #[test]
    fn oom_is_137() {
        for st in [Some(ExitStatus::Signal(9)), Some(ExitStatus::Code(0)), None] {
            assert_eq!(exit_code(&outcome(StopReason::Oom, st), false), 137);
        }
    }

    #[test]
    fn survivors_or_errors_are_125() {
        let mut o = outcome(StopReason::Exited, Some(ExitStatus::Code(0)));
        o.survivors.push(Process {
            pid: 1,
            starttime: 1,
            comm: "x".into(),
        });
        assert_eq!(exit_code(&o, false), 125);
        let mut o = outcome(StopReason::Timeout, None);
        o.stop_reason = StopReason::Error;
        assert_eq!(exit_code(&o, false), 125);
        assert_eq!(exit_code(&outcome(StopReason::Exited, None), false), 125);
    }
}

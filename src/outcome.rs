//! How a run ended: the leader's status, why the run stopped, what was killed, what survived.

use serde::{Deserialize, Serialize};

pub use reaper_platform::ExitStatus;
use reaper_platform::{signal, Signal};

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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

/// How a run ended, and what ending it took: what `reaper run --json` prints and
/// `Child::wait` returns.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The command line that was run.
    pub argv: Vec<String>,
    /// The containment used (`cgroup`, `subreaper`, `pgid`).
    pub backend: &'static str,
    /// The run cgroup, for the cgroup backend (removed by the time the run is over).
    pub cgroup: Option<String>,
    /// Under systemd: the delegated scope (or unit) the run cgroup lives in.
    pub scope: Option<String>,
    /// The leader's pid.
    pub leader_pid: i32,
    /// The leader's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the leader (`TERM`), when one did.
    pub signal: Option<String>,
    /// Why the run ended.
    pub stop_reason: StopReason,
    /// The signal reaper received, for `stop_reason: signal`.
    pub received_signal: Option<String>,
    /// From spawn to the end of teardown.
    pub duration_ms: u64,
    /// From spawn to the leader's exit.
    pub leader_ms: Option<u64>,
    /// From the stop request to an empty tree.
    pub teardown_ms: u64,
    /// Processes a stop ended (the leader included, when it was still running): each alive
    /// when the stop began or killed after, and gone by the end; never one of `survivors`.
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
    pub limits: Option<crate::limits::Limits>,
    /// What the limits did and the run's CPU time (cgroup backend only).
    pub usage: Option<crate::limits::Usage>,
    /// The leader's wait status, when it was reaped.
    #[serde(skip)]
    pub leader_status: Option<ExitStatus>,
}

impl Outcome {
    /// Records the leader's wait status, and the exit code and signal it gives.
    pub fn set_leader_status(&mut self, st: Option<ExitStatus>) {
        self.leader_status = st;
        (self.exit_code, self.signal) = status_parts(st);
    }

    /// Exit status, like timeout(1): the leader's code, 128+N for death by signal N, 124 on
    /// timeout unless `preserve_status`, 125 when reaper itself failed (including survivors).
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

    /// Python's `returncode` of the leader, once it was reaped.
    pub fn returncode(&self) -> Option<i64> {
        self.leader_status.map(returncode)
    }
}

/// Python's `returncode`: the exit code, or minus the signal that killed the process.
pub fn returncode(st: ExitStatus) -> i64 {
    match st {
        ExitStatus::Code(c) => i64::from(c),
        ExitStatus::Signal(s) => -i64::from(s),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(reason: StopReason, st: Option<ExitStatus>) -> Outcome {
        let mut o = Outcome {
            argv: vec![],
            backend: "cgroup",
            cgroup: None,
            scope: None,
            leader_pid: 1,
            exit_code: None,
            signal: None,
            stop_reason: reason,
            received_signal: None,
            duration_ms: 0,
            leader_ms: None,
            teardown_ms: 0,
            killed: 0,
            survivors: vec![],
            escapees: vec![],
            error: None,
            guardian_pid: None,
            limits: None,
            usage: None,
            leader_status: None,
        };
        o.set_leader_status(st);
        o
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

    /// Issue 13: a run the OOM killer ended exits as for SIGKILL, also when the leader itself
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
        o.survivors.push("x (pid 1)".into());
        assert_eq!(exit_code(&o, false), 125);
        let mut o = outcome(StopReason::Timeout, None);
        o.stop_reason = StopReason::Error;
        assert_eq!(exit_code(&o, false), 125);
        assert_eq!(exit_code(&outcome(StopReason::Exited, None), false), 125);
    }

    #[test]
    fn returncodes_are_pythons() {
        assert_eq!(returncode(ExitStatus::Code(0)), 0);
        assert_eq!(returncode(ExitStatus::Code(3)), 3);
        assert_eq!(returncode(ExitStatus::Signal(9)), -9);
        assert_eq!(returncode(ExitStatus::Signal(2)), -2);
    }
}

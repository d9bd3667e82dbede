//! The library's typed values in the binary's formats: `--report`'s JSON, the `--events` lines,
//! and how messages name a process, a signal, an exit status.

use reaper::{Escapee, Event, ExitStatus, Limits, Outcome, Process, Signal, TeardownError, Usage};
use serde::Serialize;

/// `TERM`; the number, for a signal without a name.
pub fn signal_name(sig: Signal) -> String {
    reaper_platform::signal::name(sig)
}

/// The same for a raw signal number, as a wait status has it.
fn raw_signal_name(raw: i32) -> String {
    Signal::from_named_raw(raw)
        .map(reaper_platform::signal::name)
        .unwrap_or_else(|| raw.to_string())
}

/// A status as (exit code, signal name), as reports show it.
pub fn status_parts(st: Option<ExitStatus>) -> (Option<i32>, Option<String>) {
    match st {
        Some(ExitStatus::Code(c)) => (Some(c), None),
        Some(ExitStatus::Signal(s)) => (None, Some(raw_signal_name(s))),
        None => (None, None),
    }
}

/// Python's `returncode`: the exit code, or minus the signal that killed the process.
pub fn returncode(st: ExitStatus) -> i64 {
    match st {
        ExitStatus::Code(c) => i64::from(c),
        ExitStatus::Signal(s) => -i64::from(s),
    }
}

/// `sleep (pid 1234)`.
pub fn process_label(p: &Process) -> String {
    format!("{} (pid {})", p.comm, p.pid)
}

/// `sleep (pid 1234): moved out of the cgroup to /`.
pub fn escapee_label(e: &Escapee) -> String {
    format!(
        "{}: moved out of the cgroup to {}",
        process_label(&e.process),
        e.to
    )
}

pub fn process_labels(ps: &[Process]) -> Vec<String> {
    ps.iter().map(process_label).collect()
}

pub fn escapee_labels(es: &[Escapee]) -> Vec<String> {
    es.iter().map(escapee_label).collect()
}

/// What went wrong in ending the run, as the report and stderr say it.
pub fn error_text(o: &Outcome) -> Option<String> {
    o.error.as_ref().map(|e| match e {
        TeardownError::Survivors { count, waited } => format!(
            "{count} process(es) survived SIGKILL for {}s: {}",
            waited.as_secs(),
            process_labels(&o.survivors).join(", ")
        ),
        e => e.to_string(),
    })
}

fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

/// `--report`'s JSON: how the run ended, and what ending it took.
#[derive(Serialize)]
pub struct Report<'a> {
    argv: &'a [String],
    backend: &'static str,
    cgroup: Option<String>,
    scope: Option<&'a str>,
    leader_pid: i32,
    exit_code: Option<i32>,
    signal: Option<String>,
    stop_reason: reaper::StopReason,
    received_signal: Option<String>,
    duration_ms: u64,
    leader_ms: Option<u64>,
    teardown_ms: u64,
    killed: usize,
    survivors: Vec<String>,
    escapees: Vec<String>,
    error: Option<String>,
    guardian_pid: Option<i32>,
    limits: Option<Limits>,
    usage: Option<&'a Usage>,
}

impl<'a> Report<'a> {
    pub fn of(o: &'a Outcome) -> Report<'a> {
        let (exit_code, signal) = status_parts(o.leader_status);
        Report {
            argv: &o.argv,
            backend: o.backend.as_str(),
            cgroup: o.cgroup.as_ref().map(|p| p.display().to_string()),
            scope: o.scope.as_deref(),
            leader_pid: o.leader_pid,
            exit_code,
            signal,
            stop_reason: o.stop_reason,
            received_signal: o.received_signal.map(signal_name),
            duration_ms: ms(o.duration),
            leader_ms: o.leader_ran.map(ms),
            teardown_ms: ms(o.teardown),
            killed: o.killed,
            survivors: process_labels(&o.survivors),
            escapees: escapee_labels(&o.escapees),
            error: error_text(o),
            guardian_pid: o.guardian_pid,
            limits: o.limits,
            usage: o.usage.as_ref(),
        }
    }
}

/// One `--events` line, `"event"` naming the kind in kebab-case.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum EventLine<'a> {
    Spawned {
        pid: i32,
        backend: &'static str,
        cgroup: Option<String>,
    },
    LeaderExited {
        code: Option<i32>,
        signal: Option<String>,
    },
    Timeout {
        after_ms: u64,
    },
    CancelRequested,
    ParentDied,
    EndRequested {
        kill: bool,
    },
    StdinEof,
    ReaperSignalled {
        signal: String,
    },
    Signalled {
        signal: String,
        n: usize,
        via: &'static str,
    },
    Forwarded {
        signal: String,
        n: usize,
    },
    TreeEmpty,
    Reaped {
        killed: usize,
        survivors: Vec<String>,
        escapees: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<&'a Usage>,
    },
}

/// An event as the `--events` JSON object (without its time); `None` for a kind this binary
/// does not know.
pub fn event_json(ev: &Event) -> Option<serde_json::Value> {
    let line = match ev {
        Event::Spawned {
            pid,
            backend,
            cgroup,
        } => EventLine::Spawned {
            pid: *pid,
            backend: backend.as_str(),
            cgroup: cgroup.as_ref().map(|p| p.display().to_string()),
        },
        Event::LeaderExited { status } => {
            let (code, signal) = status_parts(*status);
            EventLine::LeaderExited { code, signal }
        }
        Event::Timeout { after } => EventLine::Timeout {
            after_ms: ms(*after),
        },
        Event::CancelRequested => EventLine::CancelRequested,
        Event::ParentDied => EventLine::ParentDied,
        Event::EndRequested { kill } => EventLine::EndRequested { kill: *kill },
        Event::StdinEof => EventLine::StdinEof,
        Event::ReaperSignalled { signal } => EventLine::ReaperSignalled {
            signal: signal_name(*signal),
        },
        Event::Signalled { signal, n, via } => EventLine::Signalled {
            signal: signal_name(*signal),
            n: *n,
            via,
        },
        Event::Forwarded { signal, n } => EventLine::Forwarded {
            signal: signal_name(*signal),
            n: *n,
        },
        Event::TreeEmpty => EventLine::TreeEmpty,
        Event::Reaped {
            killed,
            survivors,
            escapees,
            usage,
        } => EventLine::Reaped {
            killed: *killed,
            survivors: process_labels(survivors),
            escapees: escapee_labels(escapees),
            usage: usage.as_ref(),
        },
        _ => return None,
    };
    serde_json::to_value(line).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returncodes_are_pythons() {
        assert_eq!(returncode(ExitStatus::Code(0)), 0);
        assert_eq!(returncode(ExitStatus::Code(3)), 3);
        assert_eq!(returncode(ExitStatus::Signal(9)), -9);
        assert_eq!(returncode(ExitStatus::Signal(2)), -2);
    }

    #[test]
    fn statuses_name_their_signal() {
        assert_eq!(status_parts(Some(ExitStatus::Code(3))), (Some(3), None));
        assert_eq!(
            status_parts(Some(ExitStatus::Signal(15))),
            (None, Some("TERM".into()))
        );
        assert_eq!(status_parts(None), (None, None));
    }
}

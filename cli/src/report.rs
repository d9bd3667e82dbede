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

/// A run as `ps --json` and the MCP resource `reaper://calls` show it: the record its owner
/// wrote, and the host's view of it now.
#[cfg(target_os = "linux")]
#[derive(Serialize)]
pub struct RunJson<'a> {
    id: reaper::runs::RunId,
    short_id: &'a str,
    record: RecordJson<'a>,
    state: &'static str,
    stop_reason: Option<reaper::StopReason>,
    owner_command: Option<&'a str>,
    age_ms: u64,
    leader_alive: bool,
    process_count: usize,
    processes: Vec<MemberJson<'a>>,
    memory: Option<MemoryJson>,
    cpu_usec: Option<u64>,
    limits_hit: LimitsHitJson,
}

/// The run's record as its owner wrote it.
#[cfg(target_os = "linux")]
#[derive(Serialize)]
struct RecordJson<'a> {
    version: u32,
    id: reaper::runs::RunId,
    boot_id: &'a str,
    uid: u32,
    argv: &'a [String],
    started_unix_ms: u64,
    backend: &'static str,
    cgroup: Option<&'a std::path::Path>,
    limits: Option<Limits>,
    leader_pid: i32,
    leader_starttime: u64,
    timeout_ms: Option<u64>,
    stop_signal: Option<i32>,
    grace_ms: u64,
    request_id: Option<&'a str>,
    phase: &'static str,
    stop_reason: Option<reaper::StopReason>,
}

#[cfg(target_os = "linux")]
#[derive(Serialize)]
struct MemberJson<'a> {
    pid: i32,
    ppid: i32,
    starttime: u64,
    state: char,
    comm: &'a str,
    cmdline: &'a str,
}

#[cfg(target_os = "linux")]
#[derive(Serialize)]
struct MemoryJson {
    current_bytes: u64,
    peak_bytes: Option<u64>,
    source: &'static str,
}

#[cfg(target_os = "linux")]
#[derive(Serialize)]
struct LimitsHitJson {
    memory: bool,
    pids: bool,
    cpu: bool,
}

/// [`RunJson`] of each run.
#[cfg(target_os = "linux")]
pub fn runs_json(runs: &[reaper::runs::RunStatus]) -> Vec<RunJson<'_>> {
    runs.iter().map(run_json).collect()
}

#[cfg(target_os = "linux")]
fn run_json(r: &reaper::runs::RunStatus) -> RunJson<'_> {
    RunJson {
        id: r.id,
        short_id: &r.short_id,
        record: RecordJson {
            version: reaper::runs::RECORD_VERSION,
            id: r.id,
            boot_id: &r.boot_id,
            uid: r.uid,
            argv: &r.argv,
            started_unix_ms: r
                .started
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            backend: r.backend.map_or("unknown", reaper::BackendKind::as_str),
            cgroup: r.cgroup.as_deref(),
            limits: r.limits,
            leader_pid: r.leader.pid,
            leader_starttime: r.leader.starttime,
            timeout_ms: r.timeout.map(ms),
            stop_signal: r.stop_signal,
            grace_ms: ms(r.grace),
            request_id: r.request_id.as_deref(),
            phase: r.phase.as_str(),
            stop_reason: r.stop_reason,
        },
        state: r.state.as_str(),
        stop_reason: r.stop_reason,
        owner_command: r.owner_command.as_deref(),
        age_ms: r.age_ms,
        leader_alive: r.leader_alive,
        process_count: r.process_count,
        processes: r
            .processes
            .iter()
            .map(|m| MemberJson {
                pid: m.pid,
                ppid: m.ppid,
                starttime: m.starttime,
                state: m.state,
                comm: &m.comm,
                cmdline: &m.cmdline,
            })
            .collect(),
        memory: r.memory.map(|m| MemoryJson {
            current_bytes: m.current_bytes,
            peak_bytes: m.peak_bytes,
            source: m.source,
        }),
        cpu_usec: r.cpu_usec,
        limits_hit: LimitsHitJson {
            memory: r.limits_hit.memory,
            pids: r.limits_hit.pids,
            cpu: r.limits_hit.cpu,
        },
    }
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

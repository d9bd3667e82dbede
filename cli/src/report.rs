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
    usage: Option<UsageJson>,
}

/// What the limits did, as `--report`, `check --json` and the `reaped` event write it.
#[derive(Debug, Serialize)]
pub struct UsageJson {
    memory_peak_bytes: Option<u64>,
    oom_kill: Option<u64>,
    oom_group_kill: Option<u64>,
    pids_max_events: Option<u64>,
    cpu_usage_usec: Option<u64>,
    cpu_nr_throttled: Option<u64>,
    cpu_throttled_usec: Option<u64>,
}

impl UsageJson {
    pub fn of(u: &Usage) -> UsageJson {
        UsageJson {
            memory_peak_bytes: u.memory_peak_bytes,
            oom_kill: u.oom_kill,
            oom_group_kill: u.oom_group_kill,
            pids_max_events: u.pids_max_events,
            cpu_usage_usec: u.cpu_usage_usec,
            cpu_nr_throttled: u.cpu_nr_throttled,
            cpu_throttled_usec: u.cpu_throttled_usec,
        }
    }
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
            usage: o.usage.as_ref().map(UsageJson::of),
        }
    }
}

/// One `--events` line, `"event"` naming the kind in kebab-case.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
enum EventLine {
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
        usage: Option<UsageJson>,
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
            usage: usage.as_ref().map(UsageJson::of),
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

/// How `reaper stop`/`kill` ended a run, as `--json` writes it.
#[cfg(target_os = "linux")]
#[derive(Serialize)]
#[serde(tag = "by", rename_all = "kebab-case")]
pub enum DoneJson<'a> {
    Owner {
        ended: Option<&'a reaper::runs::Ended>,
    },
    Directly {
        owner: &'static str,
        killed: usize,
        cgroup_removed: bool,
        limits: Option<&'static str>,
    },
    AlreadyOver,
    /// An end of a later library, without a name here yet.
    Unknown,
}

/// [`DoneJson`] of an end.
#[cfg(target_os = "linux")]
pub fn done_json(d: &reaper::runs::Done) -> DoneJson<'_> {
    use reaper::runs::Done;
    match d {
        Done::Owner { ended } => DoneJson::Owner {
            ended: ended.as_ref(),
        },
        Done::Directly {
            owner,
            killed,
            cgroup_removed,
            limits,
        } => DoneJson::Directly {
            owner,
            killed: *killed,
            cgroup_removed: *cgroup_removed,
            limits: *limits,
        },
        Done::AlreadyOver => DoneJson::AlreadyOver,
        _ => DoneJson::Unknown,
    }
}

/// `reaper audit --json`: the census.
#[cfg(target_os = "linux")]
#[derive(Serialize)]
pub struct CensusJson<'a> {
    certain: Vec<LeakJson<'a>>,
    suspect: Vec<LeakJson<'a>>,
    scanned: usize,
    unreadable: usize,
    init: &'a str,
    elapsed_ms: u64,
    refused: Option<&'a str>,
}

#[cfg(target_os = "linux")]
#[derive(Serialize)]
struct LeakJson<'a> {
    root: ProcJson<'a>,
    evidence: Vec<EvidenceJson<'a>>,
    run: Option<reaper::runs::RunId>,
    origin: Option<&'a str>,
    descendants: Vec<ProcJson<'a>>,
}

#[cfg(target_os = "linux")]
#[derive(Serialize)]
struct ProcJson<'a> {
    pid: i32,
    starttime: u64,
    ppid: i32,
    pgid: i32,
    sid: i32,
    uid: Option<u32>,
    comm: &'a str,
    exe: Option<&'a std::path::Path>,
    cmdline: &'a str,
    cgroup: Option<&'a str>,
    age_secs: u64,
}

#[cfg(target_os = "linux")]
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum EvidenceJson<'a> {
    EndedRun {
        run: reaper::runs::RunId,
    },
    StaleRunCgroup {
        cgroup: &'a str,
    },
    RunNotListed {
        run: reaper::runs::RunId,
    },
    ServiceWithRunId {
        run: reaper::runs::RunId,
    },
    Reparented {
        to: i32,
        to_comm: &'a str,
    },
    ForeignSession {
        sid: i32,
        leader_gone: bool,
    },
    ForeignGroup {
        pgid: i32,
        leader_gone: bool,
    },
    NotUnitMain {
        cgroup: &'a str,
    },
    OwnSession,
    StdinHungUp {
        was: &'a str,
    },
    StdinClosed,
    /// Evidence of a later library, without a name here yet.
    Unknown,
}

/// `reaper audit --kill --json`: what was done to one process.
#[cfg(target_os = "linux")]
#[derive(Serialize)]
pub struct KilledJson {
    pid: i32,
    starttime: u64,
    result: &'static str,
}

/// [`CensusJson`] of a census.
#[cfg(target_os = "linux")]
pub fn census_json(c: &reaper::audit::Census) -> CensusJson<'_> {
    CensusJson {
        certain: c.certain.iter().map(leak_json).collect(),
        suspect: c.suspect.iter().map(leak_json).collect(),
        scanned: c.scanned,
        unreadable: c.unreadable,
        init: &c.init,
        elapsed_ms: c.elapsed_ms,
        refused: c.refused.as_deref(),
    }
}

/// [`KilledJson`] of each result.
#[cfg(target_os = "linux")]
pub fn killed_json(ks: &[reaper::audit::Killed]) -> Vec<KilledJson> {
    ks.iter()
        .map(|k| KilledJson {
            pid: k.process.pid,
            starttime: k.process.starttime,
            result: k.result,
        })
        .collect()
}

#[cfg(target_os = "linux")]
fn leak_json(l: &reaper::audit::Leak) -> LeakJson<'_> {
    LeakJson {
        root: proc_json(&l.root),
        evidence: l.evidence.iter().map(evidence_json).collect(),
        run: l.run,
        origin: l.origin.as_deref(),
        descendants: l.descendants.iter().map(proc_json).collect(),
    }
}

#[cfg(target_os = "linux")]
fn proc_json(p: &reaper::ProcessInfo) -> ProcJson<'_> {
    ProcJson {
        pid: p.pid,
        starttime: p.starttime,
        ppid: p.ppid,
        pgid: p.pgid,
        sid: p.sid,
        uid: p.uid,
        comm: &p.comm,
        exe: p.exe.as_deref(),
        cmdline: &p.cmdline,
        cgroup: p.cgroup.as_deref(),
        age_secs: p.age_secs,
    }
}

#[cfg(target_os = "linux")]
fn evidence_json(e: &reaper::audit::Evidence) -> EvidenceJson<'_> {
    use reaper::audit::Evidence as E;
    match e {
        E::EndedRun { run } => EvidenceJson::EndedRun { run: *run },
        E::StaleRunCgroup { cgroup } => EvidenceJson::StaleRunCgroup { cgroup },
        E::RunNotListed { run } => EvidenceJson::RunNotListed { run: *run },
        E::ServiceWithRunId { run } => EvidenceJson::ServiceWithRunId { run: *run },
        E::Reparented { to, to_comm } => EvidenceJson::Reparented { to: *to, to_comm },
        E::ForeignSession { sid, leader_gone } => EvidenceJson::ForeignSession {
            sid: *sid,
            leader_gone: *leader_gone,
        },
        E::ForeignGroup { pgid, leader_gone } => EvidenceJson::ForeignGroup {
            pgid: *pgid,
            leader_gone: *leader_gone,
        },
        E::NotUnitMain { cgroup } => EvidenceJson::NotUnitMain { cgroup },
        E::OwnSession => EvidenceJson::OwnSession,
        E::StdinHungUp { was } => EvidenceJson::StdinHungUp { was },
        E::StdinClosed => EvidenceJson::StdinClosed,
        _ => EvidenceJson::Unknown,
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

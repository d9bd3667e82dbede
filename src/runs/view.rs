//! What `reaper ps` shows of a run: its record, and what the host says about it now — whether
//! its owner lives, its processes, their memory and CPU time, and whether a limit was hit. From
//! the run's cgroup where it has one, else from `/proc`; never from the owner.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::{controllers, procfs};

use super::record::{self, Found, Liveness, Phase, RunRecord};
use crate::naming::{RunId, RUN_ID_ENV};
use crate::{BackendKind, Identity, Limits, ProcessInfo, StopReason};
use std::path::PathBuf;

/// Where a run is, as the host shows it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunState {
    /// The leader runs and its owner is watching.
    Running,
    /// The leader has exited; the rest may run on for the linger.
    Lingering,
    /// The owner is stopping it.
    Stopping,
    /// The owner is stopped (SIGSTOP) or traced: it enforces no timeout and answers nothing
    /// until continued. `reaper stop`/`kill` act without it.
    OwnerStopped,
    /// The owner is gone (SIGKILLed): what is left of the run waits for its guardian or the
    /// next stale sweep; `reaper kill` removes it now.
    Stale,
    /// Kept alive outside reaper (`reaper check --keep`).
    Kept,
    /// The owner is in another PID namespace: this process cannot tell whether it lives.
    Unknown,
}

impl RunState {
    /// `running`, `owner-stopped`, …
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Lingering => "lingering",
            RunState::Stopping => "stopping",
            RunState::OwnerStopped => "owner-stopped",
            RunState::Stale => "stale",
            RunState::Kept => "kept",
            RunState::Unknown => "unknown",
        }
    }
}

/// A run's memory now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Memory {
    /// Bytes in use: the cgroup's `memory.current` (page cache and kernel memory included), or
    /// the sum of the processes' resident sizes (shared pages counted in each).
    pub current_bytes: u64,
    /// The most it used at once (`memory.peak`); only from a cgroup with the memory controller.
    pub peak_bytes: Option<u64>,
    /// Where the figures come from: `cgroup` or `rss`.
    pub source: &'static str,
}

/// Which limits held the run back so far (cgroup counters that only rise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LimitsHit {
    /// `memory.events`: `max` (reclaim at the limit) or `oom_kill` above zero.
    pub memory: bool,
    /// `pids.events` `max` above zero: a fork was refused.
    pub pids: bool,
    /// `cpu.stat` `nr_throttled` above zero.
    pub cpu: bool,
}

/// A run as `reaper ps` shows it: its record, and the host's view of it now.
#[derive(Debug, Clone)]
pub struct RunStatus {
    /// The run.
    pub id: RunId,
    /// `PID-N`, as `reaper ps` shows it.
    pub short_id: String,
    /// The owner's boot, as the record says (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// The user the run runs as.
    pub uid: u32,
    /// The command line.
    pub argv: Vec<String>,
    /// When the leader started.
    pub started: SystemTime,
    /// Its containment (`None`: a name this version does not know).
    pub backend: Option<BackendKind>,
    /// The run's cgroup directory (cgroup backend), or the cgroup it was kept in.
    pub cgroup: Option<PathBuf>,
    /// The limits set on the run.
    pub limits: Option<Limits>,
    /// The leader.
    pub leader: Identity,
    /// The run's timeout.
    pub timeout: Option<Duration>,
    /// The first signal of its stop sequence, by number (`None`: none, SIGKILL after the
    /// grace).
    pub stop_signal: Option<i32>,
    /// The grace of its stop sequence.
    pub grace: Duration,
    /// The request the run serves, when its owner named one.
    pub request_id: Option<String>,
    /// Where the run is, as its owner last wrote it: running, lingering, stopping or kept.
    pub phase: RunState,
    /// Where it is now.
    pub state: RunState,
    /// Why it is stopping, once it is.
    pub stop_reason: Option<StopReason>,
    /// The owner as `ps` names it: `reaper run`, `reaper mcp`, or its command name.
    pub owner_command: Option<String>,
    /// Milliseconds since the leader started.
    pub age_ms: u64,
    /// Whether the leader is still alive.
    pub leader_alive: bool,
    /// How many live processes the run has.
    pub process_count: usize,
    /// Its processes, when asked for ([`ListOptions::processes`]).
    pub processes: Vec<ProcessInfo>,
    /// Its memory now, where it can be told.
    pub memory: Option<Memory>,
    /// CPU time used, in microseconds: the cgroup's `usage_usec`, or the processes' own and
    /// their waited-for children's.
    pub cpu_usec: Option<u64>,
    /// Which limits held it back.
    pub limits_hit: LimitsHit,
    /// The records directory it was read from.
    pub(crate) dir: std::path::PathBuf,
    /// Who wrote the record.
    pub(crate) file_uid: u32,
    /// What its owner wrote.
    pub(crate) record: RunRecord,
}

/// What [`list`] gathers.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ListOptions {
    /// Each run's processes, with their command lines (`reaper ps --tree`).
    pub processes: bool,
}

/// Every run this process may see (its user's; every user's for root), oldest first.
pub fn list(opts: ListOptions) -> Vec<RunStatus> {
    let mut all: Vec<RunStatus> = super::dir::visible()
        .into_iter()
        .flat_map(|dir| record::read_dir(&dir))
        .map(|f| status(f, opts))
        .collect();
    all.sort_by_key(|s| (s.started, s.id));
    all
}

/// The runs of this process (an MCP server's calls), as [`list`] shows them.
pub fn of_this_process(opts: ListOptions) -> Vec<RunStatus> {
    let me = procfs::self_identity().ok();
    let Some(dir) = super::dir::own() else {
        return Vec::new();
    };
    let mut mine: Vec<RunStatus> = record::read_dir(dir)
        .into_iter()
        .filter(|f| Some(f.record.id.owner()) == me)
        .map(|f| status(f, opts))
        .collect();
    mine.sort_by_key(|s| s.id);
    mine
}

/// Why [`find`] found no single run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindError {
    /// No run this process may see has that id.
    NoSuchRun(String),
    /// The short id names several runs (owners in different PID namespaces, or a stale one).
    Ambiguous(String, Vec<RunId>),
}

impl std::fmt::Display for FindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FindError::NoSuchRun(t) => write!(
                f,
                "no run {t:?} (runs of other users are visible to root only)"
            ),
            FindError::Ambiguous(t, ids) => {
                let ids: Vec<String> = ids.iter().map(RunId::to_string).collect();
                write!(
                    f,
                    "{t:?} names {} runs: give the full id ({})",
                    ids.len(),
                    ids.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for FindError {}

/// The run `text` names: its full id or its short `PID-N` form.
pub fn find(text: &str, opts: ListOptions) -> Result<RunStatus, FindError> {
    let mut hits: Vec<RunStatus> = super::dir::visible()
        .into_iter()
        .flat_map(|dir| record::read_dir(&dir))
        .filter(|f| f.record.id.matches(text))
        .map(|f| status(f, opts))
        .collect();
    match hits.len() {
        0 => Err(FindError::NoSuchRun(text.to_owned())),
        1 => Ok(hits.remove(0)),
        _ => Err(FindError::Ambiguous(
            text.to_owned(),
            hits.iter().map(|h| h.id).collect(),
        )),
    }
}

fn status(found: Found, opts: ListOptions) -> RunStatus {
    let r = &found.record;
    let owner = record::owner(r);
    let state = match (owner, r.phase) {
        (_, Phase::Kept) => RunState::Kept,
        (Liveness::Gone, _) => RunState::Stale,
        (Liveness::Unknown, _) => RunState::Unknown,
        (Liveness::Alive { stopped: true }, _) => RunState::OwnerStopped,
        (_, Phase::Stopping) => RunState::Stopping,
        (_, Phase::Lingering) => RunState::Lingering,
        (_, Phase::Running) => RunState::Running,
    };
    let leader_alive = procfs::is_alive(r.leader_pid, r.leader_starttime);
    let cgroup = record::cgroup_of(r, found.file_uid);
    let pids = match &cgroup {
        Some(cg) => cg
            .subtree_procs()
            .into_iter()
            .map(|p| p.as_raw_nonzero().get())
            .collect(),
        None if r.cgroup.is_none() && owner != Liveness::Unknown => tree_of(r, leader_alive),
        None => Vec::new(),
    };
    let processes = if opts.processes {
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let up = procfs::uptime_secs();
        pids.iter()
            .filter_map(|&pid| {
                let s = procfs::stat(pid).ok().filter(|s| !s.is_dead())?;
                Some(ProcessInfo {
                    pid,
                    starttime: s.starttime,
                    ppid: s.ppid,
                    pgid: s.pgid,
                    sid: s.sid,
                    state: s.state,
                    uid: None,
                    comm: s.comm,
                    exe: None,
                    cmdline: procfs::cmdline(pid),
                    cgroup: None,
                    age_secs: up.map_or(0, |up| (up - s.starttime as f64 / hz).max(0.0) as u64),
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let (memory, cpu_usec, limits_hit) = match &cgroup {
        Some(cg) => cgroup_figures(cg, &pids),
        None => (rss(&pids), proc_cpu(&pids), LimitsHit::default()),
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64;
    RunStatus {
        id: r.id,
        short_id: r.id.short(),
        boot_id: r.boot_id.clone(),
        uid: r.uid,
        argv: r.argv.clone(),
        started: UNIX_EPOCH + Duration::from_millis(r.started_unix_ms),
        backend: [
            BackendKind::Cgroup,
            BackendKind::Subreaper,
            BackendKind::Pgid,
        ]
        .into_iter()
        .find(|k| k.as_str() == r.backend),
        cgroup: r.cgroup.clone(),
        limits: r.limits,
        leader: Identity {
            pid: r.leader_pid,
            starttime: r.leader_starttime,
        },
        timeout: r.timeout_ms.map(Duration::from_millis),
        stop_signal: r.stop_signal,
        grace: Duration::from_millis(r.grace_ms),
        request_id: r.request_id.clone(),
        phase: match r.phase {
            Phase::Running => RunState::Running,
            Phase::Lingering => RunState::Lingering,
            Phase::Stopping => RunState::Stopping,
            Phase::Kept => RunState::Kept,
        },
        state,
        stop_reason: r.stop_reason,
        owner_command: matches!(owner, Liveness::Alive { .. }).then(|| owner_command(r.id)),
        age_ms: now_ms.saturating_sub(r.started_unix_ms),
        leader_alive,
        process_count: if opts.processes {
            processes.len()
        } else {
            pids.len()
        },
        processes,
        memory,
        cpu_usec,
        limits_hit,
        dir: found.dir,
        file_uid: found.file_uid,
        record: found.record,
    }
}

/// A run without a cgroup: the leader's subtree, and the owner's children that carry the run's
/// id (orphans of the tree that came back to a subreaper owner) with theirs.
fn tree_of(r: &RunRecord, leader_alive: bool) -> Vec<i32> {
    let mut pids = Vec::new();
    let id = r.id.to_string();
    // The record is its user's to write, and so its tree's: a leader is believed only if it is
    // that user's, started after the owner, and carries the run's id (PID 1, or a process
    // outside the run, is not listed as the run's whatever the record says).
    if leader_alive
        && r.leader_starttime >= r.id.owner().starttime
        && procfs::uid(r.leader_pid) == Some(r.uid)
        && procfs::environ_var(r.leader_pid, RUN_ID_ENV).as_deref() == Some(id.as_str())
    {
        pids.push(r.leader_pid);
        pids.extend(
            procfs::descendants(r.leader_pid, &[])
                .into_iter()
                .filter(|s| !s.is_dead())
                .map(|s| s.pid),
        );
    }
    let owner = r.id.owner();
    if procfs::is_alive(owner.pid, owner.starttime) {
        for c in procfs::children(owner.pid) {
            if c == r.leader_pid || pids.contains(&c) {
                continue;
            }
            if procfs::environ_var(c, RUN_ID_ENV).as_deref() == Some(id.as_str()) {
                pids.push(c);
                pids.extend(
                    procfs::descendants(c, &[])
                        .into_iter()
                        .filter(|s| !s.is_dead())
                        .map(|s| s.pid),
                );
            }
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn cgroup_figures(cg: &Cgroup, pids: &[i32]) -> (Option<Memory>, Option<u64>, LimitsHit) {
    let keyed = |file: &str| controllers::read_keyed(cg, file).unwrap_or_default();
    let get = |kv: &[(String, u64)], k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| *v);
    let memory = match controllers::read_value(cg, "memory.current") {
        Ok(current) => Some(Memory {
            current_bytes: current,
            peak_bytes: controllers::read_value(cg, "memory.peak").ok(),
            source: "cgroup",
        }),
        Err(_) => rss(pids),
    };
    let cpu = keyed("cpu.stat");
    let mem = keyed("memory.events");
    let hit = LimitsHit {
        memory: get(&mem, "max").is_some_and(|n| n > 0)
            || get(&mem, "oom_kill").is_some_and(|n| n > 0),
        pids: get(&keyed("pids.events"), "max").is_some_and(|n| n > 0),
        cpu: get(&cpu, "nr_throttled").is_some_and(|n| n > 0),
    };
    (memory, get(&cpu, "usage_usec"), hit)
}

/// The sum of the processes' resident sizes.
fn rss(pids: &[i32]) -> Option<Memory> {
    if pids.is_empty() {
        return None;
    }
    Some(Memory {
        current_bytes: pids.iter().filter_map(|&p| procfs::resident_bytes(p)).sum(),
        peak_bytes: None,
        source: "rss",
    })
}

/// CPU time of the processes and their waited-for children, in microseconds.
fn proc_cpu(pids: &[i32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let ticks: u64 = pids.iter().filter_map(|&p| procfs::cpu_ticks(p)).sum();
    Some(ticks * 1_000_000 / hz)
}

/// `reaper run`, `reaper mcp`, or the owner's command name.
fn owner_command(id: RunId) -> String {
    let pid = id.owner().pid;
    let cmd = procfs::cmdline(pid);
    let mut args = cmd.split(' ');
    let first = args.next().unwrap_or("");
    let name = std::path::Path::new(first)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(first);
    match (name, args.next()) {
        ("reaper", Some(face)) if !face.starts_with('-') => format!("reaper {face}"),
        ("timeout", _) => "timeout".to_owned(),
        ("", _) => procfs::stat(pid).map(|s| s.comm).unwrap_or_default(),
        (n, _) => n.to_owned(),
    }
}

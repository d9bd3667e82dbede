//! Ending a run from another process (`reaper stop`, `reaper kill`): asked of its owner
//! through its control socket, so that the owner runs its own stop sequence and reports why;
//! done directly when the owner cannot answer (stopped, not looking at its run) or is gone.
//!
//! Directly, with a cgroup: the first signal to every process of the cgroup through pidfds,
//! the grace, then `cgroup.kill`, waiting for `populated 0`, and the processes outside it that
//! carry the run's id (escapees) killed too; the cgroup is removed when the owner is gone (a stopped owner removes it itself once continued, and reports the stop from
//! the note left beside the record). Without a cgroup (subreaper, pgid) nothing names the tree
//! but the leader's descendants and the processes that carry the run's id
//! ([`super::RUN_ID_ENV`]): those are stopped (SIGSTOP until no new one appears) and killed
//! through pidfds; a process that cleared its environment and left the leader's subtree
//! cannot be found.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::procfs;
use reaper_platform::{signal, Signal};
use serde::Serialize;

use super::control::{Answer, Asker, Ended};
use super::id::RUN_ID_ENV;
use super::record::{self, Files, How, Owner, Phase};
use super::view::RunStatus;
use crate::containment::{self, sigstop, Process};

/// Options of [`end`].
#[derive(Debug, Clone, Copy)]
pub struct EndOptions {
    /// How long the owner gets to take the request before it is done without it.
    pub answer_within: Duration,
    /// How long to wait for the run to end once the owner took the request (`None`: the run's
    /// grace, plus the time a SIGKILL may take); then it is done without the owner.
    pub wait: Option<Duration>,
    /// The grace of a stop done directly (`None`: the run's own).
    pub grace: Option<Duration>,
}

impl Default for EndOptions {
    fn default() -> Self {
        EndOptions {
            answer_within: Duration::from_secs(1),
            wait: None,
            grace: None,
        }
    }
}

/// How a run was ended.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "by", rename_all = "kebab-case")]
pub enum Done {
    /// Its owner took the request and ran its stop; `ended`: how it says the run ended (`None`:
    /// it did not say in time, though the run is over).
    Owner {
        /// The owner's report.
        ended: Option<Ended>,
    },
    /// Without the owner.
    Directly {
        /// Why the owner did not do it: `stopped`, `not-answering`, `gone`, or `kept` (the
        /// run was kept alive outside reaper).
        owner: &'static str,
        /// How many processes were ended.
        killed: usize,
        /// Whether the run's cgroup was removed.
        cgroup_removed: bool,
        /// What could not be covered, when something could not (no cgroup).
        limits: Option<&'static str>,
    },
    /// The run had ended already.
    AlreadyOver,
}

/// Why [`end`] could not end a run.
#[derive(Debug)]
#[non_exhaustive]
pub enum EndError {
    /// Only the run's user and root may end it.
    NotPermitted {
        /// The run's user.
        run_uid: u32,
        /// This process's effective uid.
        uid: u32,
    },
    /// The owner is in another PID namespace: neither it nor the pids of its run mean anything
    /// here.
    OwnerElsewhere,
    /// The record names a cgroup that is not the run's (not under the cgroup2 mount, another
    /// name, another user's): nothing was signalled.
    NotTheRunsCgroup(std::path::PathBuf),
    /// Something was left alive after SIGKILL (uninterruptible sleep, a frozen process).
    Survived(String),
    /// The request could not be sent.
    Io(std::io::Error),
}

impl std::fmt::Display for EndError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndError::NotPermitted { run_uid, uid } => write!(
                f,
                "the run is uid {run_uid}'s; uid {uid} may not end it (only its user and root)"
            ),
            EndError::OwnerElsewhere => write!(
                f,
                "the run's owner is in another PID namespace; end it from there"
            ),
            EndError::NotTheRunsCgroup(p) => write!(
                f,
                "the record names {} as the run's cgroup, which is not a cgroup of this run; \
                 nothing was signalled",
                p.display()
            ),
            EndError::Survived(what) => write!(f, "still alive after SIGKILL: {what}"),
            EndError::Io(e) => write!(f, "cannot ask the run's owner: {e}"),
        }
    }
}

impl std::error::Error for EndError {}

/// After the grace, how long SIGKILL gets to empty the tree (as the owner's own stop allows).
const KILL_DEADLINE: Duration = Duration::from_secs(5);

/// Ends `run`: asks its owner (`how`: the plan's stop sequence, or SIGKILL for the whole tree)
/// and waits for the run to end; without an answer, or with the owner gone, does it directly.
/// Never waits on the owner longer than [`EndOptions`] say.
pub async fn end(run: &RunStatus, how: How, opts: EndOptions) -> Result<Done, EndError> {
    let uid = rustix::process::geteuid().as_raw();
    let r = &run.record;
    if uid != 0 && uid != r.uid {
        return Err(EndError::NotPermitted {
            run_uid: r.uid,
            uid,
        });
    }
    let files = Files::of(&run.dir, &run.id);
    // A kept run is out of its owner's hands: nobody else will remove it.
    let kept = r.phase == Phase::Kept;
    let owner = if kept { Owner::Gone } else { record::owner(r) };
    let why = match owner {
        Owner::Unknown => return Err(EndError::OwnerElsewhere),
        Owner::Gone if kept => "kept",
        Owner::Gone => "gone",
        Owner::Alive { stopped } => {
            // Sent even to a stopped owner: it finds the request when continued.
            let within = if stopped {
                Duration::ZERO
            } else {
                opts.answer_within
            };
            let socket = files.socket.clone();
            let run_uid = r.uid;
            let (asker, answer) = blocking(move || {
                let asker = Asker::new()?;
                let answer = asker.ask(&socket, run_uid, how, within)?;
                Ok((asker, answer))
            })
            .await
            .map_err(EndError::Io)?;
            match answer {
                Answer::Taken => {
                    let wait = opts
                        .wait
                        .unwrap_or(Duration::from_millis(r.grace_ms) + KILL_DEADLINE);
                    let until = Instant::now() + wait;
                    let ended = blocking(move || asker.ended(until))
                        .await
                        .map_err(EndError::Io)?;
                    if ended.is_some() || !files.record.exists() {
                        return Ok(Done::Owner { ended });
                    }
                    "not-answering"
                }
                Answer::NoListener if !files.record.exists() => return Ok(Done::AlreadyOver),
                _ if stopped => "stopped",
                _ => "not-answering",
            }
        }
    };
    // The owner reports the stop once it runs again (or nobody does, if it is gone).
    if owner != Owner::Gone {
        record::write_note(&run.dir, &run.id, r.uid, how);
    }
    let grace = match how {
        How::Stop => opts.grace.unwrap_or(Duration::from_millis(r.grace_ms)),
        How::Kill => Duration::ZERO,
    };
    let first = match how {
        How::Stop => r.stop_signal.and_then(signal::from_raw),
        How::Kill => None,
    };
    let done = match &r.cgroup {
        Some(path) => {
            if !path.exists() {
                Done::Directly {
                    owner: why,
                    killed: 0,
                    cgroup_removed: false,
                    limits: None,
                }
            } else {
                let cg = record::cgroup_of(r, run.file_uid)
                    .ok_or_else(|| EndError::NotTheRunsCgroup(path.clone()))?;
                let mut killed = end_cgroup(&cg, first, grace).await?;
                // What left the cgroup (root can) still carries the run's id.
                killed += end_tree(run, None, Duration::ZERO).await?;
                let removed = owner == Owner::Gone && cg.remove_subtree().is_ok();
                Done::Directly {
                    owner: why,
                    killed,
                    cgroup_removed: removed,
                    limits: None,
                }
            }
        }
        None => {
            let killed = end_tree(run, first, grace).await?;
            Done::Directly {
                owner: why,
                killed,
                cgroup_removed: false,
                limits: Some(
                    "the run has no cgroup: its processes were found as the leader's \
                     descendants and by REAPER_RUN_ID; one that cleared its environment and \
                     left the leader's subtree cannot be found",
                ),
            }
        }
    };
    if owner == Owner::Gone {
        files.remove();
    }
    Ok(done)
}

/// Runs `f` on a blocking thread (it waits on a socket).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(std::io::Error::other)?
}

/// The cgroup's stop: `first` (if any) to every process in it, SIGCONT, up to `grace` for it to
/// empty, then `cgroup.kill` until it is empty. Returns how many processes it ended.
async fn end_cgroup(
    cg: &Cgroup,
    first: Option<Signal>,
    grace: Duration,
) -> Result<usize, EndError> {
    let members: HashSet<i32> = cg
        .subtree_procs()
        .into_iter()
        .map(|p| p.as_raw_nonzero().get())
        .collect();
    if let Some(sig) = first.filter(|_| !grace.is_zero()) {
        let listed = in_cgroup(cg);
        containment::signal_each(listed.clone(), sig);
        containment::signal_each(listed, Signal::CONT);
        wait_empty(cg, Instant::now() + grace).await;
    }
    if let Err(e) = signal::to_cgroup_kill(cg) {
        if !e.is_not_found() {
            return Err(EndError::Survived(e.to_string()));
        }
    }
    if !wait_empty(cg, Instant::now() + KILL_DEADLINE).await {
        let left: Vec<String> = in_cgroup(cg).iter().map(Process::label).collect();
        return Err(EndError::Survived(left.join(", ")));
    }
    Ok(members.len())
}

/// The live processes of the cgroup (and below), named by pid and start time.
fn in_cgroup(cg: &Cgroup) -> Vec<Process> {
    cg.subtree_procs()
        .into_iter()
        .filter_map(|p| procfs::stat(p.as_raw_nonzero().get()).ok())
        .filter(|s| !s.is_dead())
        .map(Process::from)
        .collect()
}

/// Waits until the cgroup is empty (or gone), or `deadline`; whether it is.
async fn wait_empty(cg: &Cgroup, deadline: Instant) -> bool {
    let mut watch = cg.watch_events().ok();
    loop {
        match cg.populated() {
            Ok(false) => return true,
            Err(e) if e.is_not_found() => return true,
            _ => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match watch.as_mut() {
            Some(w) => {
                let _ = tokio::time::timeout(left, w.changed()).await;
            }
            None => tokio::time::sleep(left.min(Duration::from_millis(10))).await,
        }
    }
}

/// A run without a cgroup: `first` to what can be found of it, the grace, then SIGSTOP until
/// no new process appears and SIGKILL for all. Returns how many processes it ended.
async fn end_tree(
    run: &RunStatus,
    first: Option<Signal>,
    grace: Duration,
) -> Result<usize, EndError> {
    let mut ended: HashSet<crate::Identity> = HashSet::new();
    if let Some(sig) = first.filter(|_| !grace.is_zero()) {
        let found = tree(run);
        ended.extend(found.iter().map(Process::identity));
        containment::signal_each(found.clone(), sig);
        containment::signal_each(found, Signal::CONT);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && !tree(run).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + KILL_DEADLINE;
    loop {
        let killed = sigstop::stop(|_| tree(run)).kill();
        ended.extend(killed.iter().map(Process::identity));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let left = tree(run);
        if left.is_empty() {
            return Ok(ended.len());
        }
        if Instant::now() >= deadline {
            let left: Vec<String> = left.iter().map(Process::label).collect();
            return Err(EndError::Survived(left.join(", ")));
        }
    }
}

/// What can be found of a run without a cgroup: the leader and its descendants, and every
/// process of the run's user that carries the run's id, with its descendants.
fn tree(run: &RunStatus) -> Vec<Process> {
    let r = &run.record;
    let id = run.id.to_string();
    let mut roots: Vec<i32> = Vec::new();
    // The record is its user's to write: a leader that is not that user's is not believed.
    if procfs::is_alive(r.leader_pid, r.leader_starttime)
        && procfs::uid(r.leader_pid) == Some(r.uid)
    {
        roots.push(r.leader_pid);
    }
    for s in procfs::all() {
        if s.is_dead() || roots.contains(&s.pid) || procfs::uid(s.pid) != Some(r.uid) {
            continue;
        }
        if procfs::environ_var(s.pid, RUN_ID_ENV).as_deref() == Some(id.as_str()) {
            roots.push(s.pid);
        }
    }
    let me = std::process::id() as i32;
    let mut out: Vec<Process> = Vec::new();
    let mut seen = HashSet::new();
    for root in roots {
        let Ok(s) = procfs::stat(root) else { continue };
        let mut all = vec![s];
        all.extend(procfs::descendants(root, &[]));
        for s in all {
            if !s.is_dead() && s.pid != me && seen.insert(s.pid) {
                out.push(Process::from(s));
            }
        }
    }
    out
}

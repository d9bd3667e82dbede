//! Ending a run from another process (`reaper stop`, `reaper kill`): asked of its owner
//! through its control socket, so that the owner runs its own stop sequence and reports why;
//! done directly when the owner cannot answer (stopped, not looking at its run) or is gone.
//!
//! The record is the run's user's to write, and so every process of the run's: directly,
//! nothing it names is believed. What is signalled is what the kernel proves is the run's:
//! - its cgroup, when the one the record names is named after the run, under the cgroup2
//!   mount, and made by the run's user: the first signal to its members through pidfds, the
//!   grace, then `cgroup.kill`, waiting for `populated 0`; removed when the owner is gone (a
//!   stopped owner removes it itself once continued, and reports the stop from the note left
//!   beside the record);
//! - without one, and for what left it: the processes of the run's user carrying the run's id
//!   ([`super::RUN_ID_ENV`]) that started after the owner did — never this process, its
//!   ancestors or PID 1 — and their descendants, each found through its parent: stopped
//!   (SIGSTOP until no new one appears) and killed through pidfds. A process that cleared its
//!   environment and left that subtree cannot be found.
//!
//! Root ending a user's run does all of it as that user ([`super::as_user`]): a process the
//! user could not signal is not signalled.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reaper_platform::linux::cgroup::Cgroup;
use reaper_platform::linux::procfs::{self, ProcStat};
use reaper_platform::{signal, Signal};

use super::control::{Answer, Asker, Ended};
use super::dir::Dir;
use super::record::{self, How, Liveness, Names, Phase};
use super::view::RunStatus;
use crate::containment::{self, sigstop, Process};
use crate::naming::{RunId, RUN_ID_ENV};

/// Options of [`end`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
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
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Done {
    /// Its owner took the request and ran its stop; `ended`: how it says the run ended (`None`:
    /// it did not say in time, though the run is over).
    Owner {
        /// The owner's report.
        ended: Option<Ended>,
    },
    /// Without the owner.
    Directly {
        /// Why the owner did not do it: `stopped`, `not-answering`, `gone`, `kept` (the run
        /// was kept alive outside reaper), or `impostor` (something else listens at the run's
        /// socket).
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
    /// Something was left alive after SIGKILL (uninterruptible sleep, a frozen process).
    Survived(String),
    /// The owner refused the request, and said why (this process is one of a run's, or not
    /// the run's user): nothing was done.
    Refused(String),
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
            EndError::Survived(what) => write!(f, "still alive after SIGKILL: {what}"),
            EndError::Refused(why) => write!(f, "the run's owner refused: {why}"),
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
    let dir = Dir::open(&run.dir, run.file_uid).ok_or_else(|| {
        EndError::Io(std::io::Error::other(format!(
            "{} is no longer a records directory of uid {}",
            run.dir.display(),
            run.file_uid
        )))
    })?;
    let names = Names::of(&run.id);
    let recorded = |dir: &Dir| dir.age(&names.record).is_some();
    // A kept run is out of its owner's hands: nobody else will remove it.
    let kept = r.phase == Phase::Kept;
    let owner = if kept {
        Liveness::Gone
    } else {
        record::owner(r)
    };
    let why = match owner {
        Liveness::Unknown => return Err(EndError::OwnerElsewhere),
        Liveness::Gone if kept => "kept",
        Liveness::Gone => "gone",
        Liveness::Alive { stopped } => {
            // Sent even to a stopped owner: it finds the request when continued.
            let within = if stopped {
                Duration::ZERO
            } else {
                opts.answer_within
            };
            let (id, asking) = (run.id, dir.try_clone().map_err(EndError::Io)?);
            let answer = blocking(move || Asker::ask(&asking, &id, how, within))
                .await
                .map_err(EndError::Io)?;
            match answer {
                Answer::Taken(mut asker) => {
                    let wait = opts
                        .wait
                        .unwrap_or(Duration::from_millis(r.grace_ms) + KILL_DEADLINE);
                    let until = Instant::now() + wait;
                    let ended = blocking(move || asker.ended(until))
                        .await
                        .map_err(EndError::Io)?;
                    if ended.is_some() || !recorded(&dir) {
                        return Ok(Done::Owner { ended });
                    }
                    "not-answering"
                }
                Answer::Refused(why) => return Err(EndError::Refused(why)),
                Answer::NoListener if !recorded(&dir) => return Ok(Done::AlreadyOver),
                Answer::NotTheOwner(who) => {
                    tracing::warn!("run {}: {who}; ending it without", run.id);
                    "impostor"
                }
                _ if stopped => "stopped",
                _ => "not-answering",
            }
        }
    };
    let (dir_uid, dir_gid) = (dir.uid(), dir.gid());
    let direct = Direct {
        id: run.id,
        dir,
        how,
        owner_gone: owner == Liveness::Gone,
        why,
        grace: match how {
            How::Stop => opts.grace.unwrap_or(Duration::from_millis(r.grace_ms)),
            How::Kill => Duration::ZERO,
        },
        first: match how {
            How::Stop => r.stop_signal.and_then(signal::from_raw),
            How::Kill => None,
        },
        cgroup: record::cgroup_of(r, run.file_uid),
        claimed_cgroup: r.cgroup.clone(),
    };
    if uid == 0 && dir_uid != 0 {
        super::as_user::run(dir_uid, dir_gid, move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(EndError::Io)?;
            rt.block_on(direct.run())
        })
        .await
        .map_err(EndError::Io)?
    } else {
        direct.run().await
    }
}

/// Runs `f` on a blocking thread (it waits on a socket).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(std::io::Error::other)?
}

/// A run ended without its owner: only what the kernel proves is the run's.
struct Direct {
    id: RunId,
    /// The records directory, as opened before anything was asked: what is at its path now
    /// may be another.
    dir: Dir,
    how: How,
    owner_gone: bool,
    why: &'static str,
    grace: Duration,
    first: Option<Signal>,
    /// The record's cgroup, when it is provably the run's.
    cgroup: Option<Cgroup>,
    /// What the record said, for the report.
    claimed_cgroup: Option<PathBuf>,
}

impl Direct {
    async fn run(self) -> Result<Done, EndError> {
        // The owner reports the stop once it runs again (or nobody does, if it is gone).
        if !self.owner_gone {
            record::write_note(&self.dir, &self.id, self.how);
        }
        let spare = spared();
        let tree = Tree {
            id: self.id,
            uid: self.dir.uid(),
            spare: &spare,
        };
        let mut killed = 0;
        let mut removed = false;
        let mut limits = None;
        match &self.cgroup {
            Some(cg) if cg.path().exists() => {
                killed += end_cgroup(cg, self.first, self.grace).await?;
                // What left the cgroup (root can) still carries the run's id.
                killed += end_tree(&tree, None, Duration::ZERO).await?;
                removed = self.owner_gone && cg.remove_subtree().is_ok();
            }
            Some(_) => killed += end_tree(&tree, None, Duration::ZERO).await?,
            None => {
                if let Some(claimed) = &self.claimed_cgroup {
                    tracing::warn!(
                        "run {}: the record names {} as its cgroup, which is not the run's; \
                         only the processes carrying the run's id are ended",
                        self.id,
                        claimed.display()
                    );
                }
                killed += end_tree(&tree, self.first, self.grace).await?;
                limits = Some(
                    "the run has no cgroup of its own: its processes were found by \
                     REAPER_RUN_ID and as their descendants; one that cleared its environment \
                     and left that subtree cannot be found",
                );
            }
        }
        if self.owner_gone {
            Names::of(&self.id).remove(&self.dir);
        }
        Ok(Done::Directly {
            owner: self.why,
            killed,
            cgroup_removed: removed,
            limits,
        })
    }
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

/// `first` to what can be found of the run by its id, the grace, then SIGSTOP until no new
/// process appears and SIGKILL for all. Returns how many processes it ended; a process that
/// could not be signalled (the user may not) is reported as a survivor.
async fn end_tree(
    tree: &Tree<'_>,
    first: Option<Signal>,
    grace: Duration,
) -> Result<usize, EndError> {
    let mut ended: HashSet<crate::Identity> = HashSet::new();
    if let Some(sig) = first.filter(|_| !grace.is_zero()) {
        let found = tree.find();
        ended.extend(found.iter().map(Process::identity));
        containment::signal_each(found.clone(), sig);
        containment::signal_each(found, Signal::CONT);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && !tree.find().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + KILL_DEADLINE;
    loop {
        let killed = sigstop::stop(|_| tree.find()).kill();
        ended.extend(killed.iter().map(Process::identity));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let left = tree.find();
        if left.is_empty() {
            return Ok(ended.len());
        }
        if Instant::now() >= deadline {
            let left: Vec<String> = left.iter().map(Process::label).collect();
            return Err(EndError::Survived(left.join(", ")));
        }
    }
}

/// This process and its ancestors: never part of a run it ends, whatever they carry.
fn spared() -> HashSet<i32> {
    let mut out = HashSet::from([1]);
    let mut p = std::process::id() as i32;
    while p > 1 && out.insert(p) {
        match procfs::stat(p) {
            Ok(s) => p = s.ppid,
            Err(_) => break,
        }
    }
    out
}

/// What is provably a run's without its cgroup.
struct Tree<'a> {
    id: RunId,
    /// The run's user.
    uid: u32,
    /// Never signalled: PID 1, this process, its ancestors.
    spare: &'a HashSet<i32>,
}

impl Tree<'_> {
    /// The processes of the run's user that carry the run's id and started after its owner
    /// did, and their descendants (each a child of one found, by its own `stat`).
    fn find(&self) -> Vec<Process> {
        let id = self.id.to_string();
        let since = self.id.owner().starttime;
        let all = procfs::all();
        let mut children: HashMap<i32, Vec<&ProcStat>> = HashMap::new();
        for s in &all {
            children.entry(s.ppid).or_default().push(s);
        }
        let mut queue: Vec<&ProcStat> = all
            .iter()
            .filter(|s| {
                !s.is_dead()
                    && !self.spare.contains(&s.pid)
                    && s.starttime >= since
                    && procfs::uid(s.pid) == Some(self.uid)
                    && procfs::environ_var(s.pid, RUN_ID_ENV).as_deref() == Some(id.as_str())
            })
            .collect();
        let mut seen: HashSet<i32> = queue.iter().map(|s| s.pid).collect();
        let mut out = Vec::new();
        while let Some(s) = queue.pop() {
            out.push(Process::from(s.clone()));
            for c in children.get(&s.pid).map(Vec::as_slice).unwrap_or(&[]) {
                // A child starts after its parent: a later pid holder is not one.
                if !c.is_dead()
                    && c.starttime >= s.starttime
                    && !self.spare.contains(&c.pid)
                    && seen.insert(c.pid)
                {
                    queue.push(c);
                }
            }
        }
        out
    }
}

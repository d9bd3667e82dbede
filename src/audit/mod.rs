//! A census of the processes on this machine that look leaked (Linux): what `reaper audit`
//! prints. Read-only; [`kill_leaks`] and [`kill_chosen`] end what the caller chose, by pidfd.
//!
//! Only a process whose parent is gone can have been left behind: the census looks at the
//! *orphans* — processes whose parent is PID 1 or a user's service manager (`systemd --user`,
//! a child subreaper) — and at the trees below them. Each is sorted by what it carries:
//!
//! - **certain**: its environment names a run ([`crate::runs::RUN_ID_ENV`]) whose reaper is
//!   provably gone (no process of this PID namespace has its pid and start time), or it lives
//!   in a run cgroup whose reaper is gone. No heuristic is involved: such a process outlived
//!   the reaper that was to end it. Except a service manager's own service (its unit's main
//!   process), which may carry a run's id only because someone imported it into the manager's
//!   environment: that is a suspect.
//! - **suspect**: an orphan with evidence that it was not started by its parent but reparented
//!   to it: its session or process group is another session's or group's (it was started in
//!   there, by a process that is gone); under systemd, it is not its unit's main process (or
//!   lives in a scope, which systemd never starts processes in); on a host whose PID 1 is no
//!   service manager, it leads a session of its own (what `setsid` leaves behind — and what a
//!   daemon looks like: hence only a suspect). Its stdin hung up or closed adds to it.
//!
//! Never listed: kernel threads, PID 1, zombies, the processes of live runs (in a live run's
//! cgroup, or carrying the id of a run whose owner lives and lists it), kept runs (`reaper
//! check --keep`), reaper's guardians, and this process and its ancestors.

mod kill;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use reaper_platform::linux::procfs::{self, ProcStat};

pub use kill::{kill_chosen, kill_leaks, Killed};

use crate::runs::{record, RunId, RUN_ID_ENV};
use crate::{Identity, ProcessInfo};

/// What the census found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Census {
    /// Trees that outlived their reaper, for certain.
    pub certain: Vec<Leak>,
    /// Trees that look leaked.
    pub suspect: Vec<Leak>,
    /// How many processes were looked at.
    pub scanned: usize,
    /// Orphans whose environment this process may not read (other users', without root):
    /// a run's id there cannot be seen.
    pub unreadable: usize,
    /// PID 1's command name; `systemd` enables the unit checks.
    pub init: String,
    /// How long the census took, in milliseconds.
    pub elapsed_ms: u64,
    /// Why nothing could be looked at, when so (a `/proc` of another PID namespace).
    pub refused: Option<String>,
}

/// One leaked tree: its root (an orphan) and what is below it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Leak {
    /// The orphan at the top of the tree.
    pub root: ProcessInfo,
    /// Why it is listed.
    pub evidence: Vec<Evidence>,
    /// The run it belonged to, when its environment or cgroup says.
    pub run: Option<RunId>,
    /// Where it came from, as far as can be told: the run's command line (from its record),
    /// the session or process group it was started in.
    pub origin: Option<String>,
    /// Its live descendants.
    pub descendants: Vec<ProcessInfo>,
}

impl Leak {
    /// The root and its descendants, named for good.
    pub fn identities(&self) -> Vec<Identity> {
        std::iter::once(&self.root)
            .chain(&self.descendants)
            .map(ProcessInfo::identity)
            .collect()
    }
}

/// Why a process is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// Its environment names this run, whose reaper is gone.
    EndedRun {
        /// The run.
        run: RunId,
    },
    /// It lives in this run's cgroup, whose reaper is gone.
    StaleRunCgroup {
        /// The cgroup.
        cgroup: String,
    },
    /// Its environment names a run whose reaper lives but does not list it (the run is over,
    /// or was never recorded).
    RunNotListed {
        /// The run.
        run: RunId,
    },
    /// A service manager's unit main process that carries the id of an ended run: most likely
    /// imported into the manager's environment, so only a suspect.
    ServiceWithRunId {
        /// The run.
        run: RunId,
    },
    /// Its parent is PID 1 or a service manager: its own parent is gone.
    Reparented {
        /// The parent it has now.
        to: i32,
        /// …and its command name.
        to_comm: String,
    },
    /// Its session is neither its own nor its parent's: it was started inside that session.
    ForeignSession {
        /// The session.
        sid: i32,
        /// Whether the session's leader is gone.
        leader_gone: bool,
    },
    /// Its process group is neither its own nor its parent's.
    ForeignGroup {
        /// The process group.
        pgid: i32,
        /// Whether the group's leader is gone.
        leader_gone: bool,
    },
    /// Under systemd: not the main process of its unit (an older process is), or in a scope.
    NotUnitMain {
        /// The unit's cgroup.
        cgroup: String,
    },
    /// On a host without a service manager as PID 1: an orphan leading a session of its own
    /// (what `setsid` leaves behind, and what a daemon looks like).
    OwnSession,
    /// Its stdin is a terminal that hung up (or was removed).
    StdinHungUp {
        /// What stdin was.
        was: String,
    },
    /// It has no stdin.
    StdinClosed,
}

impl Evidence {
    fn certain(&self) -> bool {
        matches!(
            self,
            Evidence::EndedRun { .. } | Evidence::StaleRunCgroup { .. }
        )
    }
}

/// Takes the census.
pub fn census() -> Census {
    let t0 = Instant::now();
    if procfs::is_foreign() {
        return Census {
            certain: Vec::new(),
            suspect: Vec::new(),
            scanned: 0,
            unreadable: 0,
            init: String::new(),
            elapsed_ms: 0,
            refused: Some(
                "/proc shows another PID namespace than this process's: its pids are not this \
                 namespace's; mount a /proc of this namespace, or audit from the host"
                    .into(),
            ),
        };
    }
    let table = process_table();
    let by_pid: HashMap<i32, &ProcStat> = table.iter().map(|s| (s.pid, s)).collect();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for s in &table {
        children.entry(s.ppid).or_default().push(s.pid);
    }
    let init = by_pid.get(&1).map(|s| s.comm.clone()).unwrap_or_default();
    let systemd = init == "systemd";
    let managers: HashSet<i32> = table
        .iter()
        .filter(|s| {
            s.pid == 1 || (s.comm == "systemd" && procfs::cmdline(s.pid).contains("--user"))
        })
        .map(|s| s.pid)
        .collect();
    let me = std::process::id() as i32;
    let mut mine: HashSet<i32> = HashSet::new();
    let mut p = me;
    while let Some(s) = by_pid.get(&p) {
        mine.insert(p);
        if s.ppid <= 0 || !mine.insert(s.ppid) {
            break;
        }
        p = s.ppid;
    }
    let ctx = Ctx {
        by_pid: &by_pid,
        children: &children,
        systemd,
        pidns: procfs::pid_namespace().ok(),
        records: Records::default(),
    };
    let mut census = Census {
        certain: Vec::new(),
        suspect: Vec::new(),
        scanned: table.len(),
        unreadable: 0,
        init,
        elapsed_ms: 0,
        refused: None,
    };
    for s in &table {
        if !managers.contains(&s.ppid) || s.pid == 1 || s.is_dead() || mine.contains(&s.pid) {
            continue;
        }
        match ctx.classify(s) {
            Verdict::Clean => {}
            Verdict::Unreadable => census.unreadable += 1,
            Verdict::Leak(certain, leak) => {
                if certain {
                    census.certain.push(*leak);
                } else {
                    census.suspect.push(*leak);
                }
            }
        }
    }
    census.certain.sort_by_key(|l| (l.run, l.root.starttime));
    census.suspect.sort_by_key(|l| l.root.starttime);
    census.elapsed_ms = t0.elapsed().as_millis() as u64;
    census
}

/// Every process of the machine. The kernel writes each `/proc/PID/stat` on demand, which is
/// most of the census's time on a busy host: split over a few threads.
fn process_table() -> Vec<ProcStat> {
    let pids: Vec<i32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let read = |part: &[i32]| -> Vec<ProcStat> {
        part.iter().filter_map(|&p| procfs::stat(p).ok()).collect()
    };
    if threads < 2 || pids.len() < 1024 {
        return read(&pids);
    }
    let part = pids.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let running: Vec<_> = pids
            .chunks(part)
            .map(|c| scope.spawn(move || read(c)))
            .collect();
        running
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect()
    })
}

enum Verdict {
    Clean,
    /// Looked clean, but its environment could not be read.
    Unreadable,
    Leak(bool, Box<Leak>),
}

struct Ctx<'a> {
    by_pid: &'a HashMap<i32, &'a ProcStat>,
    children: &'a HashMap<i32, Vec<i32>>,
    systemd: bool,
    pidns: Option<u64>,
    records: Records,
}

/// What a run's owner and record say, looked up once per run.
#[derive(Default)]
struct Records {
    seen: std::cell::RefCell<HashMap<RunId, RunFate>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RunFate {
    /// The owner lives and lists it: the run is live.
    Live,
    /// Kept on purpose.
    Kept,
    /// The owner is gone.
    Ended,
    /// The owner lives but lists no such run.
    NotListed,
    /// Another PID namespace's: nothing can be told.
    Unknown,
}

impl Ctx<'_> {
    fn fate(&self, id: RunId) -> RunFate {
        if let Some(f) = self.records.seen.borrow().get(&id) {
            return *f;
        }
        let found = crate::runs::dir::visible()
            .into_iter()
            .find_map(|dir| record::read_one(&dir, &id));
        let fate = if self.pidns != Some(id.pidns()) || procfs::is_foreign() {
            RunFate::Unknown
        } else if found
            .as_ref()
            .is_some_and(|f| f.record.phase == record::Phase::Kept)
        {
            RunFate::Kept
        } else if !procfs::is_alive(id.owner().pid, id.owner().starttime) {
            RunFate::Ended
        } else if found.is_some() {
            RunFate::Live
        } else {
            RunFate::NotListed
        };
        self.records.seen.borrow_mut().insert(id, fate);
        fate
    }

    fn classify(&self, s: &ProcStat) -> Verdict {
        // A guardian outlives its reaper by design, for a moment, to clean up after it.
        let cmdline = procfs::cmdline(s.pid);
        if cmdline.starts_with("reaper guardian ") {
            return Verdict::Clean;
        }
        let cgroup = procfs::cgroup(s.pid);
        let unit_main = self.systemd && self.unit_main(s, cgroup.as_deref());
        let mut evidence = Vec::new();
        let mut run = None;
        // What the run cgroup on its path says: contained (a live run's, a kept one, one of
        // another PID namespace), or its reaper is gone.
        if let Some(cg) = &cgroup {
            for part in cg.split('/') {
                if crate::naming::is_kept_name(part) {
                    return Verdict::Clean;
                }
                if let Some(id) = RunId::from_cgroup_name(part) {
                    if self.fate(id) != RunFate::Ended {
                        return Verdict::Clean;
                    }
                    run = Some(id);
                    evidence.push(Evidence::StaleRunCgroup { cgroup: cg.clone() });
                }
            }
        }
        // What its run id says.
        let tag = procfs::environ_var(s.pid, RUN_ID_ENV);
        let readable = tag.is_some() || environ_readable(s.pid);
        if let Some(id) = tag.as_deref().and_then(|t| t.parse::<RunId>().ok()) {
            match self.fate(id) {
                RunFate::Live | RunFate::Kept | RunFate::Unknown if evidence.is_empty() => {
                    return Verdict::Clean;
                }
                RunFate::Live | RunFate::Kept | RunFate::Unknown => {}
                // No process belongs to a run whose reaper started after it.
                RunFate::Ended if s.starttime < id.owner().starttime => {}
                RunFate::Ended if unit_main => {
                    evidence.push(Evidence::ServiceWithRunId { run: id })
                }
                RunFate::Ended => {
                    run = Some(id);
                    evidence.push(Evidence::EndedRun { run: id });
                }
                RunFate::NotListed => {
                    run = run.or(Some(id));
                    evidence.push(Evidence::RunNotListed { run: id });
                }
            }
        }
        let certain = !unit_main && evidence.iter().any(Evidence::certain);
        // Whether it was started by its parent, or reparented to it. A unit's main process
        // is its manager's own child, whatever its session says.
        let parent = self.by_pid.get(&s.ppid);
        if !unit_main {
            let gone = |pid: i32| !self.by_pid.contains_key(&pid);
            if s.sid > 0 && s.sid != s.pid && Some(s.sid) != parent.map(|p| p.sid) {
                evidence.push(Evidence::ForeignSession {
                    sid: s.sid,
                    leader_gone: gone(s.sid),
                });
            }
            if s.pgid > 0
                && s.pgid != s.pid
                && s.pgid != s.sid
                && Some(s.pgid) != parent.map(|p| p.pgid)
            {
                evidence.push(Evidence::ForeignGroup {
                    pgid: s.pgid,
                    leader_gone: gone(s.pgid),
                });
            }
            match &cgroup {
                Some(cg) if self.systemd => {
                    evidence.push(Evidence::NotUnitMain { cgroup: cg.clone() })
                }
                _ if !self.systemd && s.sid == s.pid && s.ppid == 1 => {
                    evidence.push(Evidence::OwnSession)
                }
                _ => {}
            }
        }
        if evidence.is_empty() {
            return if readable {
                Verdict::Clean
            } else {
                Verdict::Unreadable
            };
        }
        match procfs::fd_target(s.pid, 0) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                evidence.push(Evidence::StdinClosed)
            }
            Ok(t) => {
                let t = t.to_string_lossy().into_owned();
                let tty = t.starts_with("/dev/pts/") || t.starts_with("/dev/tty");
                if tty && (t.ends_with(" (deleted)") || !std::path::Path::new(&t).exists()) {
                    evidence.push(Evidence::StdinHungUp { was: t });
                }
            }
            Err(_) => {}
        }
        evidence.insert(
            0,
            Evidence::Reparented {
                to: s.ppid,
                to_comm: parent.map(|p| p.comm.clone()).unwrap_or_default(),
            },
        );
        let origin = self.origin(s, run);
        let root = self.proc(s, Some(cmdline), cgroup);
        let descendants = self.descendants(s.pid);
        Verdict::Leak(
            certain,
            Box::new(Leak {
                root,
                evidence,
                run,
                origin,
                descendants,
            }),
        )
    }

    /// Under systemd: whether the manager started `s` itself — a helper in the manager's own
    /// cgroup, or the main process of its unit (the oldest process of the nearest `.service`
    /// on its cgroup path; a delegated unit's main process may live in its `init.scope`).
    fn unit_main(&self, s: &ProcStat, cgroup: Option<&str>) -> bool {
        let Some(cg) = cgroup else { return false };
        if procfs::cgroup(s.ppid).as_deref() == Some(cg) {
            return true;
        }
        let parts: Vec<&str> = cg.split('/').collect();
        let Some(n) = parts.iter().rposition(|c| c.ends_with(".service")) else {
            return false;
        };
        let unit = parts[..=n].join("/");
        let Ok(mount) = crate::containment::cgroup::place::mount_point() else {
            return false;
        };
        let dir = mount.join(unit.trim_start_matches('/'));
        let oldest = reaper_platform::linux::cgroup::Cgroup::at(dir)
            .subtree_procs()
            .into_iter()
            .filter_map(|p| self.by_pid.get(&p.as_raw_nonzero().get()))
            .filter(|p| !p.is_dead())
            .min_by_key(|p| (p.starttime, p.pid));
        oldest.is_some_and(|o| o.pid == s.pid)
    }

    /// Where the tree came from: its run's command line, or the session or group it was
    /// started in, when their leaders live.
    fn origin(&self, s: &ProcStat, run: Option<RunId>) -> Option<String> {
        if let Some(id) = run {
            let argv = crate::runs::dir::visible()
                .into_iter()
                .find_map(|dir| record::read_one(&dir, &id))
                .map(|f| f.record.argv.join(" "));
            return Some(match argv {
                Some(a) => format!(
                    "run {} ({a}), reaper pid {} gone",
                    id.short(),
                    id.owner().pid
                ),
                None => format!("run {}, reaper pid {} gone", id.short(), id.owner().pid),
            });
        }
        for (what, leader) in [("process group", s.pgid), ("session", s.sid)] {
            if leader > 0 && leader != s.pid {
                if let Some(l) = self.by_pid.get(&leader) {
                    return Some(format!("{what} {leader}, led by {} (pid {leader})", l.comm));
                }
            }
        }
        None
    }

    fn proc(&self, s: &ProcStat, cmdline: Option<String>, cgroup: Option<String>) -> ProcessInfo {
        ProcessInfo {
            pid: s.pid,
            starttime: s.starttime,
            ppid: s.ppid,
            pgid: s.pgid,
            sid: s.sid,
            state: s.state,
            uid: procfs::uid(s.pid),
            comm: s.comm.clone(),
            exe: procfs::exe(s.pid),
            cmdline: cmdline.unwrap_or_else(|| procfs::cmdline(s.pid)),
            cgroup,
            age_secs: procfs::age_secs(s.starttime).map_or(0, |a| a as u64),
        }
    }

    /// The live processes below `pid`, parents first.
    fn descendants(&self, pid: i32) -> Vec<ProcessInfo> {
        let mut out = Vec::new();
        let mut queue = vec![pid];
        let mut seen = HashSet::from([pid]);
        while let Some(p) = queue.pop() {
            for &c in self.children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
                if !seen.insert(c) {
                    continue;
                }
                if let Some(s) = self.by_pid.get(&c).filter(|s| !s.is_dead()) {
                    out.push(self.proc(s, None, procfs::cgroup(c)));
                    queue.push(c);
                }
            }
        }
        out
    }
}

/// Whether this process may read `pid`'s environment (its own user's, or root).
fn environ_readable(pid: i32) -> bool {
    std::fs::File::open(format!("/proc/{pid}/environ")).is_ok()
}

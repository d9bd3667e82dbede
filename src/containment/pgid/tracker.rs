//! Process-table bookkeeping for the `pgid` backend: which processes, process groups and
//! sessions belong to a run, learnt by reading the process table again and again. Portable: the
//! same code runs on Linux (table from `/proc`) and macOS (table from `ps`), and is tested here.
//!
//! Where there is neither a cgroup nor a subreaper (macOS), nothing in the kernel keeps a run's
//! processes together once one calls `setsid()` and its parent exits: it is reparented to
//! launchd and shares nothing with the leader any more. What the tracker relies on instead:
//!
//! - A process group or session is named after the pid of the process that created it, and a
//!   pid is not reused while a process, group or session of that number exists (POSIX, "process
//!   ID reuse"). So a group or session a run's process was seen in keeps naming that run's
//!   processes for as long as it has a member, and one named after a process of the run that was
//!   alive at the last look was created by it. Conversely, a live process whose pid is the
//!   number of a remembered group or session but whose start time is not its founder's means
//!   the number was freed and reused: the tracker forgets it rather than claim (and kill) the
//!   newcomer's processes.
//! - A process can only join a group of its own session, and a new session starts out holding
//!   only its creator. The leader starts in reaper's session (the user's terminal), so a process
//!   of the run can join any group of it: reaper's own, the login shell's, another job's. Such a
//!   group is not the run's, and neither are its other members.
//!
//! So a group or session is remembered only if the run created it: its founder (the process
//! whose pid is its number) was a process of the run — claimed in this look, or alive at the
//! last — or, for a group, it lies in a session the run created (every process of such a
//! session descends from its founder). The leader's group counts: reaper creates it. A process
//! of the run that joins any other group is followed by itself (by pid and start time, and
//! through its children), but that group is never remembered, claimed or signalled. reaper's
//! own group and session are never remembered at all.
//!
//! Each look ([`Tracker::observe`]) claims, until nothing new turns up: the leader; every
//! process remembered by pid and start time; every process in a remembered group or session, or
//! in one named after a process of the run alive at the last look; every child of a claimed
//! process. Everything claimed is remembered, and with it its group and session when the run
//! created them (above).
//!
//! A process outside the run that moves itself into a group of the run (only a process of
//! reaper's own session can, and only on purpose) is taken for the run's, with its children.
//!
//! What it cannot see: a process born and gone between two looks. A double fork with `setsid()`
//! in the middle (fork, setsid, fork, the middle exits) finished within one poll interval leaves
//! an orphan in a session nobody of the run was ever seen in. On Linux the pgid backend closes
//! that gap with reaper's child-subreaper adoption ([`Adopter`]); on macOS it stays open.

use std::collections::{HashMap, HashSet};

use reaper_platform::proctable::ProcStat;

pub use reaper_platform::process::Identity;

/// A process that adopts the run's orphans (reaper as Linux child subreaper). Its children born
/// after the leader are the run's: orphans of the tree, whatever session they moved to. Only
/// meaningful while this process holds a single run; the caller decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adopter {
    pub pid: i32,
}

/// What one look found.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The run's live (non-zombie) processes.
    pub members: Vec<ProcStat>,
    /// How many processes were remembered for the first time.
    pub recorded: usize,
}

/// A group or session is forgotten after this many looks in a row found it empty: once empty
/// it can only come back as a new group of a reused pid, which is not the run's. Two looks, not
/// one, because a `/proc` walk is not atomic: a group's only member may fork and exit while
/// the walk is between the child and the parent.
const FORGET_AFTER_EMPTY_LOOKS: u32 = 2;

/// The run's bookkeeping.
#[derive(Debug)]
pub struct Tracker {
    own_pgid: i32,
    own_sid: i32,
    leader_pid: Option<i32>,
    leader: Option<Identity>,
    /// Processes of the run alive at the last look, by pid.
    procs: HashMap<i32, Recorded>,
    /// Remembered groups and sessions.
    groups: HashMap<i32, Remembered>,
    sessions: HashMap<i32, Remembered>,
}

#[derive(Debug, Clone)]
struct Recorded {
    starttime: u64,
}

/// A remembered group or session.
#[derive(Debug, Clone, Default)]
struct Remembered {
    /// How many looks in a row found it empty.
    empty_looks: u32,
    /// The start time of its founder (the process whose pid is its number), when the run's
    /// founder was seen. A live process with that pid and another start time means the number
    /// was freed and reused: the kernel keeps a pid allocated while a group or session of that
    /// number has a member, so the run's group or session is gone.
    founder: Option<u64>,
}

impl Tracker {
    /// A tracker for a run of a process whose own group and session are `own_pgid`, `own_sid`:
    /// these are never remembered, whoever is seen in them.
    pub fn new(own_pgid: i32, own_sid: i32) -> Self {
        Self {
            own_pgid,
            own_sid,
            leader_pid: None,
            leader: None,
            procs: HashMap::new(),
            groups: HashMap::new(),
            sessions: HashMap::new(),
        }
    }

    /// The leader, our unreaped child (so the pid is its until we reap it), started in group
    /// `pgid`. Its start time is taken at the next look.
    pub fn set_leader(&mut self, pid: i32, pgid: i32) {
        self.leader_pid = Some(pid);
        // reaper created this group for the run: the leader enters it before running any code
        // of its own.
        if pgid > 0 && pgid != self.own_pgid {
            self.groups.entry(pgid).or_default();
        }
    }

    /// The leader's start time, when known before the first look (it must be taken before the
    /// leader is reaped: after that its pid may name another process).
    pub fn leader_started(&mut self, starttime: u64) {
        if let Some(pid) = self.leader_pid {
            self.leader = Some(Identity { pid, starttime });
        }
    }

    // `leader`, `sessions` and `recorded` are for the tests: the backend signals `groups` only.
    #[cfg(test)]
    pub fn leader(&self) -> Option<Identity> {
        self.leader
    }

    /// Remembered process groups, to signal with `killpg`: only groups the run created.
    pub fn groups(&self) -> Vec<i32> {
        let mut g: Vec<i32> = self.groups.keys().copied().collect();
        g.sort_unstable();
        g
    }

    /// Remembered sessions (no signal reaches a session as such; they only claim members).
    #[cfg(test)]
    pub fn sessions(&self) -> Vec<i32> {
        let mut s: Vec<i32> = self.sessions.keys().copied().collect();
        s.sort_unstable();
        s
    }

    /// Processes of the run alive at the last look.
    #[cfg(test)]
    pub fn recorded(&self) -> Vec<Identity> {
        let mut v: Vec<Identity> = self
            .procs
            .iter()
            .map(|(&pid, r)| Identity {
                pid,
                starttime: r.starttime,
            })
            .collect();
        v.sort_unstable_by_key(|i| i.pid);
        v
    }

    /// What a look must find empty for [`observe`](Self::observe) to claim nobody, when that
    /// can be told without the whole table: the leader (known by identity) and the remembered
    /// groups, with no process of the run alive at the last look and no remembered session.
    /// Then only these can claim: a process with the leader's identity, a member of one of
    /// these groups, or (with an adopter) a child of the adopter. `None` when a whole look is
    /// needed: a recorded process may have founded a group or session since the last look,
    /// and a session's members cannot be probed.
    pub fn quick_look(&self) -> Option<(Identity, Vec<i32>)> {
        let leader = self.leader?;
        (self.procs.is_empty() && self.sessions.is_empty()).then(|| (leader, self.groups()))
    }

    /// The bookkeeping of a look that found nobody, as [`observe`](Self::observe) leaves it
    /// for a table in which none of the [`quick_look`](Self::quick_look) groups has a member;
    /// `started` has the start time of each live process whose pid is one of their numbers.
    pub fn observe_nobody(&mut self, started: &HashMap<i32, u64>) -> Observation {
        forget_reused(&mut self.groups, started);
        self.procs.clear();
        forget_empty(&mut self.groups, &HashSet::new());
        forget_empty(&mut self.sessions, &HashSet::new());
        Observation::default()
    }

    /// [`observe_proved`](Self::observe_proved) of a table read at one instant.
    #[cfg(test)]
    pub fn observe(&mut self, snap: &[ProcStat], adopter: Option<Adopter>) -> Observation {
        self.observe_proved(snap, adopter, |_| true)
    }

    /// One look at the table: claims the run's processes, remembers them with their groups and
    /// sessions, forgets what has been gone long enough, returns the live members.
    /// `unchanged(parent)`, asked after the table was read, says whether that process still
    /// holds its pid: a table not read at one instant (`/proc`) may show a parent, then, once
    /// its pid was reused, the new holder's children naming it as theirs.
    pub fn observe_proved(
        &mut self,
        snap: &[ProcStat],
        adopter: Option<Adopter>,
        mut unchanged: impl FnMut(Identity) -> bool,
    ) -> Observation {
        let started: HashMap<i32, u64> = snap.iter().map(|e| (e.pid, e.starttime)).collect();
        forget_reused(&mut self.groups, &started);
        forget_reused(&mut self.sessions, &started);
        if self.leader.is_none() {
            if let Some(e) = self
                .leader_pid
                .and_then(|p| snap.iter().find(|e| e.pid == p))
            {
                self.leader = Some(Identity {
                    pid: e.pid,
                    starttime: e.starttime,
                });
            }
        }
        let mut children: HashMap<i32, Vec<usize>> = HashMap::new();
        for (i, e) in snap.iter().enumerate() {
            children.entry(e.ppid).or_default().push(i);
        }
        // Groups and sessions named after these pids were created by the run's own processes
        // since the last look: the creator was alive then, so the number was not free to reuse.
        // A recorded process whose pid another process holds now died and its number was
        // reused: a group or session of that number is the newcomer's.
        let founders: HashMap<i32, u64> = self
            .procs
            .iter()
            .filter(|(pid, r)| started.get(pid).is_none_or(|&now| now == r.starttime))
            .map(|(&pid, r)| (pid, r.starttime))
            .collect();
        let mut ours = vec![false; snap.len()];
        let mut queue = Vec::new();
        let mut recorded = 0;
        let mut fresh: HashMap<i32, u64> = HashMap::new();
        loop {
            for (i, e) in snap.iter().enumerate() {
                if !ours[i] && self.claims(e, &founders, adopter) {
                    ours[i] = true;
                    queue.push(i);
                }
            }
            while let Some(i) = queue.pop() {
                let Some(kids) = children.get(&snap[i].pid) else {
                    continue;
                };
                let parent = &snap[i];
                if !unchanged(Identity {
                    pid: parent.pid,
                    starttime: parent.starttime,
                }) {
                    continue;
                }
                for &c in kids {
                    if !ours[c] {
                        ours[c] = true;
                        queue.push(c);
                    }
                }
            }
            // Who can have founded a group or session of the run: a process of the run alive
            // at the last look (`founders`), or one claimed in this look (a zombie too: its
            // pid is its own until it is reaped).
            let claimed: HashMap<i32, u64> = snap
                .iter()
                .zip(&ours)
                .filter(|(_, &o)| o)
                .map(|(e, _)| (e.pid, e.starttime))
                .collect();
            let founder = |id: i32| claimed.get(&id).or_else(|| founders.get(&id)).copied();
            let known = (self.groups.len(), self.sessions.len());
            for (i, e) in snap.iter().enumerate() {
                if ours[i] {
                    self.remember_session(e.sid, founder(e.sid));
                    // A group lies within one session: in a session the run created, every
                    // process descends from the run, so every group was founded by the run.
                    let in_ours = e.sid != self.own_sid && self.sessions.contains_key(&e.sid);
                    self.remember_group(e.pgid, founder(e.pgid), in_ours);
                    if !e.is_dead() {
                        self.note_founder(e);
                    }
                    if !e.is_dead() && fresh.insert(e.pid, e.starttime).is_none() {
                        let was = self.procs.get(&e.pid).map(|r| r.starttime);
                        if was != Some(e.starttime) {
                            recorded += 1;
                        }
                    }
                }
            }
            // A newly remembered group or session may hold processes not claimed yet.
            if (self.groups.len(), self.sessions.len()) == known {
                break;
            }
        }
        // Only processes alive now are kept: a dead one names no live process, and a group or
        // session it founded was claimed above or has no member to claim.
        self.procs = fresh
            .into_iter()
            .map(|(pid, starttime)| (pid, Recorded { starttime }))
            .collect();
        let pgids: HashSet<i32> = snap.iter().map(|e| e.pgid).collect();
        let sids: HashSet<i32> = snap.iter().map(|e| e.sid).collect();
        forget_empty(&mut self.groups, &pgids);
        forget_empty(&mut self.sessions, &sids);
        let members = snap
            .iter()
            .zip(&ours)
            .filter(|(e, &o)| o && !e.is_dead())
            .map(|(e, _)| e.clone())
            .collect();
        Observation { members, recorded }
    }

    fn claims(&self, e: &ProcStat, founders: &HashMap<i32, u64>, adopter: Option<Adopter>) -> bool {
        let id = Identity {
            pid: e.pid,
            starttime: e.starttime,
        };
        if self.leader == Some(id) {
            return true;
        }
        if self
            .procs
            .get(&e.pid)
            .is_some_and(|r| r.starttime == e.starttime)
        {
            return true;
        }
        if self.groups.contains_key(&e.pgid) || self.sessions.contains_key(&e.sid) {
            return true;
        }
        // A member of a group or session is born after its founder (a session starts with its
        // founder alone; setpgid(2) only moves the caller or its own children).
        let founded = |id: i32| {
            id != self.own_pgid
                && id != self.own_sid
                && founders.get(&id).is_some_and(|&st| e.starttime >= st)
        };
        if founded(e.pgid) || founded(e.sid) {
            return true;
        }
        matches!((adopter, self.leader), (Some(a), Some(l)) if e.ppid == a.pid && e.starttime >= l.starttime)
    }

    /// Remembers group `pgid` of a claimed process if the run created it: its founder (the
    /// process whose pid is `pgid`) is of the run, with start time `founder`, or it lies in a
    /// session the run created (`in_ours`). A group of reaper's session that a process of the
    /// run merely joined (reaper's own, the login shell's, another job's) is not the run's: the
    /// process is followed by itself, the group's other members are not, and the group is
    /// never signalled.
    fn remember_group(&mut self, pgid: i32, founder: Option<u64>, in_ours: bool) {
        if pgid > 0 && pgid != self.own_pgid {
            remember(&mut self.groups, pgid, founder, in_ours);
        }
    }

    /// Remembers session `sid` of a claimed process if the run created it (its founder is of
    /// the run). No process can join a session, but the leader starts in reaper's (never
    /// remembered), and a session whose founder was never seen as the run's is not proven the
    /// run's.
    fn remember_session(&mut self, sid: i32, founder: Option<u64>) {
        if sid > 0 && sid != self.own_sid {
            remember(&mut self.sessions, sid, founder, false);
        }
    }

    /// `e` is the run's and leads its group or session: remember who founded it.
    fn note_founder(&mut self, e: &ProcStat) {
        for (id, table) in [(e.pgid, &mut self.groups), (e.sid, &mut self.sessions)] {
            if id == e.pid {
                if let Some(r) = table.get_mut(&id) {
                    r.founder = Some(e.starttime);
                }
            }
        }
    }
}

/// Keeps a remembered group or session remembered; remembers a new one only if the run created
/// it (see [`Tracker::remember_group`]).
fn remember(ids: &mut HashMap<i32, Remembered>, id: i32, founder: Option<u64>, ours: bool) {
    if let Some(r) = ids.get_mut(&id) {
        r.empty_looks = 0;
    } else if founder.is_some() || ours {
        ids.insert(
            id,
            Remembered {
                empty_looks: 0,
                founder,
            },
        );
    }
}

fn forget_empty(ids: &mut HashMap<i32, Remembered>, present: &HashSet<i32>) {
    ids.retain(|id, r| {
        if present.contains(id) {
            r.empty_looks = 0;
        } else {
            r.empty_looks += 1;
        }
        r.empty_looks < FORGET_AFTER_EMPTY_LOOKS
    });
}

/// Forgets groups and sessions whose number now belongs to another process (see
/// [`Remembered::founder`]): signalling such a group would reach processes not the run's.
fn forget_reused(ids: &mut HashMap<i32, Remembered>, started: &HashMap<i32, u64>) {
    ids.retain(|id, r| match (r.founder, started.get(id)) {
        (Some(founder), Some(&now)) => now == founder,
        _ => true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN_PGID: i32 = 100;
    const OWN_SID: i32 = 50;
    const REAPER: i32 = 100;

    fn p(pid: i32, ppid: i32, pgid: i32, sid: i32, starttime: u64) -> ProcStat {
        ProcStat {
            pid,
            ppid,
            pgid,
            sid,
            starttime,
            state: 'S',
            comm: format!("p{pid}"),
        }
    }

    fn zombie(mut e: ProcStat) -> ProcStat {
        e.state = 'Z';
        e
    }

    /// The user's shell (50, its own session), reaper (100, group 100 in session 50) and an
    /// unrelated job of the same terminal (60).
    fn base() -> Vec<ProcStat> {
        vec![
            p(1, 0, 1, 1, 0),
            p(50, 1, 50, 50, 10),
            p(60, 50, 60, 50, 11),
            p(REAPER, 50, OWN_PGID, OWN_SID, 20),
        ]
    }

    fn with(extra: &[ProcStat]) -> Vec<ProcStat> {
        let mut v = base();
        v.extend_from_slice(extra);
        v
    }

    fn tracker_with_leader() -> Tracker {
        let mut t = Tracker::new(OWN_PGID, OWN_SID);
        t.set_leader(200, 200);
        t
    }

    fn pids(o: &Observation) -> Vec<i32> {
        let mut v: Vec<i32> = o.members.iter().map(|e| e.pid).collect();
        v.sort_unstable();
        v
    }

    /// `/proc` is read one process at a time: the run's 201 is read, exits and is reaped, and
    /// its pid goes to a process of the user's (parent 60) whose child, read after, names 201
    /// as its parent. That child is not the run's: 201 no longer holds its pid.
    #[test]
    fn a_child_of_a_parent_whose_pid_was_reused_during_the_look_is_not_claimed() {
        let snap = with(&[
            p(200, REAPER, 200, OWN_SID, 30),
            p(201, 200, 200, OWN_SID, 31),
            p(300, 201, 300, 300, 40),
        ]);
        let gone = Identity {
            pid: 201,
            starttime: 31,
        };
        let mut t = tracker_with_leader();
        let o = t.observe_proved(&snap, None, |parent| parent != gone);
        assert_eq!(pids(&o), vec![200, 201]);
        assert!(t.sessions().is_empty() && t.groups() == vec![200]);
        // While 201 still holds its pid, its child is the run's.
        let mut t = tracker_with_leader();
        let o = t.observe_proved(&snap, None, |_| true);
        assert_eq!(pids(&o), vec![200, 201, 300]);
    }

    #[test]
    fn descendants_are_found_through_ppid_chains() {
        let mut t = tracker_with_leader();
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 200, OWN_SID, 31),
                p(202, 201, 202, OWN_SID, 32),
                p(203, 202, 203, 203, 33),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 201, 202, 203]);
        assert_eq!(o.recorded, 4);
        assert_eq!(t.groups(), vec![200, 202, 203]);
        assert_eq!(t.sessions(), vec![203]);
        assert_eq!(
            t.leader(),
            Some(Identity {
                pid: 200,
                starttime: 30
            })
        );
    }

    #[test]
    fn reapers_own_group_and_session_are_never_remembered_or_matched() {
        let mut t = tracker_with_leader();
        // A descendant that joined reaper's own group is still the run's (by pid), but neither
        // reaper's group nor its session (the user's terminal) is remembered, so the user's
        // shell and reaper itself are never members.
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, OWN_PGID, OWN_SID, 31),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 201]);
        assert!(!t.groups().contains(&OWN_PGID));
        assert!(!t.sessions().contains(&OWN_SID));
        // The leader exits; its child lives on in reaper's group: still claimed by identity.
        let o = t.observe(&with(&[p(201, 1, OWN_PGID, OWN_SID, 31)]), None);
        assert_eq!(pids(&o), vec![201]);
        assert!(o
            .members
            .iter()
            .all(|e| ![1, 50, 60, REAPER].contains(&e.pid)));
    }

    #[test]
    fn an_orphan_is_still_matched_through_its_remembered_session() {
        let mut t = tracker_with_leader();
        t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 201, 201, 31),
                p(202, 201, 201, 201, 32),
            ]),
            None,
        );
        // 201 (the session leader) exits; 202 is reparented to init, and forks 203 later.
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(202, 1, 201, 201, 32),
                p(203, 202, 203, 201, 40),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202, 203]);
    }

    #[test]
    fn a_session_founded_since_the_last_look_is_claimed() {
        let mut t = tracker_with_leader();
        // 201 is seen while still in the leader's group...
        t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 200, OWN_SID, 31),
            ]),
            None,
        );
        // ...then, between two looks, calls setsid(), forks 202 and exits: 202 is an orphan in
        // session 201, which only the pid of 201 connects to the run.
        let o = t.observe(
            &with(&[p(200, REAPER, 200, OWN_SID, 30), p(202, 1, 201, 201, 33)]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202]);
        assert!(t.sessions().contains(&201));
    }

    #[test]
    fn a_fast_double_fork_between_two_looks_is_missed_without_an_adopter() {
        let mut t = tracker_with_leader();
        t.observe(&with(&[p(200, REAPER, 200, OWN_SID, 30)]), None);
        // 201 was born, called setsid(), forked 202 and exited, all between two looks.
        let snap = with(&[p(200, REAPER, 200, OWN_SID, 30), p(202, 1, 201, 201, 33)]);
        assert_eq!(pids(&t.observe(&snap, None)), vec![200]);
        // The same orphan reparented to reaper as child subreaper is adopted.
        let snap = with(&[
            p(200, REAPER, 200, OWN_SID, 30),
            p(202, REAPER, 201, 201, 33),
        ]);
        let adopter = Some(Adopter { pid: REAPER });
        assert_eq!(pids(&t.observe(&snap, adopter)), vec![200, 202]);
    }

    #[test]
    fn adoption_skips_reapers_children_born_before_the_leader() {
        let mut t = tracker_with_leader();
        // 150: reaper's guardian (or a kept process of an earlier run), older than the leader.
        let snap = with(&[
            p(150, REAPER, 150, 150, 25),
            p(200, REAPER, 200, OWN_SID, 30),
        ]);
        let o = t.observe(&snap, Some(Adopter { pid: REAPER }));
        assert_eq!(pids(&o), vec![200]);
    }

    /// Issue 10 item 1: a process of the run joins a group of reaper's session it did not
    /// create — another job's (60, with a second member 61), the login shell's (50, which also
    /// names the session) — and stays in it. It is followed; the group is neither remembered
    /// (so never signalled) nor a reason to claim its other members.
    #[test]
    fn a_group_the_run_merely_joined_is_never_claimed() {
        for foreign in [60, 50] {
            let mut t = tracker_with_leader();
            let job = p(61, 50, 60, 50, 12);
            t.observe(
                &with(&[
                    job.clone(),
                    p(200, REAPER, 200, OWN_SID, 30),
                    p(201, 200, 200, OWN_SID, 31),
                ]),
                None,
            );
            for _ in 0..3 {
                let o = t.observe(
                    &with(&[
                        job.clone(),
                        p(200, REAPER, 200, OWN_SID, 30),
                        p(201, 200, foreign, OWN_SID, 31),
                    ]),
                    Some(Adopter { pid: REAPER }),
                );
                assert_eq!(pids(&o), vec![200, 201], "joined {foreign}");
                assert_eq!(t.groups(), vec![200], "joined {foreign}");
                assert!(t.sessions().is_empty());
            }
            // The leader exits: the joiner is still followed by identity, alone.
            let o = t.observe(&with(&[job.clone(), p(201, 1, foreign, OWN_SID, 31)]), None);
            assert_eq!(pids(&o), vec![201], "joined {foreign}");
            assert!(!t.groups().contains(&foreign));
        }
    }

    /// Issue 10 item 1: the leader joins a foreign group before the first look, so nothing of
    /// the run was ever seen founding it.
    #[test]
    fn a_group_whose_founder_was_never_seen_in_the_run_is_not_claimed() {
        let mut t = tracker_with_leader();
        let o = t.observe(
            &with(&[p(61, 50, 60, 50, 12), p(200, REAPER, 60, OWN_SID, 30)]),
            None,
        );
        assert_eq!(pids(&o), vec![200]);
        assert!(!t.groups().contains(&60), "{:?}", t.groups());
    }

    /// A process of the run that founds a group of its own in reaper's session: the group is
    /// the run's, and claims a member orphaned in it between two looks.
    #[test]
    fn a_group_founded_by_a_run_member_is_claimed() {
        let mut t = tracker_with_leader();
        t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 200, OWN_SID, 31),
            ]),
            None,
        );
        // 201 calls setpgid(0, 0), forks 202, and exits before the next look: 202 is an orphan
        // linked to the run only by group 201.
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(202, 1, 201, OWN_SID, 32),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202]);
        assert_eq!(t.groups(), vec![200, 201]);
    }

    /// A group whose number was once a run member's pid, but which an unrelated process of
    /// reaper's session founded after that member died and its pid was reused, is not the
    /// run's, even when a process of the run joins it.
    #[test]
    fn a_group_of_a_reused_number_is_not_claimed() {
        let mut t = tracker_with_leader();
        t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 200, OWN_SID, 31),
                p(202, 200, 200, OWN_SID, 32),
            ]),
            None,
        );
        // 201 died; pid 201 now belongs to a job of the user's shell, in a group of its own
        // with another member (203), and the run's 202 joins that group.
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 50, 201, OWN_SID, 90),
                p(202, 200, 201, OWN_SID, 32),
                p(203, 201, 201, OWN_SID, 91),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202]);
        assert!(!t.groups().contains(&201), "{:?}", t.groups());
    }

    /// A session is claimed only when the run founded it: an adopted orphan's session whose
    /// founder was never seen (a double fork within one look) is not proven the run's, though
    /// the orphan itself is followed.
    #[test]
    fn a_session_whose_founder_was_never_seen_is_not_claimed() {
        let mut t = tracker_with_leader();
        t.observe(&with(&[p(200, REAPER, 200, OWN_SID, 30)]), None);
        let snap = with(&[
            p(200, REAPER, 200, OWN_SID, 30),
            p(202, REAPER, 201, 201, 33),
        ]);
        let o = t.observe(&snap, Some(Adopter { pid: REAPER }));
        assert_eq!(pids(&o), vec![200, 202]);
        assert!(t.sessions().is_empty(), "{:?}", t.sessions());
        assert_eq!(t.groups(), vec![200]);
    }

    #[test]
    fn a_zombie_is_not_a_member_but_its_session_still_claims() {
        let mut t = tracker_with_leader();
        // First seen as a zombie (the daemon's middle), still unreaped by the leader.
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                zombie(p(201, 200, 201, 201, 31)),
                p(202, 1, 201, 201, 32),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202]);
    }

    #[test]
    fn a_reused_pid_is_not_the_remembered_process() {
        let mut t = tracker_with_leader();
        t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 200, OWN_SID, 31),
            ]),
            None,
        );
        // 201 died; an unrelated process now has pid 201 (another start time, another group
        // and session, another parent).
        let o = t.observe(
            &with(&[p(200, REAPER, 200, OWN_SID, 30), p(201, 60, 60, 50, 99)]),
            None,
        );
        assert_eq!(pids(&o), vec![200]);
    }

    #[test]
    fn an_empty_group_is_forgotten_so_a_reused_number_is_not_claimed() {
        let mut t = tracker_with_leader();
        t.observe(
            &with(&[p(200, REAPER, 200, OWN_SID, 30), p(201, 200, 201, 201, 31)]),
            None,
        );
        assert!(t.sessions().contains(&201));
        // Session 201 empties and stays empty for two looks...
        for _ in 0..FORGET_AFTER_EMPTY_LOOKS {
            t.observe(&with(&[p(200, REAPER, 200, OWN_SID, 30)]), None);
        }
        assert!(!t.sessions().contains(&201) && !t.groups().contains(&201));
        // ...then pid 201 is reused by an unrelated process that starts a session of its own.
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 1, 201, 201, 500),
                p(205, 201, 201, 201, 501),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200]);
    }

    #[test]
    fn a_group_number_reused_within_one_look_is_forgotten() {
        let mut t = tracker_with_leader();
        // 201 founds group 201; 202 joins it.
        t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 201, OWN_SID, 31),
                p(202, 201, 201, OWN_SID, 32),
            ]),
            None,
        );
        assert!(t.groups().contains(&201));
        // Between two looks the whole group dies, and pid 201 goes to an unrelated process
        // that founds a group and a session of its own, with a child.
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 1, 201, 201, 900),
                p(205, 201, 201, 201, 901),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200]);
        assert!(!t.groups().contains(&201), "{:?}", t.groups());
        assert!(!t.sessions().contains(&201));
    }

    #[test]
    fn a_group_outliving_its_founder_stays_claimed() {
        let mut t = tracker_with_leader();
        t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(201, 200, 201, 201, 31),
                p(202, 201, 201, 201, 32),
            ]),
            None,
        );
        // The founder exits; its orphaned child keeps group and session 201 alive.
        let o = t.observe(
            &with(&[p(200, REAPER, 200, OWN_SID, 30), p(202, 1, 201, 201, 32)]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202]);
        assert!(t.groups().contains(&201));
    }

    #[test]
    fn one_empty_look_does_not_forget_a_group() {
        let mut t = tracker_with_leader();
        t.observe(
            &with(&[p(200, REAPER, 200, OWN_SID, 30), p(201, 200, 201, 201, 31)]),
            None,
        );
        t.observe(&with(&[p(200, REAPER, 200, OWN_SID, 30)]), None);
        let o = t.observe(
            &with(&[p(200, REAPER, 200, OWN_SID, 30), p(202, 1, 201, 201, 32)]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202]);
    }

    #[test]
    fn claims_reach_a_fixpoint_through_newly_remembered_groups() {
        let mut t = tracker_with_leader();
        // 301 (orphan, group 300 of session 201) is only reachable once 202 — an orphan in the
        // remembered session 201 — puts group 300 on the list.
        t.observe(
            &with(&[p(200, REAPER, 200, OWN_SID, 30), p(201, 200, 201, 201, 31)]),
            None,
        );
        let o = t.observe(
            &with(&[
                p(200, REAPER, 200, OWN_SID, 30),
                p(202, 1, 300, 201, 32),
                p(301, 1, 300, 201, 33),
            ]),
            None,
        );
        assert_eq!(pids(&o), vec![200, 202, 301]);
    }

    #[test]
    fn a_leader_identified_at_spawn_is_not_confused_with_a_reused_pid() {
        let mut t = tracker_with_leader();
        t.leader_started(30);
        // The leader was reaped before the first look and its pid reused: not the leader.
        let o = t.observe(&with(&[p(200, 60, 60, 50, 77)]), None);
        assert!(o.members.is_empty());
        assert_eq!(
            t.leader(),
            Some(Identity {
                pid: 200,
                starttime: 30
            })
        );
    }

    #[test]
    fn counts_only_newly_recorded_processes() {
        let mut t = tracker_with_leader();
        let snap = with(&[
            p(200, REAPER, 200, OWN_SID, 30),
            p(201, 200, 200, OWN_SID, 31),
        ]);
        assert_eq!(t.observe(&snap, None).recorded, 2);
        assert_eq!(t.observe(&snap, None).recorded, 0);
        assert_eq!(t.recorded().len(), 2);
    }

    #[test]
    fn unrelated_processes_are_never_claimed() {
        let mut t = tracker_with_leader();
        let o = t.observe(&with(&[p(200, REAPER, 200, OWN_SID, 30)]), None);
        assert_eq!(pids(&o), vec![200]);
        // Without a leader nothing at all is claimed.
        let mut t = Tracker::new(OWN_PGID, OWN_SID);
        assert!(t
            .observe(&base(), Some(Adopter { pid: REAPER }))
            .members
            .is_empty());
    }
}
